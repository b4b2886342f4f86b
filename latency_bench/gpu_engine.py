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
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from dlm.engine import Engine

ENGINE_PACKAGES = ("tokenizers", "safetensors")

QUESTIONS = ("what's the capital of france", "set a timer for ten minutes", "how much is 12 times 4")


def _timed_turns(engine: Engine, reps: int, questions: tuple[str, ...]) -> tuple[list[list[int]], dict[str, float]]:
    """Every question ``reps`` times on fresh sessions: the ids of the last round and median timings."""
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


def run_engine_timings(device: torch.device, reps: int, paths: tuple[str, ...],
                       questions: tuple[str, ...] = QUESTIONS) -> list[dict[str, object]]:
    """One row per (cuda_graphs, kernels) setting: eager on the first kernel path, then graphed on each
    (with "triton", graphed passes attend through the block-attention kernel, with "torch" through SDPA).
    Raises if any setting decodes different ids than the eager one."""
    from dlm.cli import DEMO_CHECKPOINT
    from dlm.engine import Engine

    rows, decoded = [], []
    for graphs, kernels in [("off", paths[0]), *(("on", path) for path in paths)]:
        engine = Engine.from_dir(DEMO_CHECKPOINT, device=str(device), kernels=kernels, cuda_graphs=graphs)
        try:
            _timed_turns(engine, 1, questions)  # warm-up: CUDA context, Triton JIT, graph capture
            ids, figures = _timed_turns(engine, reps, questions)
        finally:
            engine.close()
        decoded.append(ids)
        rows.append({"engine": "demo checkpoint", "cuda_graphs": graphs, "kernels": kernels,
                     **{k: round(v, 3) for k, v in figures.items()}})
        print(f"  engine cuda_graphs={graphs} kernels={kernels}: first block {figures['first_block_ms']:.2f} ms, "
              f"{figures['ms_per_pass']:.3f} ms/pass", flush=True)
    if any(ids != decoded[0] for ids in decoded):
        raise AssertionError("a CUDA-graphed engine decoded different ids than the eager one")
    return rows
