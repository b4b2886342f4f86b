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
        if "_partials_kernel" in line and "bfloat16 T=0.0" in line and "stages=" not in line:
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
