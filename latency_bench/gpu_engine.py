"""The GPU check's engine section: the real engine, eager against CUDA-graphed denoising passes.

The kernel and model-shape sections time hand-built steps; this one times what a caller gets, the shipped
demo checkpoint through :class:`dlm.engine.Engine`, with ``cuda_graphs`` off and on. The tiny demo model is
all launch overhead on a GPU, which is exactly what the graphs remove. Both settings must decode the same
ids (greedy), else the row is a failure rather than a speed-up. The engine needs ``tokenizers`` and
``safetensors``, which a bare GPU machine may lack: then the section says so and is skipped.
"""

from __future__ import annotations

import importlib.util
import statistics
import time
from functools import partial
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from dlm.decoding.block_causal import CachedForward
    from dlm.engine import Engine
    from dlm.fused_layers import LayerSteps
    from dlm.model import Transformer
    from latency_bench.gpu_shapes import Shape

ENGINE_PACKAGES = ("tokenizers", "safetensors")

QUESTIONS = ("what's the capital of france", "set a timer for ten minutes", "how much is 12 times 4")


def timed_turns(engine: Engine, reps: int, questions: tuple[str, ...] = QUESTIONS
                ) -> tuple[list[list[int]], dict[str, float]]:  # fmt: skip
    """Every question ``reps`` times on fresh sessions (medium effort, 48 tokens): the ids of the last round and
    median timings (``first_block_ms``, ``turn_ms``, ``ms_per_pass``)."""
    first, total, passes = [], [], []
    ids: list[list[int]] = []
    for _ in range(reps):
        ids = []
        for question in questions:
            started = time.perf_counter()
            result = engine.generate([{"role": "user", "content": question}], max_new_tokens=48, effort="medium")
            if engine.device.type == "cuda":
                torch.cuda.synchronize(engine.device)
            total.append((time.perf_counter() - started) * 1e3)
            first.append(result.first_block_ms or 0.0)
            passes.append(result.forward_passes)
            ids.append(result.token_ids)
    per_pass = [t / p for t, p in zip(total, passes, strict=True) if p]
    return ids, {"first_block_ms": statistics.median(first), "turn_ms": statistics.median(total),
                 "ms_per_pass": statistics.median(per_pass)}


def missing_engine_packages() -> list[str]:
    return [name for name in ENGINE_PACKAGES if importlib.util.find_spec(name) is None]


def _engine_row(engine: Engine, reps: int, questions: tuple[str, ...], label: str) -> tuple[list[list[int]], dict]:
    """Warm ``engine`` up (CUDA context, Triton JIT, graph capture), then time its turns: the ids decoded and
    the row; for a graphed engine its pass alone too, so that what a turn spends around its passes shows."""
    from dlm.layer_trial import run_trials

    timed_turns(engine, 1, questions)
    ids, figures = timed_turns(engine, reps, questions)
    if engine.graph_pool is not None:
        (alone,) = run_trials(engine.model, (engine.graph_pool.steps,), reps)
        if alone.dropped:
            raise RuntimeError(f"the graphed pass alone failed: {alone.dropped}")
        figures["graphed_forward_ms"] = alone.ms_per_pass
    row = {"engine": label, "cuda_graphs": "on" if engine.cuda_graphs else "off", "kernels": engine.kernels,
           "dtype": str(engine.model.output_weight().dtype).removeprefix("torch."),
           "layer_steps": engine.layer_steps.label, **{k: round(v, 3) for k, v in figures.items()}}  # fmt: skip
    print(f"  engine {label} cuda_graphs={row['cuda_graphs']} kernels={row['kernels']} {row['dtype']} "
          f"[{row['layer_steps']}]: first block {figures['first_block_ms']:.2f} ms, "
          f"{figures['ms_per_pass']:.3f} ms/pass", flush=True)  # fmt: skip
    return ids, row


def _share_of_same_ids(ids: list[list[int]], reference: list[list[int]]) -> float:
    """The share of ``reference``'s token positions where ``ids`` holds the same token."""
    same = sum(a == b for turn, ref in zip(ids, reference, strict=True) for a, b in zip(turn, ref, strict=False))
    return round(same / max(1, sum(map(len, reference))), 3)


def run_engine_timings(device: torch.device, reps: int, paths: tuple[str, ...],
                       questions: tuple[str, ...] = QUESTIONS) -> list[dict[str, object]]:
    """One row per (cuda_graphs, kernels) setting in float32: eager on the first kernel path, then graphed on
    each (with "triton", graphed passes attend through the block-attention kernel, with "torch" through SDPA);
    raises if any of them decodes different ids than the eager one. Then the engine as ``dlm serve`` and the
    voice assistant start it here, every setting on auto (on a GPU: bfloat16, graphs, the layer steps its
    start-up trial picks), whose ids may differ from float32's: the row says on what share of the tokens; an
    empty reply raises."""
    from dlm.cli import DEMO_CHECKPOINT
    from dlm.engine import Engine

    rows, decoded = [], []
    for graphs, kernels in [("off", paths[0]), *(("on", path) for path in paths)]:
        # float32, as every run before 2026-12-07 timed it, and the dtype greedy ids agree in across paths
        engine = Engine.from_dir(DEMO_CHECKPOINT, "float32", str(device), kernels=kernels, cuda_graphs=graphs)
        try:
            ids, row = _engine_row(engine, reps, questions, "demo checkpoint")
        finally:
            engine.close()
        decoded.append(ids)
        rows.append(row)
    if any(ids != decoded[0] for ids in decoded):
        raise AssertionError("a CUDA-graphed engine decoded different ids than the eager one")
    engine = Engine.from_dir(DEMO_CHECKPOINT, "auto", str(device))
    try:
        ids, row = _engine_row(engine, reps, questions, "demo checkpoint, as served")
    finally:
        engine.close()
    if not all(ids):
        raise AssertionError("the engine as served decoded an empty reply")
    rows.append({**row, "same_ids_as_float32": _share_of_same_ids(ids, decoded[0])})
    return rows


