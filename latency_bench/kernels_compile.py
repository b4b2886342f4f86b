"""Compile every Triton kernel for a Hopper GPU without one: the compiled-mode check the interpreter cannot do.

The CPU interpreter runs kernels as Python, so it accepts code the real compiler rejects (a
non-constexpr global, a loop-carried type change, an unsupported dot). This runs the real host
wrappers on CPU tensors with each kernel replaced by a recorder, then compiles each recorded
launch ahead of time for ``sm_90`` down to a cubin (Triton ships ptxas), with the divisibility a launch
specializes, so its shared memory, registers (and so how many programs an SM holds), loop cost and register spills
are the device's. Run it in a process *without*
``TRITON_INTERPRET``: ``python -m latency_bench.kernels_compile``.
"""

from __future__ import annotations

import os
import re
import sys
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from dlm.cli_args import ArgumentParser

_TYPES = {
    torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16",
    torch.int64: "i64", torch.int32: "i32", torch.uint8: "u8", torch.bool: "i1",
}  # fmt: skip


class _Recorder:
    """Stands in for a JIT kernel: ``kernel[grid](*args, **kwargs)`` records instead of launching."""

    def __init__(self, fn) -> None:
        self.fn = fn
        self.calls: list[tuple[tuple, dict]] = []

    def __getitem__(self, grid) -> Callable[..., None]:
        return lambda *args, **kwargs: self.calls.append((args, kwargs))


def _arg_type(value: object) -> str:
    if isinstance(value, torch.Tensor):
        return "*" + _TYPES[value.dtype]
    if isinstance(value, bool):
        return "i1"
    if isinstance(value, int):
        return "i32" if -(2**31) <= value < 2**31 else "i64"
    if isinstance(value, float):
        return "fp32"
    raise TypeError(f"no Triton type for {type(value).__name__}")


def _divisible(value: object) -> bool:
    """Whether a launch would specialize this argument as divisible by 16, as Triton's JIT does for pointers
    16-byte aligned and integers that are multiples of 16: it is what lets a load be vectorized."""
    if isinstance(value, torch.Tensor):
        return value.data_ptr() % 16 == 0
    return isinstance(value, int) and not isinstance(value, bool) and value % 16 == 0


SHARED_MEMORY_LIMIT = 227 * 1024  # bytes per block on sm_90 (H100/H200)
# what one sm_90 SM holds, for programs_per_sm: registers, their allocation unit (a warp's, rounded up to 256),
# warps, shared memory (and what the driver reserves a block) and blocks
SM_REGISTERS, REGISTER_UNIT, SM_WARPS, SM_SHARED, BLOCK_RESERVED, SM_BLOCKS = 65536, 256, 64, 228 * 1024, 1024, 32


