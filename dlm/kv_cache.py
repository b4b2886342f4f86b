"""A preallocated per-session KV cache.

Block diffusion fills the cache exactly like an autoregressive model fills its own, one committed block at a
time, but every denoising pass in between must attend to the cache *without* writing to it. So ``update``
either stores the new keys (``store=True``, then :meth:`commit` advances the length) or just concatenates
them for the pass. Rolling back to a shorter prefix is a length change, never a copy.
"""

from __future__ import annotations

import torch

from dlm.config import ModelConfig


def allocate_kv(
    cfg: ModelConfig, capacity: int, batch: int, dtype: torch.dtype, device: torch.device | str, what: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-layer K and V buffers of ``capacity`` positions, refused beyond the model's context length."""
    if capacity > cfg.max_position_embeddings:
        raise ValueError(f"{what} of {capacity} positions exceeds the model's context length {cfg.max_position_embeddings}")
    shape = (cfg.num_layers, batch, cfg.num_kv_heads, capacity, cfg.head_dim)
    return torch.zeros(shape, dtype=dtype, device=device), torch.zeros(shape, dtype=dtype, device=device)


class KVCache:
    def __init__(
        self,
        cfg: ModelConfig,
        capacity: int,
        batch: int = 1,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
    ) -> None:
        self.k, self.v = allocate_kv(cfg, capacity, batch, dtype, device, "KV cache")
        self.length = 0
        self.store = False

    @property
    def capacity(self) -> int:
        return self.k.shape[3]

    def check_room(self, n: int) -> None:
        """Refuse a pass of ``n`` new positions that would not fit after the committed prefix."""
        if self.length + n > self.capacity:
            raise ValueError(f"KV cache full: {self.length + n} positions needed, capacity {self.capacity}")

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys/values to attend to for this pass: the committed prefix plus the new ones."""
        self.check_room(k.shape[2])
        start, end = self.length, self.length + k.shape[2]
        if self.store:
            self.k[layer, :, :, start:end] = k
            self.v[layer, :, :, start:end] = v
            return self.k[layer, :, :, :end], self.v[layer, :, :, :end]
        return torch.cat((self.k[layer, :, :, :start], k), 2), torch.cat((self.v[layer, :, :, :start], v), 2)

    def commit(self, n: int) -> None:
        """Make the last stored ``n`` positions part of the prefix."""
        self.length += n

    def truncate(self, length: int) -> None:
        """Roll back to the first ``length`` positions (e.g. the transcript changed)."""
        if not 0 <= length <= self.length:
            raise ValueError(f"cannot truncate a cache of length {self.length} to {length}")
        self.length = length

    def nbytes(self) -> int:
        return self.k.numel() * self.k.element_size() * 2
