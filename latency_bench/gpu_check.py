"""The GPU check: kernel correctness on the device, then kernel and model-shape timings vs their floors.

Run ``latency_bench/gpu_check.sh`` on a CUDA machine (PyTorch + Triton only, < 5 minutes on an
H200). Sections: copy bandwidth; every kernel against its reference; each kernel launched from Python
and replayed in a graph, against its torch reference and the bandwidth or compute floor; the issue's
model shapes (Triton with cuBLAS; with the thin matrix products taking in the layer's add-norms, SwiGLU and
q/k norm + RoPE, and with that and PDL; torch), with a profile of where a pass's time goes; a sweep of the
kernels' launch parameters; the engine's own model at the 1.7B shape; the engine on the demo checkpoint,
graphs off and on, and as ``dlm serve`` starts it there (bfloat16, graphs, its own layer trial); last,
FlexAttention compiled at the attention shapes, checked, then timed beside the kernels. It writes
``latency_bench/results/gpu_check_<date>.md`` and ``.json``; ``--render JSON`` redraws a saved report's
tables. ``--dry-run`` runs every section on the CPU with tiny shapes (Triton in its interpreter), so the
script itself is tested without a GPU; its figures mean nothing.

Each section records its own failure and the run goes on, so one broken part does not hide the
others; the exit status is non-zero if any check or section failed.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import signal
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path

import torch

from dlm.cli_args import ArgumentParser
from latency_bench.gpu_engine import QUESTIONS, missing_engine_packages, run_engine_timings
from latency_bench.gpu_plot import pass_breakdown_svg

RESULTS_DIR = Path(__file__).resolve().parent / "results"
BLOCK = 16  # the denoising block (tokens per block)
PASSES_PER_BLOCK = 4  # the first-block budget: 4 passes
TOKENS_PER_PASS = 3  # the decode-throughput assumption
GOALS = {
    "confidence_bw_frac": 0.70,
    "pass_over_weight_floor": 1.25,
    "first_block_warm_ms": 5.0,
    "first_block_cold_ms": 12.0,
    "decode_tok_s_b1": 3000.0,
}


@dataclass(frozen=True)
class Plan:
    """What to run: the real shapes on a GPU, tiny ones for a CPU dry run."""

    device: torch.device
    dry_run: bool
    shapes: tuple[str, ...]
    prompts: tuple[int, ...]
    batches: tuple[int, ...]
    confidence_batches: tuple[int, ...]
    vocab: int
    copy_bytes: int
    warmup: int
    reps: int
    paths: tuple[str, ...]

    @staticmethod
    def make(dry_run: bool, paths: tuple[str, ...]) -> Plan:
        if dry_run:
            return Plan(torch.device("cpu"), True, ("tiny",), (32,), (1, 2), (1, 2), 1000, 8 << 20, 0, 1, paths)
        # confidence also at 64 blocks: a 311 MB read, large enough to measure streaming against the floor
        return Plan(torch.device("cuda"), False, ("qwen3-0.6b", "sdar-1.7b"), (512, 4096), (1, 8), (1, 8, 64),
                    151936, 2 << 30, 5, 30, paths)  # fmt: skip


@dataclass
class Report:
    env: dict[str, object] = field(default_factory=dict)
    correctness: list[dict[str, object]] = field(default_factory=list)
    kernels: list[dict[str, object]] = field(default_factory=list)
    models: list[dict[str, object]] = field(default_factory=list)
    decode: list[dict[str, object]] = field(default_factory=list)
    profiles: list[dict[str, object]] = field(default_factory=list)
    tuning: list[dict[str, object]] = field(default_factory=list)
    engine: list[dict[str, object]] = field(default_factory=list)
    engine_at_scale: list[dict[str, object]] = field(default_factory=list)
    layer_trials: list[dict[str, object]] = field(default_factory=list)
    goals: list[dict[str, object]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def attempt(self, name: str, fn: Callable[[], None]) -> bool:
        """Run one measurement; a failure is recorded and printed, not raised, so the rest still runs."""
        try:
            fn()
            return True
        except Exception:
            message = f"{name}: {traceback.format_exc(limit=6)}"
            print(message, file=sys.stderr, flush=True)
            self.errors.append(message)
            return False


def environment(plan: Plan) -> dict[str, object]:
    import importlib.util

    env: dict[str, object] = {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "dry_run": plan.dry_run,
        "paths": list(plan.paths),
    }
    if importlib.util.find_spec("triton") is not None:
        import triton

        env["triton"] = triton.__version__
    if plan.device.type == "cuda":
        props = torch.cuda.get_device_properties(plan.device)
        env.update(gpu=props.name, sms=props.multi_processor_count, memory_gib=round(props.total_memory / 2**30, 1))
    return env


# ---------------------------------------------------------------- correctness


def correctness_cases(dry_run: bool) -> list[tuple[str, Callable[[str], None]]]:
    """Kernel-vs-reference cases at the real shapes (tiny ones in a dry run)."""
    from kernels import selfcheck as sc

    f32, f16, bf16 = torch.float32, torch.float16, torch.bfloat16
    vocab, big_vocab = (1000, 1000) if dry_run else (50257, 151936)
    cap, length, head_dim, prompt = (80, 70, 16, 40) if dry_run else (4160, 4096, 128, 512)
    heads = (4, 2) if dry_run else (16, 8)
    hidden = 96 if dry_run else 2048
    return [
        ("confidence bf16 16xV", lambda d: sc.check_confidence(16, big_vocab, bf16, d, seed=1)),
        ("confidence fp32 1xV", lambda d: sc.check_confidence(1, big_vocab, f32, d, masked_fraction=1.0, seed=2)),
        ("confidence fp16 ties", lambda d: sc.check_confidence(16, vocab, f16, d, ties=True, masked_fraction=1.0)),
        ("confidence gumbel T=0.8", lambda d: sc.check_confidence(7, vocab, f32, d, temperature=0.8, seed=3)),
        ("confidence batch 8", lambda d: sc.check_confidence(16, big_vocab, bf16, d, batch=8, seed=4)),
        ("confidence lanewise bf16 16xV", lambda d: sc.check_confidence(16, big_vocab, bf16, d, seed=6, lanewise=True)),
        ("confidence lanewise fp16 ties", lambda d: sc.check_confidence(16, vocab, f16, d, ties=True, masked_fraction=1.0,
                                                                         lanewise=True)),
        ("confidence lanewise gumbel", lambda d: sc.check_confidence(7, vocab, f32, d, temperature=0.8, seed=8,
                                                                      lanewise=True)),
        ("confidence lane-max bf16 16xV", lambda d: sc.check_confidence(16, big_vocab, bf16, d, seed=9, lanewise=True,
                                                                         lane_max=True)),
        ("confidence lane-max gumbel", lambda d: sc.check_confidence(7, vocab, f32, d, temperature=0.8, seed=10,
                                                                      lanewise=True, lane_max=True)),
        ("confidence lane-max pipelined (3 stages) bf16 16xV", lambda d: sc.check_confidence(
            16, big_vocab, bf16, d, seed=11, lanewise=True, lane_max=True, stages=3)),
        ("confidence lanewise pipelined gumbel", lambda d: sc.check_confidence(7, vocab, f32, d, temperature=0.8, seed=12,
                                                                                lanewise=True, stages=3)),
        ("confidence fallback", lambda d: sc.check_confidence(16, vocab, bf16, d, batch=3, force_fallback=True)),
        ("block attn bf16 + block K/V", lambda d: sc.check_block_attention(16, *heads, head_dim, cap, length, bf16, d)),
        ("block attn fp16 in-cache b8", lambda d: sc.check_block_attention(
            16, *heads, head_dim, cap, length // 2 + 3, f16, d, batch=8, with_block=False, tensor_len=True)),
        ("block attn fp32 GQA4", lambda d: sc.check_block_attention(7, 8, 2, 64, 300, 257, f32, d)),
        ("block attn in one launch (last split merges) bf16 + block K/V", lambda d: sc.check_block_attention(
            16, *heads, head_dim, cap, length, bf16, d, one_launch=True)),
        ("the same, fp16 in-cache b8", lambda d: sc.check_block_attention(
            16, *heads, head_dim, cap, length // 2 + 3, f16, d, batch=8, with_block=False, tensor_len=True,
            one_launch=True)),
        ("prefill bf16 block 16", lambda d: sc.check_block_causal(prompt, prompt, *heads, head_dim, 16, bf16, d)),
        ("prefill fp16 block 4 offset", lambda d: sc.check_block_causal(
            prompt // 4 + 5, prompt + 5, *heads, head_dim, 4, f16, d)),
        ("prefill fp32 causal", lambda d: sc.check_block_causal(67, 67, 4, 2, 64, 1, f32, d)),
        ("prefill bf16 block 16, heavy row tiles first, 128 x 64 tiles", lambda d: sc.check_block_causal(
            prompt, prompt, *heads, head_dim, 16, bf16, d, block_m=128, block_n=64, heavy_first=True)),
        ("rotary bf16 prompt", lambda d: sc.check_rotary(prompt, heads[0], head_dim, bf16, d)),
        ("rotary fp16 in place b8", lambda d: sc.check_rotary(16, heads[1], head_dim, f16, d, batch=8, in_place=True)),
        ("add_rms_norm bf16 block", lambda d: sc.check_add_rms_norm(16, hidden, bf16, d)),
        ("silu_mul bf16 block", lambda d: sc.check_silu_mul(16, 3 * hidden, bf16, d)),
        ("qk_norm_rope bf16 block at the cache end", lambda d: sc.check_qk_norm_rope(
            16, *heads, head_dim, cap, bf16, d, start=cap - 16)),
        ("qk_norm_rope fp16 prefill b2", lambda d: sc.check_qk_norm_rope(prompt, *heads, head_dim, cap, f16, d, batch=2)),
        ("rope without norm (Qwen2 layers) bf16 block", lambda d: sc.check_qk_norm_rope(
            BLOCK, *heads, head_dim, cap, bf16, d, start=cap - BLOCK, norm=False)),
        ("q/k/v + norms + RoPE + KV write in one launch bf16 block, K split", lambda d: sc.check_qkv_rope(
            BLOCK, hidden, *heads, head_dim, cap, bf16, d, start=cap - BLOCK)),
        ("the same, Qwen2 layer (bias, no q/k norm) fp16 b2", lambda d: sc.check_qkv_rope(
            BLOCK // 2, hidden, *heads, head_dim, cap, f16, d, batch=2, qk_norm=False, bias=True, split_k=3)),
        ("PDL chain: normed gate/up, gated down added to the residual, normed product bf16", lambda d: sc.check_pdl_chain(
            hidden, 3 * hidden, bf16, d, repeats=3 if dry_run else 20)),
        ("PDL chain: normed q/k/v + RoPE + KV write, one-launch attention over the prefix, o added bf16",
         lambda d: sc.check_pdl_attention_chain(hidden, *heads, head_dim, length, bf16, d, repeats=3 if dry_run else 20)),
    ]  # fmt: skip


def _record_check(report: Report, name: str, check: Callable[[], None]) -> None:
    """One row of the correctness table; a failing check is an error of the run, not its end."""
    try:
        check()
        report.correctness.append({"case": name, "ok": True})
    except Exception as exc:  # an AssertionError from the check, or a compile/launch failure
        report.correctness.append({"case": name, "ok": False, "error": f"{type(exc).__name__}: {exc}"[:500]})
        report.errors.append(f"correctness {name}: {exc}")
    print(f"  {name}: {'ok' if report.correctness[-1]['ok'] else 'FAILED'}", flush=True)


def run_correctness(plan: Plan, report: Report) -> None:
    for name, case in correctness_cases(plan.dry_run):
        _record_check(report, name, partial(case, str(plan.device)))


# ---------------------------------------------------------------- kernel timings


def _select_with_reset(logits, masked, all_masked, ids, path: str) -> None:
    """One selection from a fully masked block (the step commits, so the mask is restored first)."""
    masked.copy_(all_masked)
    from kernels import select_confident

    select_confident(logits, masked, ids, 0.9, path=path)


def _measure(plan: Plan, report: Report, bandwidth_gbs: float, kernel: str, shape: str, path: str,
             fn: Callable[[], object], floor_bytes: float = 0.0, flops: float = 0.0) -> None:  # fmt: skip
    """One row of the kernel table: ``fn`` launched from Python and replayed in a graph, against the bandwidth
    (``floor_bytes``) or compute (``flops``) floor; a failure is recorded, not raised."""
    from latency_bench.kernels_timing import time_graphed_ms, time_ms

    def run() -> None:
        ms = time_ms(fn, plan.device, plan.warmup, plan.reps)
        graphed = time_graphed_ms(fn, plan.device)
        device_ms = graphed if graphed is not None else ms  # the kernel's own time, launch cost removed
        row: dict[str, object] = {"kernel": kernel, "shape": shape, "path": path, "ms": round(ms, 4),
                                  "graphed_ms": None if graphed is None else round(graphed, 4)}  # fmt: skip
        if floor_bytes:
            row["floor_ms"] = round(floor_bytes / (bandwidth_gbs * 1e9) * 1e3, 4)
            row["bw_frac"] = round(floor_bytes / (device_ms * 1e-3) / (bandwidth_gbs * 1e9), 3)
        if flops:
            row["tflops"] = round(flops / (device_ms * 1e-3) / 1e12, 1)
        report.kernels.append(row)
        print(f"  {kernel} {shape} [{path}]: {ms:.4f} ms launched, {row['graphed_ms']} ms graphed", flush=True)

    report.attempt(f"{kernel} {shape} [{path}]", run)


def run_kernel_timings(plan: Plan, report: Report, bandwidth_gbs: float) -> None:
    from kernels import apply_rotary, block_attention, block_causal_attention, confidence_and_token
    from kernels.fused import add_rms_norm, qk_norm_rope, silu_mul

    dev = plan.device
    measure = partial(_measure, plan, report, bandwidth_gbs)

    for batch in plan.confidence_batches:
        logits = torch.randn(batch, BLOCK, plan.vocab, device=dev).to(torch.bfloat16)
        all_masked = torch.ones(batch, BLOCK, dtype=torch.bool, device=dev)
        masked, ids = all_masked.clone(), torch.zeros(batch, BLOCK, dtype=torch.int64, device=dev)
        nbytes = logits.numel() * logits.element_size()
        label = f"{batch}x{BLOCK}x{plan.vocab} bf16"
        for path in plan.paths:
            measure("confidence", label, path, partial(confidence_and_token, logits, masked=all_masked, path=path),
                    nbytes)  # fmt: skip
            measure("select_confident (+mask reset)", label, path,
                    partial(_select_with_reset, logits, masked, all_masked, ids, path), nbytes)  # fmt: skip

    s = _shape(plan.shapes[-1])
    for label, q, kc, vc, kv_bytes in _cache_attention_inputs(plan):
        len_t = torch.tensor([kc.shape[1]], device=dev)
        for path in plan.paths:
            measure("block_attention (tensor len)", label, path,
                    partial(block_attention, q, kc, vc, len_t, path=path), kv_bytes)  # fmt: skip
        measure("block_attention (int len, SDPA no mask)", label, "torch",
                partial(block_attention, q, kc, vc, kc.shape[1], path="torch"), kv_bytes)  # fmt: skip

    for tokens in (BLOCK, max(plan.prompts)):
        x = torch.randn(1, tokens, s.heads, s.head_dim, device=dev, dtype=torch.bfloat16)
        angles = torch.rand(tokens, s.head_dim // 2, device=dev)
        for path in plan.paths:
            measure("apply_rotary (in place)", f"{tokens} tokens x {s.heads}x{s.head_dim}", path,
                    partial(apply_rotary, x, angles.cos(), angles.sin(), out=x, path=path),
                    2 * x.numel() * x.element_size())  # fmt: skip

    bf16 = {"device": dev, "dtype": torch.bfloat16}
    for tokens in (BLOCK, max(plan.prompts)):
        x, delta = torch.randn(tokens, s.hidden, **bf16), torch.randn(tokens, s.hidden, **bf16)
        gate_up = torch.randn(tokens, 2 * s.intermediate, **bf16)
        qkv = torch.randn(1, tokens, (s.heads + 2 * s.kv_heads) * s.head_dim, **bf16)
        k_cache, v_cache = (torch.zeros(1, tokens, s.kv_heads, s.head_dim, **bf16) for _ in range(2))
        angles, positions = torch.rand(tokens, s.head_dim // 2, device=dev), torch.arange(tokens, device=dev)
        norm_w = torch.ones(s.head_dim, **bf16)
        for path in plan.paths:
            measure("add_rms_norm", f"{tokens}x{s.hidden}", path,
                    partial(add_rms_norm, x, delta, torch.ones(s.hidden, **bf16), 1e-6, path=path),
                    4 * x.numel() * x.element_size())  # fmt: skip
            measure("silu_mul", f"{tokens}x{s.intermediate}", path, partial(silu_mul, gate_up, path=path),
                    1.5 * gate_up.numel() * gate_up.element_size())  # fmt: skip
            measure("qk_norm_rope (+ KV write)", f"{tokens} tokens, {s.heads}/{s.kv_heads}x{s.head_dim}", path,
                    partial(qk_norm_rope, qkv, s.heads, s.kv_heads, norm_w, norm_w, 1e-6, angles.cos(), angles.sin(),
                            positions, k_cache, v_cache, path=path),
                    2 * qkv.numel() * qkv.element_size())  # fmt: skip

    sdpa = partial(torch.nn.functional.scaled_dot_product_attention, is_causal=True, enable_gqa=True)
    for label, q, k, v, flops in _prefill_attention_inputs(plan):
        for path in plan.paths:
            measure("block_causal_attention", label, path,
                    partial(block_causal_attention, q, k, v, BLOCK, path=path), flops=flops)  # fmt: skip
        measure("SDPA is_causal (speed reference, token-causal)", label, "torch",
                partial(sdpa, q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)), flops=flops)  # fmt: skip


def _cache_attention_inputs(plan: Plan) -> Iterator[tuple[str, torch.Tensor, torch.Tensor, torch.Tensor, int]]:
    """(label, q, k_cache, v_cache, bytes of K/V) for a block's queries over a full cache at each batch and
    prompt length, bf16, the largest shape's heads."""
    s, bf16 = _shape(plan.shapes[-1]), {"device": plan.device, "dtype": torch.bfloat16}
    for batch in plan.batches:
        for length in plan.prompts:
            cap = length + BLOCK
            q = torch.randn(batch, BLOCK, s.heads, s.head_dim, **bf16)
            kc, vc = (torch.randn(batch, cap, s.kv_heads, s.head_dim, **bf16) for _ in range(2))
            label = f"B{batch} {BLOCK}q over {cap} keys, {s.heads}/{s.kv_heads}x{s.head_dim}"
            yield label, q, kc, vc, 2 * kc.numel() * kc.element_size()