@dataclass(frozen=True)
class Compiled:
    seconds: float
    shared_bytes: int
    loop_instructions: int  # SASS instructions in the busiest block that loads from global memory (the loop)
    loop_barriers: int  # BAR.SYNC in that block: each is a wait for every warp of the program
    waits_for_previous: bool  # griddepcontrol.wait: the kernel takes part in programmatic dependent launch
    l2_prefetches: int  # prefetch.global.L2 instructions: reads issued before that wait
    async_copies: bool  # cp.async: a software-pipelined loop's loads, copied to shared memory stages ahead
    spill_stores: int  # STL in the SASS: registers spilled to local memory (off-chip, through L1)
    registers: int  # a thread's, from the cubin (cuobjdump -res-usage)
    warps: int

    @property
    def programs_per_sm(self) -> int:
        """How many programs (CTAs) of this kernel one SM holds at once, by registers, warps, shared memory and
        blocks: under two, a program's waits for memory are not covered by another's work."""
        warp_registers = -(-self.registers * 32 // REGISTER_UNIT) * REGISTER_UNIT
        return min(SM_REGISTERS // (warp_registers * self.warps), SM_WARPS // self.warps,
                   SM_SHARED // (self.shared_bytes + BLOCK_RESERVED), SM_BLOCKS)  # fmt: skip


def cubin_registers(cubin: bytes) -> int:
    """A thread's registers in ``cubin``, as ``cuobjdump -res-usage`` (which Triton ships) reports them."""
    import subprocess
    import tempfile

    from triton.tools.disasm import path_to_cuobjdump

    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        usage = subprocess.run([path_to_cuobjdump(), "-res-usage", f.name], capture_output=True, text=True,
                               check=True).stdout  # fmt: skip
    return int(re.search(r"REG:(\d+)", usage).group(1))


def loop_cost(sass: str) -> tuple[int, int]:
    """Instructions and barriers of the largest SASS basic block with a global load: a streaming kernel's loop
    body as the GPU issues it (after ptxas, which expands some PTX instructions into several), a static cost to
    compare variants by when no GPU can time them."""
    blocks = re.split(r"\n[\w.$]+:\n", sass)
    loads = [b for b in blocks if "LDG" in b] or [sass]
    body = max(loads, key=lambda b: b.count(";"))
    return body.count(";"), len(re.findall(r"\bBAR\.SYNC", body))


def compile_call(fn, args: tuple, kwargs: dict, arch: int = 90) -> Compiled:
    """Compile one recorded launch for ``sm_<arch>``."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from triton.tools.disasm import get_sass

    kwargs = dict(kwargs)
    options = {k: kwargs.pop(k) for k in ("num_warps", "num_stages", "launch_pdl", "maxnreg") if k in kwargs}
    if "UPCAST" in kwargs:  # the wrappers ran on CPU tensors; compile what a GPU launch would use
        kwargs["UPCAST"] = False
        kwargs["PREC"] = "ieee" if args[0].dtype == torch.float32 else "tf32"
    names = fn.arg_names
    values = dict(zip(names, args, strict=False)) | kwargs
    constexprs = {p.name: values[p.name] for p in fn.params if p.is_constexpr}
    signature = {n: "constexpr" if n in constexprs else _arg_type(values[n]) for n in names}
    attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(names) if n not in constexprs and _divisible(values[n])}
    t0 = time.perf_counter()
    kernel = triton.compile(ASTSource(fn, signature, constexprs, attrs), target=GPUTarget("cuda", arch, 32),
                            options=options)  # fmt: skip
    seconds = time.perf_counter() - t0
    ptx, sass = kernel.asm["ptx"], get_sass(kernel.asm["cubin"])
    return Compiled(seconds, int(kernel.metadata.shared), *loop_cost(sass), "griddepcontrol.wait" in ptx,
                    ptx.count("prefetch.global.L2"), "cp.async." in ptx, len(re.findall(r"\bSTL\b", sass)),
                    cubin_registers(kernel.asm["cubin"]), int(kernel.metadata.num_warps))  # fmt: skip


@contextmanager
def _programmatic_launches():
    """The wrappers' launches as ``kernels.pdl.programmatic_launch`` makes them on a Hopper GPU."""
    from kernels import pdl

    original = pdl.launch_options
    pdl.launch_options = lambda device: {"GDC": True, "launch_pdl": True}
    try:
        yield
    finally:
        pdl.launch_options = original


def _confidence_launch(dtype: torch.dtype, temperature: float, commit: bool, accumulation: dict[str, object]) -> str:
    """Fused confidence selection over two 16-token blocks of a 151,936-token vocabulary; returns its label."""
    from kernels import confidence_triton

    logits = torch.zeros(2, 16, 151936, dtype=dtype)
    masked, ids = torch.ones(2, 16, dtype=torch.bool), torch.zeros(2, 16, dtype=torch.int64)
    confidence_triton.confidence_select(logits, masked, ids if commit else None, 0.9, temperature,
                                        torch.tensor([1], dtype=torch.int64), block_v=2048, splits=25,
                                        **accumulation)  # fmt: skip
    name = "lanes-max" if accumulation.get("lane_max") else "lanes" if accumulation["lanewise"] else "tiles"
    stages, cap = accumulation.get("stages", 1), accumulation.get("max_registers")
    return (f"confidence {dtype} T={temperature} commit={commit} accumulate={name}" + f" stages={stages}" * (stages > 1)
            + f" max_registers={cap}" * bool(cap))


def _block_attention_launch(dtype: torch.dtype, head_dim: int, with_block: bool, one_launch: bool = False) -> str:
    """A 16-token block's attention over 512 cached keys (16 / 8 heads), ``one_launch``: its last split merging;
    returns its label."""
    from kernels import attention_triton

    q = torch.zeros(1, 16, 16, head_dim, dtype=dtype)
    kc = torch.zeros(1, 528, 8, head_dim, dtype=dtype)
    kb = torch.zeros(1, 16, 8, head_dim, dtype=dtype) if with_block else None
    lengths = torch.full((1,), 512, dtype=torch.int32)
    attention_triton.block_attention(q, kc, kc, lengths, kb, kb, 0.1, splits=8, block_n=64, one_launch=one_launch)
    return f"block_attention {dtype} D={head_dim} block={with_block}" + " one launch" * one_launch


def _layer_step_launches(dtype: torch.dtype) -> None:
    """A 1.7B layer's residual add + RMSNorm and SwiGLU activation at a 16-token block."""
    from kernels import fused_triton

    x = torch.zeros(16, 2048, dtype=dtype)
    fused_triton.add_rms_norm(x, x, torch.ones(2048, dtype=dtype), 1e-6, x)
    fused_triton.silu_mul(torch.zeros(16, 12288, dtype=dtype), torch.zeros(16, 6144, dtype=dtype))


def _folded_mlp_launches(dtype: torch.dtype, recorders: dict[str, _Recorder],
                         collect: Callable[[str, dict[str, _Recorder]], None], label: str) -> None:  # fmt: skip
    """A 1.7B layer's MLP on the thin kernel, each product collected under ``label``: gate/up of the residual
    stream's RMSNorm, then down of their SwiGLU activation added to the residual stream (K split, the last split
    of each column tile summing and adding)."""
    from kernels import thin_linear_triton

    x, gate_up = torch.zeros(16, 2048, dtype=dtype), torch.zeros(16, 12288, dtype=dtype)
    thin_linear_triton.thin_linear(x, torch.zeros(12288, 2048, dtype=dtype), gate_up,
                                   norm_weight=torch.ones(2048, dtype=dtype), eps=1e-6)  # fmt: skip
    collect(f"{label} normed gate/up", recorders)
    thin_linear_triton.thin_linear(gate_up, torch.zeros(2048, 6144, dtype=dtype), x, gated=True, add=True)
    collect(f"{label} gated down added (K split)", recorders)


def _qkv_rope_launch(dtype: torch.dtype, qk_norm: bool) -> None:
    """A 1.7B layer's attention input in one launch at a 16-token block (16 / 8 heads of 128), from the RMSNorm of
    the residual stream, K split in 4."""
    from kernels import qkv_rope_triton

    weight = torch.ones(128, dtype=dtype) if qk_norm else None
    cache = torch.zeros(1, 528, 8, 128, dtype=dtype)
    qkv_rope_triton.qkv_rope(torch.zeros(1, 16, 2048, dtype=dtype), torch.zeros(4096, 2048, dtype=dtype), None,
                             (torch.ones(2048, dtype=dtype), 1e-6), 16, 8, weight, weight, 1e-6, torch.zeros(16, 64),
                             torch.zeros(16, 64), torch.arange(16), cache, cache)  # fmt: skip


def _qk_norm_rope_launch(dtype: torch.dtype, norm: bool) -> None:
    """A 16-token block's q/k norm (``norm``) + RoPE + KV write, 16 / 8 heads of 128."""
    from kernels import fused_triton

    weight = torch.ones(128, dtype=dtype) if norm else None
    cache = torch.zeros(1, 528, 8, 128, dtype=dtype)
    fused_triton.qk_norm_rope(torch.zeros(1, 16, 32 * 128, dtype=dtype), 16, 8, weight, weight, 1e-6,
                              torch.zeros(16, 64), torch.zeros(16, 64), torch.arange(16),
                              torch.zeros(1, 16, 16, 128, dtype=dtype), cache, cache)  # fmt: skip


def _pass_launches_under_pdl(collect: Callable[[str, dict[str, _Recorder]], None]) -> None:
    """A bf16 1.7B denoising pass's kernels, each launched to wait for the one before."""
    from kernels import attention_triton, confidence_triton, fused_triton, qkv_rope_triton, thin_linear_triton

    bf16 = torch.bfloat16
    with _programmatic_launches():
        with _recording(thin_linear_triton, ["_thin_linear_kernel"]) as recs:
            _folded_mlp_launches(bf16, recs, collect, "PDL thin_linear bf16")
        with _recording(qkv_rope_triton, ["_qkv_rope_kernel"]) as recs:
            _qkv_rope_launch(bf16, qk_norm=True)
            collect("PDL qkv_rope bf16", recs)
        with _recording(fused_triton, ["_add_rms_norm_kernel", "_silu_mul_kernel", "_qk_norm_rope_kernel"]) as recs:
            _layer_step_launches(bf16)
            _qk_norm_rope_launch(bf16, norm=True)
            collect("PDL fused bf16", recs)
        with _recording(attention_triton, ["_block_partials_kernel", "_block_combine_kernel"]) as recs:
            _block_attention_launch(bf16, 128, with_block=False)
            collect("PDL block_attention bf16", recs)
            _block_attention_launch(bf16, 128, with_block=False, one_launch=True)
            collect("PDL block_attention bf16 one launch", recs)
        with _recording(confidence_triton, ["_partials_kernel", "_select_kernel"]) as recs:
            _confidence_launch(bf16, 0.0, True, {"lanewise": True})
            collect("PDL confidence bf16", recs)


@contextmanager
def _recording(module, names: list[str]):
    originals = {n: getattr(module, n) for n in names}
    recorders = {n: _Recorder(f) for n, f in originals.items()}
    for n, r in recorders.items():
        setattr(module, n, r)
    try:
        yield recorders
    finally:
        for n, f in originals.items():
            setattr(module, n, f)


def recorded_launches() -> list[tuple[str, object, tuple, dict]]:
    """Representative launches of every kernel, with the GPU tile configurations."""
    from kernels import (
        attention_triton,
        confidence_triton,
        fused_triton,
        qkv_rope_triton,
        rotary_triton,
        thin_linear_triton,
    )

    launches: list[tuple[str, object, tuple, dict]] = []

    def collect(label: str, recorders: dict[str, _Recorder]) -> None:
        for name, rec in recorders.items():
            launches.extend((f"{label} {name}", rec.fn, a, k) for a, k in rec.calls)
            rec.calls.clear()

    with _recording(confidence_triton, ["_partials_kernel", "_select_kernel"]) as recs:
        tiles, lanes, lanes_max = {"lanewise": False}, {"lanewise": True}, {"lanewise": True, "lane_max": True}
        for dtype, temperature, commit, accumulation in [
                (torch.bfloat16, 0.0, True, tiles), (torch.float16, 0.8, True, tiles), (torch.float32, 0.0, False, tiles),
                (torch.bfloat16, 0.0, True, lanes), (torch.float32, 0.8, False, lanes),
                (torch.bfloat16, 0.0, True, lanes_max), (torch.float32, 0.8, False, lanes_max),
                (torch.bfloat16, 0.0, True, lanes_max | {"stages": 3}), (torch.float32, 0.8, False, tiles | {"stages": 3}),
                (torch.bfloat16, 0.0, True, lanes | {"max_registers": 48}),
                (torch.bfloat16, 0.0, True, lanes | {"max_registers": 40, "stages": 3})]:  # fmt: skip
            collect(_confidence_launch(dtype, temperature, commit, accumulation), recs)
    with _recording(attention_triton, ["_block_partials_kernel", "_block_combine_kernel"]) as recs:
        for dtype, head_dim, with_block, one_launch in [
                (torch.bfloat16, 128, False, False), (torch.float16, 128, True, False), (torch.float32, 64, True, False),
                (torch.float32, 128, False, False), (torch.bfloat16, 128, False, True), (torch.float32, 64, True, True)]:  # fmt: skip
            collect(_block_attention_launch(dtype, head_dim, with_block, one_launch), recs)
    with _recording(attention_triton, ["_block_causal_kernel"]) as recs:
        for dtype, head_dim in [(torch.bfloat16, 128), (torch.float32, 64), (torch.float32, 128)]:
            q = torch.zeros(1, 512, 16, head_dim, dtype=dtype)
            k = torch.zeros(1, 512, 8, head_dim, dtype=dtype)
            attention_triton.block_causal_attention(q, k, k, 16, 0, 0.1, block_m=64, block_n=64)
            collect(f"block_causal {dtype} D={head_dim}", recs)
        offset = torch.zeros(1, dtype=torch.int64)  # a graphed prefill's offset on the device
        attention_triton.block_causal_attention(q, k, k, 16, offset, 0.1, block_m=64, block_n=64)
        collect("block_causal fp32 D=128 device offset", recs)
        q, k = q.to(torch.bfloat16), k.to(torch.bfloat16)
        for block_m, block_n, stages in [(64, 64, 2), (128, 64, 2), (128, 64, 3), (128, 128, 2)]:  # the prefill sweep's
            attention_triton.block_causal_attention(q, k, k, 16, 0, 0.1, block_m=block_m, block_n=block_n,
                                                    heavy_first=True, stages=stages)  # fmt: skip
            collect(f"block_causal bf16 D=128 {block_m}x{block_n} {stages} stages heavy first", recs)
    with _recording(rotary_triton, ["_rotary_kernel"]) as recs:
        x = torch.zeros(1, 16, 16, 128, dtype=torch.bfloat16)
        table = torch.zeros(1, 16, 64)
        rotary_triton.apply_rotary(x, table, table, x)
        collect("rotary bf16", recs)
    with _recording(fused_triton, ["_add_rms_norm_kernel", "_silu_mul_kernel", "_qk_norm_rope_kernel"]) as recs:
        for dtype in (torch.bfloat16, torch.float32):
            _layer_step_launches(dtype)
            _qk_norm_rope_launch(dtype, norm=True)
            collect(f"fused {dtype}", recs)
        _qk_norm_rope_launch(torch.float32, norm=False)
        collect("rope without norm fp32", recs)
    with _recording(thin_linear_triton, ["_thin_linear_kernel"]) as recs:
        for dtype, split_k in [(torch.bfloat16, 1), (torch.bfloat16, 4), (torch.float32, 1)]:
            x, out = torch.zeros(16, 2048, dtype=dtype), torch.zeros(16, 4096, dtype=dtype)
            thin_linear_triton.thin_linear(x, torch.zeros(4096, 2048, dtype=dtype), out, split_k=split_k)
            collect(f"thin_linear {dtype} split_k={split_k}", recs)
        for dtype in (torch.bfloat16, torch.float32):
            _folded_mlp_launches(dtype, recs, collect, f"thin_linear {dtype}")
    with _recording(qkv_rope_triton, ["_qkv_rope_kernel"]) as recs:
        for dtype, qk_norm in [(torch.bfloat16, True), (torch.bfloat16, False), (torch.float32, True)]:
            _qkv_rope_launch(dtype, qk_norm)
            collect(f"qkv_rope {dtype} q/k norm={qk_norm}", recs)
    _pass_launches_under_pdl(collect)
    return launches


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m latency_bench.kernels_compile", description=__doc__.splitlines()[0])
    parser.add_argument("--arch", type=int, default=90, help="compute capability to target (90 = H100/H200)")
    args = parser.parse_args(argv)
    if os.environ.get("TRITON_INTERPRET", "0") == "1":
        raise SystemExit("kernels_compile: unset TRITON_INTERPRET; this checks the compiled path")
    failures = 0
    for label, fn, call_args, call_kwargs in recorded_launches():
        try:
            c = compile_call(fn, call_args, call_kwargs, args.arch)
            if c.shared_bytes > SHARED_MEMORY_LIMIT:
                raise RuntimeError(f"needs {c.shared_bytes} bytes of shared memory, over the {SHARED_MEMORY_LIMIT} limit")
            pdl = f", waits for the kernel before after {c.l2_prefetches} L2 prefetches" if c.waits_for_previous else ""
            pipelined = ", loads copied ahead (cp.async)" if c.async_copies else ""
            spills = f", {c.spill_stores} register spill stores" if c.spill_stores else ""
            print(f"ok   {label} ({c.seconds:.1f} s, {c.shared_bytes // 1024} KiB shared, {c.registers} registers x "
                  f"{c.warps} warps: {c.programs_per_sm} program(s) an SM, loop body "
                  f"{c.loop_instructions} SASS instructions / {c.loop_barriers} barriers{pdl}{pipelined}{spills})",
                  flush=True)  # fmt: skip
        except Exception as exc:
            failures += 1
            print(f"FAIL {label}: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
