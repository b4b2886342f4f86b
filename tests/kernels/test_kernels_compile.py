"""Every Triton kernel compiles for sm_90 (down to a cubin) with the launch arguments its wrapper passes.

The interpreter used by the other tests accepts code the real compiler rejects, so this runs the
compiler itself, in a subprocess without TRITON_INTERPRET; no GPU is needed.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")
ROOT = Path(__file__).resolve().parents[2]


def test_all_kernels_compile_for_hopper():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run(
        [sys.executable, "-m", "latency_bench.kernels_compile"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    compiled = [line for line in proc.stdout.splitlines() if line.startswith("ok ")]
    assert len(compiled) >= 15, proc.stdout
    # the confidence kernel's per-lane candidates exist to cut the per-tile reductions: their loops wait less,
    # and with per-lane maxima the loop has no barrier at all
    # (SASS as the GPU issues it), and each issues fewer instructions a tile
    barriers, instructions = {}, {}
    for line in compiled:
        if "_partials_kernel" in line and "bfloat16 T=0.0" in line and "stages=" not in line and "max_reg" not in line:
            accumulate = line.split("accumulate=")[1].split(" ")[0]
            barriers[accumulate] = int(line.split(" instructions / ")[1].split(" ")[0])
            instructions[accumulate] = int(line.split(" SASS instructions")[0].split(" ")[-1])
    assert barriers["lanes-max"] == 0 < barriers["lanes"] < barriers["tiles"], compiled
    assert instructions["lanes-max"] < instructions["lanes"] < instructions["tiles"], compiled
    # the pipelined streaming loop copies its loads ahead; the single-load loop does not
    streaming = [line for line in compiled if "confidence" in line and "_partials_kernel" in line]
    assert all(("stages=" in line) == ("cp.async" in line) for line in streaming) and any("stages=" in line
                                                                                        for line in streaming), streaming
    # under PDL every kernel of a pass waits for the one before, and only the thin products (their weights) and
    # the block attention's partials (the cached keys) read before that wait; launched plainly, none waits
    pdl = [line for line in compiled if line.startswith("ok   PDL ")]
    assert len(pdl) == 11 and all("waits for the kernel before" in line for line in pdl), compiled
    readers = ("_thin_linear_kernel", "_qkv_rope_kernel", "_block_partials_kernel")
    assert all(("after 0 L2 prefetches" in line) != any(name in line for name in readers) for line in pdl), pdl
    assert not any("waits for the kernel before" in line for line in compiled if line not in pdl), compiled
    # a pass's kernels in bfloat16 (what a GPU engine runs) keep everything in registers: no spills to local memory
    assert not any("spill" in line for line in pdl), pdl
    # each launch fits an SM at least once, by the registers ptxas gave it and its shared memory
    held = [int(line.split(" program(s) an SM")[0].split(": ")[-1]) for line in compiled]
    assert len(held) == len(compiled) and min(held) >= 1, compiled


@pytest.mark.parametrize(("registers", "warps", "shared", "programs"), [
    (140, 8, 112 * 1024, 1),  # the prefill's 64 x 64 tiles: 8 warps of 140 registers take 36K of the 64K
    (58, 8, 0, 4),  # the confidence kernel's lanewise loop: 58 registers round to 64 a thread (2048 a warp)
    (32, 8, 0, 8),  # its tile-reducing loop: warps bound it (64 an SM)
    (32, 1, 0, 32),  # tiny programs: at most 32 an SM
    (48, 4, 80 * 1024, 2),  # the thin product: shared memory bounds it (228 KiB an SM, 1 KiB reserved a program)
])  # fmt: skip
def test_programs_an_sm_holds(registers, warps, shared, programs):
    from latency_bench.kernels_compile import Compiled

    compiled = Compiled(0.0, shared, 0, 0, False, 0, False, 0, registers, warps)
    assert compiled.programs_per_sm == programs
