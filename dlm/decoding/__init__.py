"""Decoding strategies: how masked positions of a block become committed tokens.

Every strategy is a generator over :class:`Commit` events so the engine can stream text the moment it is
final and stop (or be cancelled) between any two forward passes. Family-specific reference semantics live in
one module per family; shared pieces (schedules, confidence selection) in their own modules.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class DecodeParams:
    """The knobs of one generation; ``None`` means "the family's default"."""

    max_new_tokens: int = 128
    block_size: int | None = None
    threshold: float | None = 0.9  # confidence-threshold parallel decoding; None = factor rule or fixed schedule
    factor: float | None = None  # the factor rule (confidence.by_factor), used when threshold is None
    steps_per_block: int | None = None  # fixed-schedule passes per block (used when neither is set)
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None
    stop_ids: frozenset[int] = field(default_factory=frozenset)


@dataclass
class Commit:
    """Tokens that just became final, in order, continuing the generated text without gaps."""

    token_ids: list[int]
    forward_passes: int  # passes spent so far in this generation
    block_done: bool  # the block these tokens belong to is fully committed
    finished: bool = False  # a stop token or max tokens ended the generation
