"""Triton kernel for rotary embeddings (rotate-half convention), one program per token."""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _rotary_kernel(
    x_ptr, sx_b, sx_t, sx_h, out_ptr, so_b, so_t, so_h, cos_ptr, sin_ptr, sc_b, sc_t,
    T, H, HALF,
    BLOCK_H: tl.constexpr, BLOCK_HALF: tl.constexpr,
):  # fmt: skip
    pid = tl.program_id(0)
    b = pid // T
    t = pid % T
    rh = tl.arange(0, BLOCK_H)
    rd = tl.arange(0, BLOCK_HALF)
    d_ok = rd < HALF
    ok = (rh < H)[:, None] & d_ok[None, :]
    c_off = b.to(tl.int64) * sc_b + t.to(tl.int64) * sc_t + rd
    c = tl.load(cos_ptr + c_off, mask=d_ok, other=0.0).to(tl.float32)[None, :]
    s = tl.load(sin_ptr + c_off, mask=d_ok, other=0.0).to(tl.float32)[None, :]
    x_off = b.to(tl.int64) * sx_b + t.to(tl.int64) * sx_t + rh[:, None] * sx_h + rd[None, :]
    x1 = tl.load(x_ptr + x_off, mask=ok, other=0.0).to(tl.float32)
    x2 = tl.load(x_ptr + x_off + HALF, mask=ok, other=0.0).to(tl.float32)
    o_off = b.to(tl.int64) * so_b + t.to(tl.int64) * so_t + rh[:, None] * so_h + rd[None, :]
    dtype = out_ptr.dtype.element_ty
    tl.store(out_ptr + o_off, (x1 * c - x2 * s).to(dtype), mask=ok)
    tl.store(out_ptr + o_off + HALF, (x2 * c + x1 * s).to(dtype), mask=ok)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """``x``/``out`` ``[B, T, H, D]`` (last dim contiguous), ``cos``/``sin`` ``[B, T, D/2]`` (any strides
    with a contiguous last dim; a stride-0 batch dim broadcasts one table over the batch)."""
    B, T, H, D = x.shape
    half = D // 2
    _rotary_kernel[(B * T,)](
        x, *x.stride()[:3], out, *out.stride()[:3], cos, sin, cos.stride(0), cos.stride(1),
        T, H, half,
        BLOCK_H=triton.next_power_of_2(H), BLOCK_HALF=triton.next_power_of_2(half),
    )  # fmt: skip
    return out
