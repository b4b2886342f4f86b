"""The approximate KV cache of the fully bidirectional families (LLaDA, Dream), as Fast-dLLM builds it.

In a bidirectional model every key depends on every token, masks included, so no cache is exact: once a
token is unmasked, the K/V of all other positions change. Fast-dLLM's answer is to recompute the K/V of the
whole canvas in one *refresh* pass at the start of each block and let the passes in between reuse it:

- **prefix cache**: those passes feed the block *and every later position* and attend to the cached
  K/V of everything before the block (the refreshed prompt and finished blocks);
- **dual cache**: those passes feed only the block and attend to the cached K/V of the prefix *and* of
  the still-masked suffix, so a pass costs a block's worth of queries.

One buffer serves both. A pass writes its new K/V at ``length`` (in place, as the reference does) and
attends to everything up to its own end, or, for the dual cache, up to the end of the canvas. The model
applies RoPE before calling :meth:`update`, so the buffer holds post-RoPE keys; the references cache
pre-RoPE keys and rotate them on every call, which is the same arithmetic at the same positions.
"""

from __future__ import annotations

import torch

from dlm.config import ModelConfig
from dlm.kv_cache import allocate_kv


class CanvasCache:
    """K/V of one canvas (prompt + answer positions), refreshed once per block."""

    def __init__(
        self,
        cfg: ModelConfig,
        capacity: int,
        batch: int = 1,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
    ) -> None:
        self.k, self.v = allocate_kv(cfg, capacity, batch, dtype, device, "canvas")
        self.length = 0  # where the next pass's keys go; the model numbers positions from here
        self._visible = 0  # attend at least this far (the canvas end, for the dual cache)

    @property
    def capacity(self) -> int:
        return self.k.shape[3]

    def refresh(self) -> None:
        """The next pass covers the whole canvas from position 0 and rewrites all of it."""
        self.length, self._visible = 0, 0

    def prefix(self, start: int) -> None:
        """Next passes start at ``start`` and see the cached prefix before it plus themselves."""
        self.length, self._visible = start, 0

    def dual(self, start: int, canvas_end: int) -> None:
        """Next passes start at ``start`` and see the whole cached canvas, their own K/V swapped in."""
        self.length, self._visible = start, canvas_end

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        start, end = self.length, self.length + k.shape[2]
        if end > self.capacity:
            raise ValueError(f"canvas cache full: {end} positions needed, capacity {self.capacity}")
        self.k[layer, :, :, start:end] = k
        self.v[layer, :, :, start:end] = v
        stop = max(end, self._visible)
        return self.k[layer, :, :, :stop], self.v[layer, :, :, :stop]