def _prefill_attention_inputs(plan: Plan) -> Iterator[tuple[str, torch.Tensor, torch.Tensor, torch.Tensor, float]]:
    """(label, q, k, v, flops of the causal half) for a block-causal prefill of each prompt length, bf16."""
    s, bf16 = _shape(plan.shapes[-1]), {"device": plan.device, "dtype": torch.bfloat16}
    for length in plan.prompts:
        q = torch.randn(1, length, s.heads, s.head_dim, **bf16)
        k, v = (torch.randn(1, length, s.kv_heads, s.head_dim, **bf16) for _ in range(2))
        flops = 4.0 * length * length / 2 * s.heads * s.head_dim  # causal half of QK^T and PV
        yield f"{length} tokens, block {BLOCK}, {s.heads}/{s.kv_heads}x{s.head_dim}", q, k, v, flops


def run_flex_attention(plan: Plan, report: Report, bandwidth_gbs: float) -> None:
    """FlexAttention, compiled, at the kernel table's attention shapes after its check against the references
    (the issue: where SDPA or FlexAttention is as fast as the kernels, use it). Its rows join the Triton and torch
    rows of the same shapes in the path decisions. A section of its own, last: each shape compiles a kernel."""
    from kernels import flex_attention as flex
    from kernels import selfcheck as sc

    s, dev = _shape(plan.shapes[-1]), plan.device
    cap = min(plan.prompts) + BLOCK
    _record_check(report, f"flex attention bf16, block over caches up to {cap} keys, prefill block {BLOCK}",
                  partial(sc.check_flex_attention, BLOCK, s.heads, s.kv_heads, s.head_dim, cap, BLOCK,
                          torch.bfloat16, str(dev)))  # fmt: skip
    measure = partial(_measure, plan, report, bandwidth_gbs)
    for label, q, kc, vc, kv_bytes in _cache_attention_inputs(plan):
        lengths = torch.full((q.shape[0],), kc.shape[1], dtype=torch.int32, device=dev)
        mask = flex.cache_mask(lengths, BLOCK, kc.shape[1])  # built once a block, reused by its passes
        measure("block_attention (tensor len)", label, "flex", partial(flex.attend, q, kc, vc, mask), kv_bytes)
    for label, q, k, v, flops in _prefill_attention_inputs(plan):
        mask = flex.block_causal_mask(q.shape[1], BLOCK, dev)
        measure("block_causal_attention", label, "flex", partial(flex.attend, q, k, v, mask), flops=flops)


