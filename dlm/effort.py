"""The ``effort`` knob: one word for how much compute each block gets — the product's "tunable reasoning".

low    Fast-dLLM's factor rule at 1.5 (many tokens per pass) and, where the checkpoint was trained for it, a
       small first block
medium the factor rule at 0.3 (`confidence.by_factor`)
high   one token per pass (passes per block = block size)

Every effort commits left to right: a pass takes a run of the leftmost masked positions that its rule
allows (`confidence.leftmost_run`), not the most confident ones wherever they are. On the demo checkpoint
that is more exact at as many tokens per pass, and the factor rules decode more tokens per pass than the
thresholds they replaced (0.7 for low, 0.85 for medium) and are more exact too (README, "How many tokens a
pass commits").

Raw knobs (block size, first block size, threshold, factor, passes per block, order) override what the effort
picks.
"""

from __future__ import annotations

from dataclasses import dataclass

from dlm.config import ModelConfig
from dlm.decoding.block_causal import BlockPolicy
from dlm.decoding.confidence import Sampling, check_pass_rule

EFFORTS = ("low", "medium", "high")
DEFAULT_EFFORT = "medium"
SMALL_FIRST_BLOCK = 4


@dataclass(frozen=True)
class PassRule:
    """How many masked positions one pass of an effort commits: every one above ``threshold``, or the most
    confident ones under the factor rule, or (neither) one per pass; ``in_order``: as a run of the leftmost."""

    threshold: float | None = None
    factor: float | None = None
    in_order: bool = True


PASS_RULES: dict[str, PassRule] = {"low": PassRule(factor=1.5), "medium": PassRule(factor=0.3), "high": PassRule()}

# Families whose official sampler decodes a block in sub-blocks (Fast-dLLM v2's ``small_block_size``).
SUB_BLOCKS = {"fast_dllm_qwen": 8}


@dataclass(frozen=True)
class Knobs:
    """What a caller may set; ``None`` = let the effort decide."""

    effort: str | None = None
    block_size: int | None = None
    first_block_size: int | None = None
    threshold: float | None = None
    factor: float | None = None
    passes_per_block: int | None = None
    sub_block: int | None = None
    in_order: bool | None = None  # False: commit the most confident positions, wherever they are
    max_new_tokens: int = 128
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0


def resolve(
    cfg: ModelConfig, knobs: Knobs, stop_ids: frozenset[int], trained_block_sizes: tuple[int, ...] = ()
) -> BlockPolicy:
    """The decoding policy for one generation.

    ``trained_block_sizes`` are the block sizes the checkpoint was trained with: a small first block is only
    chosen by ``effort=low`` when the checkpoint knows it (an explicit ``first_block_size`` always applies).
    """
    effort = knobs.effort or DEFAULT_EFFORT
    if effort not in EFFORTS:
        raise ValueError(f"unknown effort {effort!r}; use one of {', '.join(EFFORTS)}")
    if sum(k is not None for k in (knobs.threshold, knobs.factor, knobs.passes_per_block)) > 1:
        raise ValueError("give one of threshold, factor and passes per block, not several")
    check_pass_rule(knobs.threshold, knobs.factor)
    block = knobs.block_size or cfg.block_size
    if block < 1:
        raise ValueError(f"block size must be >= 1, got {block}")
    rule = PASS_RULES[effort]
    threshold, factor = rule.threshold, rule.factor
    passes = block if effort == "high" else None
    if knobs.threshold is not None:
        threshold, factor, passes = knobs.threshold, None, None
    elif knobs.factor is not None:
        threshold, factor, passes = None, knobs.factor, None
    elif knobs.passes_per_block is not None:
        threshold, factor, passes = None, None, knobs.passes_per_block
    first: tuple[int, ...] = ()
    if knobs.first_block_size is not None:
        first = (knobs.first_block_size,)
    elif effort == "low" and SMALL_FIRST_BLOCK in trained_block_sizes and block > SMALL_FIRST_BLOCK:
        first = (SMALL_FIRST_BLOCK,)
    sub = knobs.sub_block if knobs.sub_block is not None else SUB_BLOCKS.get(cfg.model_type)
    return BlockPolicy(
        block_size=block,
        first_blocks=first,
        sub_block=sub if sub and sub < block else None,
        threshold=threshold,
        factor=factor,
        passes_per_block=passes,
        in_order=rule.in_order if knobs.in_order is None else knobs.in_order,
        sampling=Sampling(temperature=knobs.temperature, top_p=knobs.top_p, top_k=knobs.top_k),
        max_new_tokens=knobs.max_new_tokens,
        stop_ids=stop_ids,
    )
