"""Fused decoder-layer steps: residual add + RMSNorm, SwiGLU's activation, and q/k norm + RoPE + KV write.

Each is one Triton launch on the GPU path where the torch expression is several (see ``kernels.fused_triton``
for why that matters at a 16-token block), with the plain-torch reference otherwise. They take the fused
QKV and gate-up projections of Qwen3-shaped layers.
"""

from __future__ import annotations

import torch

from kernels import reference
from kernels.dispatch import kernel_path


def _rows(t: torch.Tensor) -> torch.Tensor:
    """A 2-D row view with a contiguous last dim (no copy for the usual contiguous activations)."""
    t = t if t.stride(-1) == 1 else t.contiguous()
    return t.reshape(-1, t.shape[-1])


def add_rms_norm(x: torch.Tensor, delta: torch.Tensor, weight: torch.Tensor, eps: float, *,
                 path: str = "auto") -> torch.Tensor:  # fmt: skip
    """``x += delta`` in place (the residual stream), then return ``rms_norm(x) * weight``.

    ``x`` must be contiguous (it is updated in place); ``delta`` of the same shape and dtype; ``weight`` of
    the last dim's size."""
    if delta.shape != x.shape or delta.dtype != x.dtype or weight.shape != x.shape[-1:]:
        raise ValueError(f"add_rms_norm: x {tuple(x.shape)}, delta {tuple(delta.shape)}, weight {tuple(weight.shape)}")
    if not x.is_contiguous():
        raise ValueError("add_rms_norm: x is updated in place and must be contiguous")
    if kernel_path(path, x.device) == "torch":
        return reference.add_rms_norm_ref(x, delta, weight, eps)
    from kernels import fused_triton

    out = torch.empty_like(x)
    fused_triton.add_rms_norm(x.view(-1, x.shape[-1]), _rows(delta), weight.contiguous(), eps, out.view(-1, x.shape[-1]))
    return out


def silu_mul(gate_up: torch.Tensor, *, path: str = "auto") -> torch.Tensor:
    """``silu(gate) * up`` of a fused gate-up projection ``[..., 2I]`` (gate first), as ``[..., I]``."""
    if gate_up.shape[-1] % 2:
        raise ValueError(f"silu_mul: the last dim must be even (gate then up), got {gate_up.shape[-1]}")
    if kernel_path(path, gate_up.device) == "torch":
        return reference.silu_mul_ref(gate_up)
    from kernels import fused_triton

    out = gate_up.new_empty(*gate_up.shape[:-1], gate_up.shape[-1] // 2)
    fused_triton.silu_mul(_rows(gate_up), out.view(-1, out.shape[-1]))
    return out


def check_rope_inputs(
    batch: int, tokens: int, width: int, heads: int, kv_heads: int, q_weight: torch.Tensor | None,
    k_weight: torch.Tensor | None, cos: torch.Tensor, sin: torch.Tensor, positions: torch.Tensor,
    k_cache: torch.Tensor, v_cache: torch.Tensor,
) -> int:  # fmt: skip
    """The head dim of a fused q/k/v projection ``width`` wide, or a ValueError naming what does not fit (see
    :func:`qk_norm_rope` for the shapes)."""
    if (q_weight is None) != (k_weight is None):
        raise ValueError("qk_norm_rope: give both q and k norm weights, or neither")
    if width % (heads + 2 * kv_heads) or (width // (heads + 2 * kv_heads)) % 2:
        raise ValueError(f"qk_norm_rope: width {width} is not (heads + 2 kv_heads) x an even head dim")
    D = width // (heads + 2 * kv_heads)
    if q_weight is not None and (q_weight.shape != (D,) or k_weight.shape != (D,)):
        raise ValueError(f"qk_norm_rope: q/k norm weights must be [{D}], got {tuple(q_weight.shape)}, "
                         f"{tuple(k_weight.shape)}")
    cache_shape = (batch, k_cache.shape[1], kv_heads, D)
    if tuple(k_cache.shape) != cache_shape or tuple(v_cache.shape) != cache_shape:
        raise ValueError(f"qk_norm_rope: caches must be {cache_shape}, got {tuple(k_cache.shape)}, {tuple(v_cache.shape)}")
    if tuple(cos.shape) != (tokens, D // 2) or cos.shape != sin.shape or positions.shape != (tokens,):
        raise ValueError(f"qk_norm_rope: cos/sin must be [{tokens}, {D // 2}] and positions [{tokens}]")
    return D


def qk_norm_rope(
    qkv: torch.Tensor, heads: int, kv_heads: int, q_weight: torch.Tensor | None, k_weight: torch.Tensor | None,
    eps: float,
    cos: torch.Tensor, sin: torch.Tensor, positions: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
    *, path: str = "auto",
) -> torch.Tensor:  # fmt: skip
    """A Qwen3 attention input in one launch: split the fused projection ``qkv`` ``[B, T, (H + 2 Hkv) D]``,
    RMSNorm each q and k head (``q_weight``/``k_weight`` ``[D]``), rotate them by ``cos``/``sin`` ``[T, D/2]``,
    and write k and v into ``k_cache``/``v_cache`` ``[B, capacity, Hkv, D]`` at ``positions`` (``[T]`` int64,
    on the device, so a CUDA graph can move them). Returns q ``[B, T, H, D]``. Without norm weights (both None:
    Qwen2-style layers) q and k are only rotated."""
    B, T, width = qkv.shape
    D = check_rope_inputs(B, T, width, heads, kv_heads, q_weight, k_weight, cos, sin, positions, k_cache, v_cache)
    if kernel_path(path, qkv.device) == "torch":
        return reference.qk_norm_rope_ref(qkv, heads, kv_heads, q_weight, k_weight, eps, cos, sin, positions,
                                          k_cache, v_cache)  # fmt: skip
    from kernels import fused_triton

    qkv = qkv if qkv.stride(-1) == 1 else qkv.contiguous()
    cos, sin = cos.contiguous(), sin.contiguous()  # one row stride serves both tables
    q = qkv.new_empty(B, T, heads, D)
    weights = (None, None) if q_weight is None else (q_weight.contiguous(), k_weight.contiguous())
    fused_triton.qk_norm_rope(qkv, heads, kv_heads, *weights, eps, cos, sin, positions, q, k_cache, v_cache)
    return q