def run_tuning(plan: Plan, report: Report) -> None:
    from latency_bench.gpu_tuning import (
        block_attention_sweep,
        block_causal_sweep,
        confidence_sweep,
        qkv_rope_sweep,
        thin_linear_sweep,
    )

    s = _shape(plan.shapes[-1])
    caches = tuple(length + BLOCK for length in plan.prompts)
    report.tuning.extend(confidence_sweep(plan.device, plan.vocab, plan.confidence_batches[::2]))
    report.tuning.extend(block_attention_sweep(plan.device, s.heads, s.kv_heads, s.head_dim, caches, plan.batches))
    report.tuning.extend(thin_linear_sweep(plan.device, s))
    report.tuning.extend(qkv_rope_sweep(plan.device, s, caches[0]))
    report.tuning.extend(block_causal_sweep(plan.device, s.heads, s.kv_heads, s.head_dim, max(plan.prompts)))
    for row in report.tuning:
        if row["best"]:
            print(f"  {row['kernel']} {row['shape']}: best {row['params']} {row['ms']} ms, "
                  f"auto {row['auto_over_best']}x of it", flush=True)  # fmt: skip


# ---------------------------------------------------------------- model shapes


def _shape(name: str):
    from latency_bench.gpu_shapes import SHAPES

    return SHAPES[name]