# The layer kinds the engine's fused path covers: Qwen3-style (q/k norms) and Qwen2-style (q/k/v biases)
ENGINE_FAMILIES = ("sdar", "Fast_dLLM_Qwen")


def engine_model(shape: Shape, context: int, device: torch.device, dtype: torch.dtype,
                 model_type: str = "sdar", block_size: int = 16) -> Transformer:  # fmt: skip
    """The engine's own model (``dlm.model.Transformer``, of the family ``model_type`` names) at a benchmark
    shape, random weights from a fixed seed."""
    from dlm.config import ModelConfig
    from dlm.model import Transformer

    cfg = ModelConfig.from_hf({
        "model_type": model_type, "vocab_size": shape.vocab, "hidden_size": shape.hidden,
        "num_hidden_layers": shape.layers, "num_attention_heads": shape.heads,
        "num_key_value_heads": shape.kv_heads, "head_dim": shape.head_dim,
        "intermediate_size": shape.intermediate, "rope_theta": shape.rope_theta, "tie_word_embeddings": True,
        "block_size": block_size, "mask_token_id": shape.vocab - 1, "max_position_embeddings": context,
    })  # fmt: skip
    cuda = [device] if device.type == "cuda" else []
    # initialised where it runs (a 1.7B model never passes through host memory), from a fixed seed
    with torch.random.fork_rng(devices=cuda), torch.device(device):
        torch.manual_seed(0)
        model = Transformer(cfg).to(dtype)
        model.rotary = type(model.rotary)(cfg)  # the RoPE frequencies stay fp32, as dlm.checkpoint loads them
    return model.eval().requires_grad_(False)


def time_engine_pass(model: Transformer, prompt: int, steps: LayerSteps, reps: int) -> dict[str, object]:
    """One denoising pass of a 16-token block after ``prompt`` cached positions, the way a session runs it
    (``GraphedForward``: a captured graph on CUDA, fused layers for this Qwen3 shape, launched as ``steps``
    says) and eagerly
    (``CachedForward``), each forward's prefill of the prompt, the first block cold (that prefill and four
    graphed passes), the eager pass's kernel count and summed kernel time, and how closely the two passes'
    logits agree."""
    from dlm.decoding.block_causal import CachedForward
    from dlm.graphed_forward import GraphedForward
    from dlm.kv_cache import KVCache
    from latency_bench.kernels_timing import kernel_profile, time_ms

    device, dtype, cfg = model.output_weight().device, model.output_weight().dtype, model.cfg

    def cache() -> KVCache:
        return KVCache(cfg, prompt + 32, dtype=dtype, device=device)

    ids = torch.randint(0, cfg.vocab_size - 1, (prompt,), generator=torch.Generator().manual_seed(0)).tolist()
    window = torch.full((16,), cfg.mask_token_id, dtype=torch.long, device=device)
    rows = torch.arange(16, device=device)
    forwards = {"graphed": GraphedForward(model, cache(), steps), "eager": CachedForward(model, cache())}
    passes, figures = {}, {}
    with torch.no_grad():
        for name, forward in forwards.items():
            figures[f"{name}_prefill_ms"] = round(time_ms(partial(_prefill, forward, ids), device, 1, reps), 3)
            passes[name] = partial(forward.denoise, window, rows)
            figures[f"{name}_pass_ms"] = round(time_ms(passes[name], device, 3, reps), 3)
        profile = kernel_profile(passes["eager"], device)
        graphed, eager = (passes[name]().float() for name in ("graphed", "eager"))
    # the two paths round differently in bf16: how far apart their logits end up, and whether they pick alike
    figures["logits_max_diff"] = round(float((graphed - eager).abs().max()), 4)
    figures["argmax_agree"] = round(float((graphed.argmax(-1) == eager.argmax(-1)).float().mean()), 3)
    figures["first_block_cold_ms"] = round(figures["graphed_prefill_ms"] + 4 * figures["graphed_pass_ms"], 3)
    figures.update(eager_kernel_launches=profile["kernel_launches"], eager_kernel_us=profile["kernel_us"])
    return figures


def _prefill(forward: CachedForward, ids: list[int]) -> None:
    """The prompt into an emptied cache, as a new conversation's first turn does."""
    forward.reset()
    forward.extend(ids, 16)
