"""SDAR's reference sampler (JetAstra/SDAR ``generate.py::block_diffusion_generate``), reproduced exactly.

Semantics worth knowing: blocks are aligned at absolute position 0; only the prompt's *full* blocks are
prefilled, its tail is decoded inside the first block; the per-pass unmask counts are computed for a full
block even when the first block is partly prompt; a stop id ends generation after the whole block that holds
it, and later blocks stay mask ids in the returned sequence. The product engine (``block_causal``) keeps the
alignment and the exact cache but uses real softmax confidences.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from dlm.decoding.confidence import Sampling, masked_confidence, most_confident, pick_tokens, token_entropy
from dlm.decoding.prefill import prefill_blocks
from dlm.decoding.schedule import align_up, transfer_counts
from dlm.kv_cache import KVCache
from dlm.model import Transformer

STRATEGIES = ("sequential", "low_confidence_static", "low_confidence_dynamic", "entropy_bounded")


def _choose(
    strategy: str, masked: torch.Tensor, conf: torch.Tensor, count: int, threshold: float,
    entropy: torch.Tensor | None, entropy_budget: float | None,
) -> torch.Tensor:
    positions = masked.nonzero()[:, 0]
    count = min(count, positions.numel())
    chosen = torch.zeros_like(masked)
    if strategy == "sequential":  # the leftmost masked positions
        chosen[positions[:count]] = True
    elif strategy == "entropy_bounded":  # the least uncertain ones whose summed entropy stays in budget
        assert entropy is not None and entropy_budget is not None
        values, order = torch.sort(entropy[positions])
        in_budget = int(torch.searchsorted(values.cumsum(0), values.new_tensor(entropy_budget)))
        chosen[positions[order[:max(count, in_budget, 1)]]] = True
    elif strategy == "low_confidence_dynamic" and int((masked_confidence(conf, masked) > threshold).sum()) >= count:
        chosen = masked_confidence(conf, masked) > threshold
    else:
        chosen = most_confident(conf, masked, count)
    return chosen


@torch.no_grad()
def block_diffusion_generate(
    model: Transformer,
    prompt_ids: Sequence[int],
    mask_id: int,
    gen_length: int = 128,
    block_length: int = 8,
    denoising_steps: int = 8,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    remasking_strategy: str = "low_confidence_dynamic",
    confidence_threshold: float = 0.85,
    eb_threshold: float | None = None,
    stopping_criteria_idx: Sequence[int] | None = None,
    generator: torch.Generator | None = None,
) -> list[int]:
    """The full returned sequence (prompt included), as the reference returns it."""
    if remasking_strategy not in STRATEGIES:
        raise ValueError(f"unknown remasking strategy {remasking_strategy!r}; use one of {STRATEGIES}")
    if remasking_strategy == "entropy_bounded" and eb_threshold is None:
        raise ValueError("eb_threshold is required for the entropy_bounded strategy")
    if not 1 <= denoising_steps <= block_length:
        raise ValueError("SDAR requires 1 <= denoising_steps <= block_length")
    device = model.output_weight().device
    sampling = Sampling(temperature=temperature, top_p=top_p, top_k=top_k)
    size, prompt_len = block_length, len(prompt_ids)
    total = align_up(prompt_len + gen_length, size)
    x = torch.full((total,), mask_id, dtype=torch.long, device=device)
    x[:prompt_len] = torch.tensor(list(prompt_ids), dtype=torch.long)
    cache = KVCache(model.cfg, total, dtype=model.output_weight().dtype, device=device)
    start = prompt_len // size * size
    prefill_blocks(model, cache, x[:start], size)
    counts = transfer_counts(size, denoising_steps)
    stops = set(stopping_criteria_idx or ())

    for block_start in range(start, total, size):
        block = x[block_start:block_start + size]  # a view: writes land in x
        positions = torch.arange(block_start, block_start + size, device=device)
        for step in range(denoising_steps + 1):
            masked = block == mask_id
            if not masked.any():
                cache.store = True
                model(block[None], position_ids=positions, cache=cache)
                cache.store = False
                cache.commit(size)
                break
            if step == denoising_steps:
                raise RuntimeError(f"SDAR block at {block_start} still has masks after {denoising_steps} steps")
            logits = model(block[None], position_ids=positions, cache=cache)[0]
            tokens, conf = pick_tokens(logits, sampling, generator)
            entropy = token_entropy(logits, sampling) if remasking_strategy == "entropy_bounded" else None
            chosen = _choose(
                remasking_strategy, masked, conf, counts[step], confidence_threshold, entropy, eb_threshold
            )
            block[chosen] = tokens[chosen]
        if stops and stops & set(x[prompt_len:].tolist()):
            break
    return x.tolist()