class _BlockRunner:
    """A model's denoising step for one (batch, capacity), graphed on CUDA, with block reset."""

    def __init__(self, model, start: int) -> None:
        from kernels import capture

        dev = model.embed.device
        self.model = model
        self.mask_id = model.shape.vocab - 1
        tokens = torch.full((model.batch, BLOCK), self.mask_id, dtype=torch.int64, device=dev)
        masked = torch.ones(model.batch, BLOCK, dtype=torch.bool, device=dev)
        start_t = torch.tensor([start], dtype=torch.int64, device=dev)
        self.step = capture(model.denoise_step, [tokens, masked, start_t], mutated_inputs=[0, 1])
        self.inputs = self.step.static_inputs if self.step.graphed else (tokens, masked, start_t)

    def reset(self) -> None:
        self.inputs[0].fill_(self.mask_id)
        self.inputs[1].fill_(True)

    def one_pass(self) -> None:
        self.reset()
        self.step(*self.inputs)

    def one_eager_pass(self) -> None:
        """The same step without the graph: what the profiler can attribute kernel by kernel."""
        self.reset()
        self.model.denoise_step(*self.inputs)

    def first_block(self) -> None:
        self.reset()
        for _ in range(PASSES_PER_BLOCK):
            self.step(*self.inputs)

    def cold_first_block(self, prefill: Callable[[], object]) -> None:
        prefill()
        self.first_block()


