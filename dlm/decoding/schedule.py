"""Where blocks begin and end, and how many tokens each denoising pass may unmask.

Block-causal checkpoints are trained with blocks aligned at absolute position 0, so a block of size ``b``
always ends at a multiple of ``b``. Keeping that rule for every block — the prompt's, the first generated
one, and a smaller first block when a schedule asks for one — makes a cached decode equal to recomputing
the whole sequence under the mask the same boundaries define (see :func:`segment_mask`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch


def transfer_counts(n: int, steps: int) -> list[int]:
    """Split ``n`` unmaskings over ``steps`` passes, the remainder going to the first passes."""
    if steps <= 0:
        raise ValueError(f"steps must be positive, got {steps}")
    base, extra = divmod(n, steps)
    return [base + (1 if i < extra else 0) for i in range(steps)]


def align_up(position: int, size: int) -> int:
    """The first multiple of ``size`` that is >= ``position``."""
    return -(-position // size) * size


def block_end(start: int, size: int) -> int:
    """End of the block that holds position ``start`` when blocks of ``size`` are aligned at 0."""
    return align_up(start + 1, size)


def window_end(known: int, size: int, context: int) -> int:
    """End of the window that decodes position ``known``: its block's end, cut short at the end of the context
    (the model has no positions past it), so a reply may use the whole context."""
    return min(block_end(known, size), context)


def block_sizes(schedule: Sequence[int], default: int) -> Iterator[int]:
    """The size of each successive generated block: the schedule's entries, then ``default`` for ever."""
    for size in schedule:
        if size <= 0:
            raise ValueError(f"block sizes must be positive, got {size}")
        yield size
    while True:
        yield default


def segment_ids(ends: Sequence[int]) -> torch.Tensor:
    """For positions ``0 .. ends[-1]-1``, the index of the segment (block) each one belongs to."""
    ids = torch.empty(ends[-1] if ends else 0, dtype=torch.long)
    start = 0
    for i, end in enumerate(ends):
        if end <= start:
            raise ValueError(f"segment ends must increase, got {list(ends)}")
        ids[start:end] = i
        start = end
    return ids


def segment_mask(ends: Sequence[int], device: torch.device | str | None = None) -> torch.Tensor:
    """Block-causal mask for blocks ending at ``ends``: query i sees key j iff j's block is not after i's."""
    seg = segment_ids(ends).to(device)
    return seg[None, :] <= seg[:, None]
