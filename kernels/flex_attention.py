"""FlexAttention forms of the block attention and the block-causal prefill: a candidate the GPU check times.

The issue asks that where PyTorch's SDPA or FlexAttention is as fast as the Triton kernels, the engine use it,
decided by measurement. FlexAttention (``torch.nn.attention.flex_attention``) takes the attention's rule as a
mask function, and ``torch.compile`` turns it into one Triton kernel that skips the key tiles its block mask
leaves out. The rules here are the model's: a block's queries see the cache up to each sequence's length (the
block's own keys written there first, as the engine's passes write them), and a prompt's tokens see their own
block and every block before it. Compiled on CUDA; elsewhere torch's eager loop runs it, which checks the masks,
not the speed.

Layouts are ``[B, T, H, D]``, as in :mod:`kernels.block_attention`. The cache slots past a length must hold
finite values, as the engine's zeroed cache does: a masked key's value is weighed by zero, not skipped. A block
mask depends on the lengths it was built for: a caller builds it once a block (the cache grows only when a block
commits) and reuses it for every pass of that block.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch
from torch.nn.attention.flex_attention import BlockMask, create_block_mask, flex_attention


def cache_mask(lengths: torch.Tensor, n_q: int, capacity: int) -> BlockMask:
    """Each sequence's ``n_q`` queries over a cache of ``capacity`` rows, of which sequence ``b`` holds
    ``lengths[b]`` valid ones (its block's keys included)."""

    def visible(b: torch.Tensor, h: torch.Tensor, q_idx: torch.Tensor, kv_idx: torch.Tensor) -> torch.Tensor:
        return kv_idx < lengths[b]

    return create_block_mask(visible, lengths.numel(), None, n_q, capacity, device=lengths.device)


def block_causal_mask(tokens: int, block: int, device: torch.device | str) -> BlockMask:
    """A ``tokens``-long prompt from position 0: a token sees its own ``block``-sized block and all before it."""

    def visible(b: torch.Tensor, h: torch.Tensor, q_idx: torch.Tensor, kv_idx: torch.Tensor) -> torch.Tensor:
        return q_idx // block >= kv_idx // block

    return create_block_mask(visible, None, None, tokens, tokens, device=device)


@functools.cache
def _compiled() -> Callable[..., torch.Tensor]:
    """One compiled FlexAttention for the process: its compiled kernels are kept per shape across calls."""
    return torch.compile(flex_attention, dynamic=False)


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: BlockMask, scale: float | None = None
           ) -> torch.Tensor:  # fmt: skip
    """``[B, Tq, Hq, D]`` queries over ``[B, Tk, Hkv, D]`` keys and values as ``mask`` allows (GQA when
    ``Hq > Hkv``); compiled on CUDA."""
    run = _compiled() if q.device.type == "cuda" else flex_attention
    out = run(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), block_mask=mask, scale=scale,
              enable_gqa=q.shape[2] != k.shape[2])  # fmt: skip
    return out.transpose(1, 2)