def _time_block_decoding(plan: Plan, report: Report, model, prompt: torch.Tensor, floor_ms: float) -> None:
    """Prefill, one pass, and the first block (warm: prompt already cached; cold: prefill included)."""
    from kernels import capture
    from latency_bench.kernels_timing import time_ms

    dev, wu, reps, length = plan.device, plan.warmup, plan.reps, prompt.shape[1]
    runner = _BlockRunner(model, length)
    prefill = partial(model.prefill, prompt, BLOCK)
    prefill_ms = time_ms(prefill, dev, min(1, wu), max(1, reps // 5))
    pass_ms = time_ms(runner.one_pass, dev, wu, reps)
    warm_ms = time_ms(runner.first_block, dev, wu, max(1, reps // 3))
    cold_ms = time_ms(partial(runner.cold_first_block, prefill), dev, min(1, wu), max(1, reps // 5))
    # The engine prefills eagerly (prompt lengths vary), which on a GPU is mostly launch cost; the prefill
    # replayed as a graph (one per padded prompt length would do: block-causal attention never lets a real
    # token see the padding after it) shows what that would save.
    graphed_prefill = capture(lambda tokens: model.prefill(tokens, BLOCK), [prompt])
    replay = partial(graphed_prefill, prompt)
    prefill_graphed_ms = time_ms(replay, dev, min(1, wu), max(1, reps // 5))
    cold_graphed_ms = time_ms(partial(runner.cold_first_block, replay), dev, min(1, wu), max(1, reps // 5))
    report.models.append({
        "shape": model.shape.name, "prompt": length, "path": model.label, "graphed": runner.step.graphed,
        "weight_gb": round(model.weight_bytes() / 1e9, 3), "weight_floor_ms": round(floor_ms, 3),
        "pass_ms": round(pass_ms, 3), "pass_over_floor": round(pass_ms / floor_ms, 2),
        "prefill_ms": round(prefill_ms, 3), "prefill_graphed_ms": round(prefill_graphed_ms, 3),
        f"first_block_{PASSES_PER_BLOCK}_passes_warm_ms": round(warm_ms, 3), "first_block_cold_ms": round(cold_ms, 3),
        "first_block_cold_graphed_prefill_ms": round(cold_graphed_ms, 3),
    })  # fmt: skip
    print(f"  {model.shape.name} L={length} [{model.label}]: pass {pass_ms:.3f} ms (floor {floor_ms:.3f}), "
          f"prefill {prefill_ms:.2f} (graphed {prefill_graphed_ms:.2f}), first block warm {warm_ms:.2f} / cold "
          f"{cold_ms:.2f} (graphed prefill {cold_graphed_ms:.2f}) ms", flush=True)  # fmt: skip
    if length == max(plan.prompts):
        from latency_bench.kernels_timing import kernel_profile

        profile = kernel_profile(runner.one_eager_pass, dev)
        report.profiles.append({"shape": model.shape.name, "prompt": length, "path": model.label,
                                "graphed_pass_ms": round(pass_ms, 3), **profile})  # fmt: skip
        print(f"  profile: {profile['kernel_launches']} kernels, {profile['kernel_us']} us of kernel time", flush=True)


def _time_decode(plan: Plan, report: Report, model, cache_len: int) -> None:
    from latency_bench.kernels_timing import time_ms

    runner = _BlockRunner(model, cache_len)
    pass_ms = time_ms(runner.one_pass, plan.device, plan.warmup, plan.reps)
    tok_s = TOKENS_PER_PASS * model.batch / (pass_ms * 1e-3)
    report.decode.append({"shape": model.shape.name, "batch": model.batch, "cache": cache_len, "path": model.label,
                          "pass_ms": round(pass_ms, 3), "tok_s_at_3_per_pass": round(tok_s)})  # fmt: skip
    print(f"  decode {model.shape.name} B={model.batch} [{model.label}]: {pass_ms:.3f} ms/pass -> {tok_s:.0f} tok/s",
          flush=True)  # fmt: skip


PREFETCH_BUDGETS_MB = (0, 2, 32)  # around the default (kernels.pdl.PREFETCH_BYTES)


def _time_prefetch_budgets(plan: Plan, report: Report, model, length: int) -> None:
    """The thin-product pass under PDL with other L2 prefetch budgets (products' weights, attention's cache) than
    the default: a tuning row each."""
    from kernels.pdl import PREFETCH_BYTES
    from latency_bench.gpu_tuning import mark_best
    from latency_bench.kernels_timing import time_ms

    model.path, model.thin, model.pdl = "triton", True, True
    rows = []
    for budget in (None, *PREFETCH_BUDGETS_MB):
        model.prefetch_bytes = None if budget is None else budget << 20
        runner = _BlockRunner(model, length)
        rows.append({"kernel": "model pass (thin GEMM, PDL)", "shape": f"{model.shape.name} L={length}",
                     "params": f"auto (prefetch {PREFETCH_BYTES >> 20} MB)" if budget is None else f"prefetch {budget} MB",
                     "ms": round(time_ms(runner.one_pass, plan.device, plan.warmup, plan.reps), 4)})  # fmt: skip
    model.prefetch_bytes = None
    report.tuning.extend(mark_best(rows))


def run_model_timings(plan: Plan, report: Report, bandwidth_gbs: float) -> None:
    from latency_bench.gpu_shapes import RandomQwen3

    dev = plan.device
    # the Triton path once more with the block's matrix products on the thin kernel instead of cuBLAS (the
    # add-norms and SwiGLU inside them), and once with those and every other kernel of a step launched with PDL
    # (candidates; the unfused layer steps, timed until 2026-12-04, cost twice the fused ones:
    # gpu_check_h200_2026-12-04_run7.md)
    variants = [(path, False, False) for path in plan.paths]
    variants += [("triton", True, False), ("triton", True, True)] * ("triton" in plan.paths)
    for name in plan.shapes:
        shape = _shape(name)
        model = RandomQwen3(shape, 1, max(plan.prompts) + BLOCK, dev, torch.bfloat16, plan.paths[0])
        floor_ms = model.weight_bytes() / (bandwidth_gbs * 1e9) * 1e3
        for length in plan.prompts:
            model.new_cache(1, length + BLOCK)
            prompt = torch.randint(0, shape.vocab, (1, length), device=dev)
            for path, thin, pdl in variants:
                model.path, model.thin, model.pdl = path, thin, pdl
                report.attempt(f"{name} L={length} [{model.label}]",
                               partial(_time_block_decoding, plan, report, model, prompt, floor_ms))  # fmt: skip
            if name == plan.shapes[-1] and "triton" in plan.paths:  # at 4K the attention's prefetch is a quarter
                report.attempt(f"{name} L={length} prefetch budgets",
                               partial(_time_prefetch_budgets, plan, report, model, length))  # fmt: skip
        cache_len = min(plan.prompts)
        for batch in plan.batches:
            model.new_cache(batch, cache_len + BLOCK)
            for path, thin, pdl in variants:
                model.path, model.thin, model.pdl = path, thin, pdl
                report.attempt(f"decode {name} B={batch} [{model.label}]",
                               partial(_time_decode, plan, report, model, cache_len))  # fmt: skip
        del model
        if dev.type == "cuda":
            torch.cuda.empty_cache()


def _engine_row(report: Report, model, shape, prompt: int, steps, reps: int) -> None:
    from latency_bench.gpu_engine import time_engine_pass

    kernels = steps.label
    row = {"model": f"dlm Transformer ({model.cfg.model_type})", "shape": shape.name, "prompt": prompt,
           "kernels": kernels, **time_engine_pass(model, prompt, steps, reps)}  # fmt: skip
    lean = [r["pass_ms"] for r in report.models if (r["shape"], r["prompt"], r["path"]) == (shape.name, prompt, kernels)]
    row["lean_bench_pass_ms"] = lean[0] if lean else None
    report.engine_at_scale.append(row)
    print(f"  engine model {model.cfg.model_type} {shape.name} L={prompt} [{kernels}]: graphed {row['graphed_pass_ms']} ms, "
          f"eager {row['eager_pass_ms']} ms, {row['eager_kernel_launches']} kernels; prefill graphed-forward "
          f"{row['graphed_prefill_ms']} / eager {row['eager_prefill_ms']} ms, first block cold "
          f"{row['first_block_cold_ms']} ms", flush=True)  # fmt: skip


def run_engine_at_scale(plan: Plan, report: Report) -> None:
    """The engine's own model at the largest benchmark shape: what a real checkpoint of that size would cost
    per pass, set beside the lean benchmark model's pass (the same weights to read, fewer kernels). The
    first family also runs the candidate launches (the thin product with the add-norms in it, under PDL)."""
    from dlm.fused_layers import LayerSteps
    from latency_bench.gpu_engine import ENGINE_FAMILIES, engine_model

    shape = _shape(plan.shapes[-1])
    candidate = [LayerSteps("triton", thin=True, pdl=True)] if "triton" in plan.paths else []
    for family in ENGINE_FAMILIES:
        model = engine_model(shape, max(plan.prompts) + 64, plan.device, torch.bfloat16, family)
        for prompt in plan.prompts:
            for steps in [LayerSteps(path) for path in plan.paths] + candidate * (family == ENGINE_FAMILIES[0]):
                report.attempt(f"engine model {family} {shape.name} L={prompt} [{steps.label}]",
                               partial(_engine_row, report, model, shape, prompt, steps, max(1, plan.reps // 2)))  # fmt: skip
        if candidate and family == ENGINE_FAMILIES[0]:
            report.attempt(f"layer steps trial {family} {shape.name}",
                           partial(_layer_trial_rows, report, model, shape, min(plan.prompts),
                                   max(1, plan.reps // 2)))  # fmt: skip
        del model
        if plan.device.type == "cuda":
            torch.cuda.empty_cache()


def _layer_trial_rows(report: Report, model, shape, prefix: int, passes: int) -> None:
    """The engine's own start-up trial (:mod:`dlm.layer_trial`) on this model: each candidate's graphed pass,
    its agreement with the fused layer, and which one an engine on this GPU would run."""
    from dlm.layer_trial import fastest, run_trials

    trials = run_trials(model, passes=passes, prefix=prefix)
    chosen = fastest(trials)
    report.layer_trials.extend({"model": f"dlm Transformer ({model.cfg.model_type})", "shape": shape.name,
                                "prefix": prefix, "steps": t.steps.label, "ms_per_pass": t.ms_per_pass,
                                "argmax_agree": t.argmax_agree, "dropped": t.dropped or "",
                                "chosen": t.steps == chosen} for t in trials)  # fmt: skip


# ---------------------------------------------------------------- goals and output


def evaluate_goals(report: Report) -> None:
    """The issue's targets, judged on the best path for each figure (None when not measured)."""
    report.goals = []

    def best(rows: list[dict[str, object]], key: str, **match: object) -> float | None:
        vals = [float(r[key]) for r in rows if key in r and all(r.get(k) == v for k, v in match.items())]
        return min(vals) if vals else None

    conf = [float(r["bw_frac"]) for r in report.kernels if r["kernel"] == "confidence" and r["path"] == "triton"]
    figures = [
        ("confidence kernel >= 70% of copy bandwidth (best batch)", max(conf) if conf else None,
         GOALS["confidence_bw_frac"], "ge"),
        ("sdar-1.7b pass @4K cache <= 1.25x weight-read floor",
         best(report.models, "pass_over_floor", shape="sdar-1.7b", prompt=4096), GOALS["pass_over_weight_floor"], "le"),
        ("sdar-1.7b first block warm @512 <= 5 ms",
         best(report.models, f"first_block_{PASSES_PER_BLOCK}_passes_warm_ms", shape="sdar-1.7b", prompt=512),
         GOALS["first_block_warm_ms"], "le"),
        # the engine replays a graphed prefill for whole-block prompts (dlm.graphed_forward), so that figure counts
        ("sdar-1.7b first block cold @512 <= 12 ms (graphed prefill)",
         best(report.models, "first_block_cold_graphed_prefill_ms", shape="sdar-1.7b", prompt=512),
         GOALS["first_block_cold_ms"], "le"),
        ("sdar-1.7b decode batch 1 >= 3000 tok/s",
         max((float(r["tok_s_at_3_per_pass"]) for r in report.decode if r["shape"] == "sdar-1.7b" and r["batch"] == 1),
             default=None), GOALS["decode_tok_s_b1"], "ge"),
    ]  # fmt: skip
    for goal, value, target, sense in figures:
        met = None if value is None else (value >= target if sense == "ge" else value <= target)
        report.goals.append({"goal": goal, "value": value, "target": target, "met": met})


def path_decisions(report: Report) -> list[dict[str, object]]:
    """Per kernel family and shape, the faster path's time against the other's: the engine's choice. Kernels
    are compared by their graphed time where there is one, since on a GPU the engine replays its passes as
    graphs (launched from Python, every kernel here costs about the same tenth of a millisecond)."""
    best: dict[tuple[str, str], dict[str, float]] = {}
    rows = [(r["kernel"], r["shape"], r["path"], r.get("graphed_ms") or r["ms"]) for r in report.kernels]
    rows += [("model pass", f"{r['shape']} L={r['prompt']}", r["path"], r["pass_ms"]) for r in report.models]
    rows += [("engine graphed pass (block attention vs SDPA)", "demo checkpoint", r["kernels"], r["ms_per_pass"])
             for r in report.engine if r["cuda_graphs"] == "on" and r["engine"] == "demo checkpoint"]
    for kernel, shape, path, ms in rows:
        family = str(kernel).split(" (")[0]
        if family.startswith("SDPA is_causal"):
            continue  # token-causal speed reference, not the same computation
        slot = best.setdefault((family, str(shape)), {})
        slot[str(path)] = min(float(ms), slot.get(str(path), float("inf")))
    paths = list(dict.fromkeys(path for t in best.values() for path in t))  # every row has every column, "faster" last
    return [{"kernel": family, "shape": shape, **{f"{path} ms": t.get(path, "") for path in paths},
             "faster": min(t, key=t.get)} for (family, shape), t in best.items()]  # fmt: skip


def _table(rows: list[dict[str, object]]) -> str:
    if not rows:
        return "(none)\n"
    cols = list(dict.fromkeys(k for r in rows for k in r))
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(str(r.get(c, "")) for c in cols) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def render_markdown(report: Report, picture: str | None = None) -> str:
    """The report as markdown; ``picture``: the file name of its pass picture (:func:`write_markdown`), shown in the
    profile section."""
    env = ", ".join(f"{k}={v}" for k, v in report.env.items())
    parts = [
        "# GPU check\n", f"{env}\n", "## Goals (issue 7)\n", _table(report.goals),
        "## Correctness (Triton vs torch reference on the device)\n", _table(report.correctness),
        "## Path decisions (the fastest path timed per kernel and shape: Triton, torch, FlexAttention; kernels by graphed time)\n",
        _table(path_decisions(report)),
        "## Kernels vs torch reference and the floor\n",
        "`bw_frac`: bytes the kernel must read over time, as a fraction of the measured copy bandwidth.\n\n",
        _table(report.kernels),
        "## Tuning sweep (graphed ms per call; `auto` is the default the engine runs)\n", _table(report.tuning),
        f"## Model shapes (random weights, bf16, {BLOCK}-token block, {PASSES_PER_BLOCK} passes per first block)\n",
        _table(report.models),
        f"## Decode throughput (at {TOKENS_PER_PASS} tokens committed per pass)\n", _table(report.decode),
        "## Where a pass's device time goes (profiler, one eager pass; graphed time for comparison)\n",
        *([f"![a pass's time by kernel family against the weight-read floor]({picture})\n"] if picture else []),
        _table([{k: v for k, v in p.items() if k != "top"} for p in report.profiles]),
        *(f"Top kernels, {p['shape']} L={p['prompt']} [{p['path']}]:\n\n" + _table(p["top"]) for p in report.profiles),
        "## Engine: the demo checkpoint, eager vs CUDA-graphed denoising passes in float32 (same ids required), "
        "then as served (every setting on auto)\n",
        _table(report.engine),
        "## Engine model at scale (random weights, 16-token block; the lean benchmark model's pass beside it)\n",
        _table(report.engine_at_scale),
        "## The engine's layer-steps trial (what an engine starting on this GPU would run; dlm/layer_trial.py)\n",
        _table(report.layer_trials),
    ]  # fmt: skip
    if report.errors:
        parts += ["## Errors\n", "```\n" + "\n".join(report.errors) + "\n```\n"]
    return "\n".join(parts)


def results_paths(out_dir: Path, dry_run: bool) -> tuple[Path, Path]:
    """This run's report (.md, .json) in ``out_dir``: ``gpu_check_<date>``, or ``_run2``, ``_run3``... after it when
    an earlier run of the day is there, so a rerun (of a few sections, say) never overwrites one."""
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = f"gpu_check_{'dryrun_' if dry_run else ''}{dt.date.today().isoformat()}"
    run = 1
    while (out_dir / f"{stem}{f'_run{run}' if run > 1 else ''}.json").exists():
        run += 1
    stem += f"_run{run}" if run > 1 else ""
    return out_dir / f"{stem}.md", out_dir / f"{stem}.json"


def write_markdown(report: Report, md: Path) -> str | None:
    """The report as ``md``, with its profiled passes drawn beside it (``<stem>_pass.svg``,
    :mod:`latency_bench.gpu_plot`) when it has any; the picture's file name, or None."""
    picture = None
    if report.profiles:
        floors = {str(r["shape"]): float(r["weight_floor_ms"]) for r in report.models}
        svg = md.with_name(f"{md.stem}_pass.svg")
        svg.write_text(pass_breakdown_svg(report.profiles, floors, GOALS["pass_over_weight_floor"]))
        picture = svg.name
    md.write_text(render_markdown(report, picture))
    return picture


def write_results(report: Report, md: Path, js: Path) -> None:
    write_markdown(report, md)
    js.write_text(json.dumps(asdict(report), indent=2) + "\n")


def render_saved(json_path: Path) -> int:
    """Re-render a saved report (goals re-judged, tables as this version draws them) next to its JSON."""
    try:
        report = Report(**json.loads(json_path.read_text()))
    except (OSError, ValueError, TypeError) as exc:
        raise SystemExit(f"gpu_check: cannot read a report from {json_path}: {exc}") from exc
    evaluate_goals(report)
    md = json_path.with_suffix(".md")
    picture = write_markdown(report, md)
    print(f"wrote {md}" + (f" and {picture}" if picture else ""))
    return 0


def _available_paths(device: torch.device) -> tuple[str, ...]:
    from kernels.dispatch import kernel_path

    try:
        kernel_path("triton", device)
    except RuntimeError as exc:
        print(f"Triton path unavailable ({exc}); timing the torch path only", file=sys.stderr)
        return ("torch",)
    return ("triton", "torch")


# In this order, after the copy bandwidth, which every run measures first (the floors need it). The model shapes (the
# issue's goals, and the candidates' passes) come before the long tuning sweep: the results are written after every
# section, so a run cut short by its time limit still has them.
SECTIONS = ("correctness", "kernel timings", "model shapes", "tuning sweep", "engine model at scale", "engine",
            "flex attention")


def _section_list(text: str) -> tuple[str, ...]:
    """``--sections``: names from :data:`SECTIONS`, comma-separated (a dash may stand for a space)."""
    names = tuple(name.strip().replace("-", " ") for name in text.split(",") if name.strip())
    unknown = [name for name in names if name not in SECTIONS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown section(s) {unknown}; choose from {', '.join(SECTIONS)}")
    return names


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m latency_bench.gpu_check", description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="tiny shapes on the CPU (Triton interpreter)")
    parser.add_argument("--out-dir", type=Path, default=RESULTS_DIR,
                        help="where the report goes (an earlier one of the day is kept: this one is _run2, _run3...)")  # fmt: skip
    parser.add_argument("--sections", type=_section_list, default=SECTIONS, metavar="NAME[,NAME...]",
                        help=f"run only these, in the check's order (default: all): {', '.join(SECTIONS)}; e.g. "
                             "the ones a run cut short by its time limit did not reach")  # fmt: skip
    parser.add_argument("--render", type=Path, metavar="JSON",
                        help="no measuring: rewrite the .md beside a results .json with this version's tables")  # fmt: skip
    args = parser.parse_args(argv)
    if args.render:
        return render_saved(args.render)
    if args.dry_run:
        os.environ.setdefault("TRITON_INTERPRET", "1")  # before anything imports triton
    elif not torch.cuda.is_available():
        raise SystemExit("gpu_check: no CUDA device is visible; this check needs a GPU (use --dry-run on a CPU)")

    device = torch.device("cpu" if args.dry_run else "cuda")
    plan = Plan.make(args.dry_run, _available_paths(device))
    torch.manual_seed(0)
    report = Report(env=environment(plan))
    bandwidth: dict[str, float] = {}

    def measure_bandwidth() -> None:
        from latency_bench.kernels_timing import copy_bandwidth_gbs

        bandwidth["gbs"] = copy_bandwidth_gbs(plan.device, plan.copy_bytes)
        report.env["copy_bandwidth_gbs"] = round(bandwidth["gbs"], 1)
        print(f"  copy bandwidth {bandwidth['gbs']:.1f} GB/s", flush=True)

    def run_engine() -> None:
        questions = QUESTIONS[:1] if plan.dry_run else QUESTIONS
        report.engine.extend(run_engine_timings(plan.device, plan.reps // 5 or 1, plan.paths, questions))

    runs: dict[str, Callable[[], None]] = {
        "correctness": partial(run_correctness, plan, report),
        "kernel timings": lambda: run_kernel_timings(plan, report, bandwidth["gbs"]),
        "model shapes": lambda: run_model_timings(plan, report, bandwidth["gbs"]),
        "tuning sweep": partial(run_tuning, plan, report),
        "engine model at scale": partial(run_engine_at_scale, plan, report),
        "engine": run_engine,
        "flex attention": lambda: run_flex_attention(plan, report, bandwidth["gbs"]),
    }
    wanted = [name for name in SECTIONS if name in args.sections]
    if "engine" in wanted and (missing := missing_engine_packages()):
        wanted.remove("engine")
        report.env["engine_skipped"] = f"needs {', '.join(missing)} (pip install {' '.join(missing)})"
        print(f"engine section skipped: {report.env['engine_skipped']}", file=sys.stderr)
    sections = [("copy bandwidth", measure_bandwidth), *((name, runs[name]) for name in wanted)]
    md, js = results_paths(args.out_dir, args.dry_run)
    seconds = report.env["section_seconds"] = {}  # what each section costs of the run's time limit
    current = {"name": "", "started": time.perf_counter()}

    def out_of_time(signum: int, frame: object) -> None:
        """SIGTERM (``timeout`` in gpu_check.sh): write what was measured, name the section cut, and exit. Done
        here, not by raising: an exception raised while the main thread runs a ``__del__`` is swallowed, and the
        run would go on past its limit."""
        name = current["name"]
        seconds[name] = round(time.perf_counter() - current["started"], 1)
        report.errors.append(f"{name}: cut short by the time limit (SIGTERM) after {seconds[name]} s; "
                             "the sections after it did not run")  # fmt: skip
        evaluate_goals(report)
        write_results(report, md, js)
        print(f"gpu_check: {report.errors[-1]}; wrote {md}", file=sys.stderr, flush=True)
        os._exit(1)

    previous = signal.signal(signal.SIGTERM, out_of_time)
    try:
        for name, run in sections:
            current.update(name=name, started=time.perf_counter())  # before the line that says it started
            print(f"== {name}", flush=True)
            report.attempt(name, run)
            seconds[name] = round(time.perf_counter() - current["started"], 1)
            print(f"   {name}: {seconds[name]} s", flush=True)
            evaluate_goals(report)
            write_results(report, md, js)  # after every section
    finally:
        signal.signal(signal.SIGTERM, previous)
    print(f"wrote {md} and {js}")
    if report.errors:
        print(f"gpu_check: {len(report.errors)} failure(s); see {md}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
