"""Rotary position embeddings, the rotate-half convention of Qwen / Llama checkpoints.

Attention kernels here take already-rotated q and k (see ``kernels.block_attention``); this is
the one fused launch a caller can use to rotate them, instead of the half-dozen elementwise
kernels the torch expression costs per tensor per layer.
"""

from __future__ import annotations

import torch

from kernels import reference
from kernels.dispatch import kernel_path


def _broadcast_tables(table: torch.Tensor, batch: int, tokens: int, half: int) -> torch.Tensor:
    if table.dim() == 2:
        table = table.unsqueeze(0)
    if table.dim() != 3 or table.shape[1:] != (tokens, half) or table.shape[0] not in (1, batch):
        raise ValueError(f"cos/sin must be [T, D/2] or [B, T, D/2] = [{batch}, {tokens}, {half}], got {tuple(table.shape)}")
    table = table.expand(batch, tokens, half)
    return table if table.stride(-1) == 1 else table.contiguous()


def apply_rotary(
    x: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    *,
    out: torch.Tensor | None = None,
    path: str = "auto",
) -> torch.Tensor:
    """Rotate ``x`` ``[B, T, H, D]`` (or ``[T, H, D]``) by per-token angles.

    ``cos``/``sin`` are ``[T, D/2]`` or ``[B, T, D/2]``: cosines and sines of each token's angles
    (position times inverse frequency), *not* duplicated to D. With ``x1, x2`` the two halves of
    the head dim: ``out = [x1*cos - x2*sin, x2*cos + x1*sin]``, computed in fp32. ``out`` may be
    ``x`` itself (in place).
    """
    if x.dim() not in (3, 4) or x.shape[-1] % 2:
        raise ValueError(f"x must be [T, H, D] or [B, T, H, D] with an even D, got {tuple(x.shape)}")
    if out is not None and (out.shape != x.shape or out.dtype != x.dtype or out.device != x.device):
        raise ValueError("out must match x in shape, dtype and device")
    batched = x.dim() == 4
    x4 = x if batched else x.unsqueeze(0)
    B, T, _, D = x4.shape
    cos4, sin4 = (_broadcast_tables(t.to(x.device), B, T, D // 2) for t in (cos, sin))
    if kernel_path(path, x.device) == "torch":
        result = reference.rotary_ref(x4, cos4, sin4)
        result = result if batched else result[0]
        return result if out is None else out.copy_(result)
    from kernels import rotary_triton

    x4 = x4 if x4.stride(-1) == 1 else x4.contiguous()
    o4 = torch.empty_like(x4) if out is None else (out if batched else out.unsqueeze(0))
    if o4.stride(-1) != 1:  # the kernel writes each head's D values as one run: rotate into a dense copy first
        return out.copy_(apply_rotary(x4 if batched else x4[0], cos, sin, path=path))
    rotary_triton.apply_rotary(x4, cos4, sin4, o4)
    return o4 if batched else o4[0]
