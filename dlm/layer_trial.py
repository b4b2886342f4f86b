"""Which layer steps the engine's graphed passes run: chosen on the GPU they run on, by timing and checking each.

The thin-product layer (:class:`dlm.fused_layers.LayerSteps` with ``thin``: 5 launches a layer under PDL, the
add-norms, SwiGLU, q/k norm, RoPE and the attention merge inside its kernels) is built to beat the fused layer on
cuBLAS (10 launches) at a block's 16 rows, but whether it does depends on the GPU, the model's shapes and the
Triton release. So on CUDA the engine does not guess: at start it runs one block's denoising pass over a cached
prefix with each candidate (the thin layer with and without PDL), graphed as a session would run it, checks each
candidate's logits against the first (the fused layer on cuBLAS, the path the GPU check has verified), and keeps the
fastest candidate that agrees.
A candidate that fails or disagrees is dropped with the reason, so a kernel bug costs speed, never wrong tokens.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import torch

from dlm.fused_layers import LayerSteps
from dlm.graphed_forward import GraphedForward
from dlm.kv_cache import KVCache
from dlm.model import Transformer

LAYER_STEPS = ("auto", "fused", "thin")
# the fused layer on cuBLAS (the reference), and the thin layer with and without programmatic dependent launch
CANDIDATES = (LayerSteps("triton"), LayerSteps("triton", thin=True), LayerSteps("triton", thin=True, pdl=True))
MIN_ARGMAX_AGREEMENT = 0.9  # of a block's rows: random tokens leave near-ties that a summation order can flip
TRIAL_PREFIX, TRIAL_BLOCK = 512, 16  # the trial pass: a 16-token block after 512 cached positions (or fewer)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Trial:
    """One candidate's trial pass: its graphed time, its agreement with the reference, and why it was dropped
    (``None`` if it was not)."""

    steps: LayerSteps
    ms_per_pass: float | None
    argmax_agree: float | None
    dropped: str | None

    def __str__(self) -> str:
        return f"{self.steps.label}: {self.ms_per_pass} ms" + (f", dropped ({self.dropped})" if self.dropped else "")


def resolve_layer_steps(setting: str, model: Transformer, kernels: str, graphed: bool
                        ) -> tuple[LayerSteps, list[Trial]]:  # fmt: skip
    """The layer steps for ``setting``: "fused" (the fused layer, products on cuBLAS), "thin" (the thin-product
    layer under PDL; the Triton path only) or "auto" (on CUDA with the Triton path and graphs, the trial's
    choice; else the fused layer), and the trials run to choose them."""
    if setting not in LAYER_STEPS:
        raise ValueError(f"layer_steps must be one of {LAYER_STEPS}, got {setting!r}")
    if setting == "thin":
        return LayerSteps(kernels, thin=True, pdl=True), []  # LayerSteps refuses it off the Triton path
    device = model.output_weight().device
    if setting == "fused" or not (graphed and kernels == "triton" and device.type == "cuda"):
        return LayerSteps(kernels), []
    trials = run_trials(model)
    chosen = fastest(trials)
    log.info("layer steps: %s, of %s", chosen.label, "; ".join(map(str, trials)))
    return chosen, trials


def run_trials(model: Transformer, candidates: tuple[LayerSteps, ...] = CANDIDATES, passes: int = 20,
               prefix: int = TRIAL_PREFIX, block: int = TRIAL_BLOCK) -> list[Trial]:  # fmt: skip
    """Each candidate's pass over the same block and cache (random tokens and K/V), timed over ``passes`` graph
    replays after its capture; the logits of the first candidate that runs are the reference the others must
    agree with."""
    device, cfg = model.output_weight().device, model.cfg
    prefix = min(prefix, cfg.max_position_embeddings - block)  # a short-context model: what fits
    generator = torch.Generator(device=device).manual_seed(0)
    window = torch.randint(0, cfg.vocab_size, (block,), generator=generator, device=device)
    prefix_kv = torch.randn((2, cfg.num_layers, 1, cfg.num_kv_heads, prefix, cfg.head_dim), generator=generator,
                            device=device).to(model.output_weight().dtype)  # fmt: skip
    reference: tuple[torch.Tensor, LayerSteps] | None = None  # the first candidate's logits that ran, and it
    trials = []
    for steps in candidates:
        try:
            logits, ms = _timed_pass(model, steps, prefix_kv, window, passes)
        except Exception as exc:  # a kernel that cannot compile or launch here: the others still run
            trials.append(Trial(steps, None, None, f"{type(exc).__name__}: {exc}"[:200]))
            continue
        reference = reference or (logits, steps)
        agree = (logits.argmax(-1) == reference[0].argmax(-1)).float().mean().item()
        dropped = None
        if not torch.isfinite(logits).all():
            dropped = "non-finite logits"
        elif agree < MIN_ARGMAX_AGREEMENT:
            dropped = f"argmax agrees with {reference[1].label} on {agree:.0%} of the rows"
        trials.append(Trial(steps, round(ms, 4), round(agree, 3), dropped))
    return trials


def fastest(trials: list[Trial]) -> LayerSteps:
    """The fastest candidate not dropped (the first, the reference, if every one was)."""
    kept = [t for t in trials if t.dropped is None]
    return min(kept, key=lambda t: t.ms_per_pass).steps if kept else trials[0].steps


def _timed_pass(model: Transformer, steps: LayerSteps, prefix_kv: torch.Tensor, window: torch.Tensor,
                passes: int) -> tuple[torch.Tensor, float]:  # fmt: skip
    """The logits of ``window`` after the cached ``prefix_kv`` through ``steps``, and the ms a pass takes."""
    device = window.device
    cache = KVCache(model.cfg, prefix_kv.shape[4] + window.shape[0], dtype=prefix_kv.dtype, device=device)
    cache.k[..., : prefix_kv.shape[4], :] = prefix_kv[0]
    cache.v[..., : prefix_kv.shape[4], :] = prefix_kv[1]
    cache.commit(prefix_kv.shape[4])
    forward = GraphedForward(model, cache, steps)
    rows = torch.arange(window.shape[0], device=device)
    logits = forward.denoise(window, rows).float()  # captures the graph (on CUDA) and replays it once
    _synchronize(device)
    started = time.perf_counter()
    for _ in range(passes):
        forward.denoise(window, rows)
    _synchronize(device)
    return logits, (time.perf_counter() - started) * 1000 / passes


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
