"""Chunked, block-aligned prefill of a KV cache.

A long prompt is fed in chunks of whole blocks so activations stay bounded (one chunk's worth, never the
whole prompt); every chunk sees the whole cache and is block-causal inside, which is exactly the mask the
full prompt would get in one pass. Only the last position's logits are computed — the vocabulary
projection of a 2k-token prompt would otherwise be the biggest tensor of the whole turn.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from dlm.decoding.schedule import block_end
from dlm.kv_cache import KVCache
from dlm.model import Transformer

DEFAULT_CHUNK = 512


def chunk_mask(cached: int, length: int, block_size: int, device: torch.device) -> torch.Tensor:
    """bool [length, cached + length]: all cached keys, then block-causal over absolute positions."""
    pos = torch.arange(cached, cached + length, device=device) // block_size
    inside = pos[None, :] <= pos[:, None]
    return torch.cat((torch.ones(length, cached, dtype=torch.bool, device=device), inside), dim=1)


ChunkForward = Callable[[torch.Tensor], torch.Tensor]  # ids [1, n] after the cache -> hidden [1, n, hidden]


@torch.no_grad()
def prefill_blocks(
    model: Transformer, cache: KVCache, ids: torch.Tensor, block_size: int, chunk: int = DEFAULT_CHUNK,
    run_chunk: ChunkForward | None = None,
) -> torch.Tensor | None:
    """Append ``ids`` [L] to the cache; returns the logits [V] of the last position (None if L == 0).

    Positions continue after ``cache.length``; blocks are aligned at absolute multiples of ``block_size``.
    ``run_chunk`` runs one chunk, block-causal after the cache, storing its K/V (default: the model's own
    layers under :func:`chunk_mask`; the fused layers bring their own).
    """
    blocks_per_chunk = max(1, chunk // block_size)
    last = None
    offset = 0
    cache.store = True
    try:
        while offset < ids.shape[0]:
            # end every chunk on an absolute block boundary, even when the cache does not start on one
            end = block_end(cache.length, block_size) + (blocks_per_chunk - 1) * block_size
            piece = ids[offset:offset + end - cache.length]
            offset += piece.shape[0]
            if run_chunk is None:
                mask = chunk_mask(cache.length, piece.shape[0], block_size, piece.device)
                hidden = model.hidden_states(piece[None], attn_mask=mask, cache=cache)
            else:
                hidden = run_chunk(piece[None])
            cache.commit(piece.shape[0])
            last = hidden[0, -1]
    finally:
        cache.store = False
    return None if last is None else torch.nn.functional.linear(last, model.output_weight())
