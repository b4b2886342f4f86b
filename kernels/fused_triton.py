"""Triton kernels that fuse a decoder layer's small elementwise steps (imported only on the Triton path).

At a 16-token block each of these steps is a launch that moves a few kilobytes: inside a graphed pass the
per-kernel floor of a few microseconds, times the steps, times the layers, is most of what is not matrix
products. One program handles one row (a token, or a token's head), so the grids are wide enough to fill
the GPU at a block and the whole row fits in registers.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels import pdl
from kernels.pdl_triton import wait_for_previous_kernel


@triton.jit
def _add_rms_norm_kernel(
    x_ptr, sx, delta_ptr, sd, w_ptr, out_ptr, so, N, eps,
    BLOCK: tl.constexpr, GDC: tl.constexpr,
):  # fmt: skip
    wait_for_previous_kernel(GDC)
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    ok = cols < N
    x = tl.load(x_ptr + row * sx + cols, mask=ok, other=0.0)
    d = tl.load(delta_ptr + row * sd + cols, mask=ok, other=0.0)
    x = (x.to(tl.float32) + d.to(tl.float32)).to(x_ptr.dtype.element_ty)  # the residual stream's own rounding
    tl.store(x_ptr + row * sx + cols, x, mask=ok)
    xf = x.to(tl.float32)
    r = tl.rsqrt(tl.sum(xf * xf, 0) / N + eps)
    w = tl.load(w_ptr + cols, mask=ok, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * so + cols, (xf * r * w).to(out_ptr.dtype.element_ty), mask=ok)


@triton.jit
def _silu_mul_kernel(gu_ptr, sg, out_ptr, so, N, BLOCK: tl.constexpr, GDC: tl.constexpr):
    wait_for_previous_kernel(GDC)
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    ok = cols < N
    gate = tl.load(gu_ptr + row * sg + cols, mask=ok, other=0.0).to(tl.float32)
    up = tl.load(gu_ptr + row * sg + N + cols, mask=ok, other=0.0).to(tl.float32)
    act = (gate / (1.0 + tl.exp(-gate))).to(out_ptr.dtype.element_ty).to(tl.float32)  # silu rounds first
    tl.store(out_ptr + row * so + cols, (act * up).to(out_ptr.dtype.element_ty), mask=ok)


@triton.jit
def _norm_rope_heads(src, w_ptr, c, s, dst, dst_head_stride, n_heads, HALF, eps,
                     BLOCK_H: tl.constexpr, BLOCK_HALF: tl.constexpr, NORM: tl.constexpr):  # fmt: skip
    """RMSNorm (with ``NORM``) each of ``n_heads`` heads (rows of 2 * HALF at ``src``), rotate them, store them
    at ``dst``."""
    rh = tl.arange(0, BLOCK_H)
    rd = tl.arange(0, BLOCK_HALF)
    d_ok = rd < HALF
    ok = (rh < n_heads)[:, None] & d_ok[None, :]
    at = rh[:, None] * (2 * HALF) + rd[None, :]
    x1 = tl.load(src + at, mask=ok, other=0.0)
    x2 = tl.load(src + at + HALF, mask=ok, other=0.0)
    n1, n2 = x1.to(tl.float32), x2.to(tl.float32)
    dtype = x1.dtype
    if NORM:
        r = tl.rsqrt((tl.sum(n1 * n1, 1) + tl.sum(n2 * n2, 1)) / (2 * HALF) + eps)[:, None]
        # RMSNorm rounds to the model's dtype before RoPE, as the two separate steps do
        n1 = (n1 * r * tl.load(w_ptr + rd, mask=d_ok, other=0.0).to(tl.float32)[None, :]).to(dtype).to(tl.float32)
        n2 = (n2 * r * tl.load(w_ptr + HALF + rd, mask=d_ok, other=0.0).to(tl.float32)[None, :]).to(dtype).to(
            tl.float32)
    out = dst + rh[:, None] * dst_head_stride + rd[None, :]
    tl.store(out, (n1 * c - n2 * s).to(dtype), mask=ok)
    tl.store(out + HALF, (n2 * c + n1 * s).to(dtype), mask=ok)


@triton.jit
def _qk_norm_rope_kernel(
    qkv_ptr, s_b, s_t,
    qw_ptr, kw_ptr, cos_ptr, sin_ptr, s_ct, pos_ptr,
    q_ptr, sq_b, sq_t, sq_h,
    kc_ptr, skc_b, skc_t, skc_h, vc_ptr, svc_b, svc_t, svc_h,
    T, H, H_KV, HALF, eps,
    BLOCK_H: tl.constexpr, BLOCK_KV: tl.constexpr, BLOCK_HALF: tl.constexpr, NORM: tl.constexpr, GDC: tl.constexpr,
):  # fmt: skip
    """One program per token: its q heads, k heads and v heads of the fused projection, in that order."""
    wait_for_previous_kernel(GDC)
    pid = tl.program_id(0)
    b = (pid // T).to(tl.int64)
    t = pid % T
    rd = tl.arange(0, BLOCK_HALF)
    d_ok = rd < HALF
    src = qkv_ptr + b * s_b + t.to(tl.int64) * s_t
    pos = tl.load(pos_ptr + t).to(tl.int64)
    c = tl.load(cos_ptr + t * s_ct + rd, mask=d_ok, other=0.0).to(tl.float32)[None, :]
    s = tl.load(sin_ptr + t * s_ct + rd, mask=d_ok, other=0.0).to(tl.float32)[None, :]
    _norm_rope_heads(src, qw_ptr, c, s, q_ptr + b * sq_b + t.to(tl.int64) * sq_t, sq_h, H, HALF, eps,
                     BLOCK_H, BLOCK_HALF, NORM)  # fmt: skip
    _norm_rope_heads(src + H * 2 * HALF, kw_ptr, c, s, kc_ptr + b * skc_b + pos * skc_t, skc_h, H_KV, HALF, eps,
                     BLOCK_KV, BLOCK_HALF, NORM)  # fmt: skip
    rh = tl.arange(0, BLOCK_KV)
    ok = (rh < H_KV)[:, None] & d_ok[None, :]
    v_src = src + (H + H_KV) * 2 * HALF + rh[:, None] * (2 * HALF) + rd[None, :]
    v_dst = vc_ptr + b * svc_b + pos * svc_t + rh[:, None] * svc_h + rd[None, :]
    tl.store(v_dst, tl.load(v_src, mask=ok, other=0.0), mask=ok)
    tl.store(v_dst + HALF, tl.load(v_src + HALF, mask=ok, other=0.0), mask=ok)


def add_rms_norm(x: torch.Tensor, delta: torch.Tensor, weight: torch.Tensor, eps: float, out: torch.Tensor) -> None:
    """Rows of 2-D views: ``x += delta`` in place, ``out = rms_norm(x) * weight``."""
    rows, n = x.shape
    _add_rms_norm_kernel[(rows,)](
        x, x.stride(0), delta, delta.stride(0), weight, out, out.stride(0), n, eps,
        BLOCK=triton.next_power_of_2(n), num_warps=4 if n <= 2048 else 8, **pdl.launch_options(x.device),
    )  # fmt: skip


def silu_mul(gate_up: torch.Tensor, out: torch.Tensor) -> None:
    """Rows of 2-D views: ``out = silu(gate_up[:, :N]) * gate_up[:, N:]``."""
    rows, n = out.shape
    block = min(2048, triton.next_power_of_2(n))
    _silu_mul_kernel[(rows, triton.cdiv(n, block))](gate_up, gate_up.stride(0), out, out.stride(0), n, BLOCK=block,
                                                    **pdl.launch_options(out.device))  # fmt: skip


def qk_norm_rope(
    qkv: torch.Tensor, heads: int, kv_heads: int, q_weight: torch.Tensor | None, k_weight: torch.Tensor | None,
    eps: float, cos: torch.Tensor, sin: torch.Tensor, positions: torch.Tensor, q_out: torch.Tensor,
    k_cache: torch.Tensor, v_cache: torch.Tensor,
) -> None:  # fmt: skip
    """``qkv`` ``[B, T, (H + 2 Hkv) D]``; writes ``q_out`` ``[B, T, H, D]`` and the caches ``[B, cap, Hkv, D]``.
    Without norm weights q and k are only rotated (Qwen2-style layers)."""
    B, T, _ = qkv.shape
    half = q_out.shape[-1] // 2
    norm = q_weight is not None
    _qk_norm_rope_kernel[(B * T,)](
        qkv, qkv.stride(0), qkv.stride(1),
        q_weight if norm else qkv, k_weight if norm else qkv, cos, sin, cos.stride(0), positions,
        q_out, *q_out.stride()[:3],
        k_cache, *k_cache.stride()[:3], v_cache, *v_cache.stride()[:3],
        T, heads, kv_heads, half, eps,
        BLOCK_H=triton.next_power_of_2(heads), BLOCK_KV=triton.next_power_of_2(kv_heads),
        BLOCK_HALF=triton.next_power_of_2(half), NORM=norm, **pdl.launch_options(qkv.device),
    )  # fmt: skip
