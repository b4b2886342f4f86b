"""The attention input of a block in one launch: the q/k/v product, q/k RMSNorm, RoPE and the K/V cache write.

On the thin path a layer's q/k/v product and its ``qk_norm_rope`` are two launches; here the product's
programs each own one head's ``D`` output columns (the K dimension split across programs, see
``kernels.thin_linear_triton``), and the program that finishes a head's sum last normalises, rotates and
stores it: q into its buffer, k and v into the cache at the block's positions. The arithmetic and the
roundings are ``F.linear`` then ``kernels.fused.qk_norm_rope``'s (the product rounded to the model's dtype,
then the norm rounded before the rotation). A candidate, timed by the GPU check on the thin path.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels import pdl
from kernels.attention_triton import dot_options
from kernels.split_count_triton import reset_count
from kernels.thin_linear_triton import (
    BLOCK_K,
    k_chunks,
    leave_partial,
    prefetch_options,
    row_scale,
    split_buffers,
    split_sums,
    strip_product,
)

SPLIT_K_COLUMNS = 512  # a 1.7B layer's 32 heads x 4 splits: 128 programs (a guess until the GPU check times it)


@triton.jit
def _qkv_rope_kernel(
    x_ptr, sx, w_ptr, sw, norm_ptr, eps, bias_ptr, qw_ptr, kw_ptr, head_eps,
    cos_ptr, sin_ptr, s_ct, pos_ptr, q_ptr, sq_b, sq_t, sq_h,
    kc_ptr, skc_b, skc_t, skc_h, vc_ptr, svc_b, svc_t, svc_h,
    part_ptr, squares_ptr, count_ptr, M, T, H, H_KV, N, K, k_chunk,
    D: tl.constexpr, BLOCK_K: tl.constexpr, SPLIT: tl.constexpr, PREC: tl.constexpr, UPCAST: tl.constexpr,
    NORM: tl.constexpr, BIAS: tl.constexpr, QK_NORM: tl.constexpr, GDC: tl.constexpr,
    PREFETCH_LINES: tl.constexpr, LINE: tl.constexpr,
):  # fmt: skip
    head = tl.program_id(0)  # q heads, then k heads, then v heads
    split = tl.program_id(1)
    rn = head * D + tl.arange(0, D)
    rm = tl.arange(0, 16)
    m_ok = rm < M
    ok = (rn < N)[:, None] & m_ok[None, :]
    acc, squares = strip_product(x_ptr, sx, w_ptr, sw, norm_ptr, rn, rn < N, m_ok, split, k_chunk, N, K, D,
                                 BLOCK_K, PREC, UPCAST, False, NORM, GDC, PREFETCH_LINES, LINE)  # fmt: skip
    if leave_partial(acc, squares, part_ptr, squares_ptr, count_ptr, head, split, rn, ok, N, SPLIT, NORM):
        HALF: tl.constexpr = D // 2
        rd = tl.arange(0, HALF)
        half_ok = (rd < HALF)[:, None] & m_ok[None, :]
        x1, squares = split_sums(part_ptr, squares_ptr, head, head * D + rd, half_ok, N, SPLIT, NORM)
        x2, _ = split_sums(part_ptr, squares_ptr, head, head * D + HALF + rd, half_ok, N, SPLIT, False)
        if NORM:
            scale = row_scale(squares, K, eps)
            x1, x2 = x1 * scale, x2 * scale
        if BIAS:
            x1 += tl.load(bias_ptr + head * D + rd).to(tl.float32)[:, None]
            x2 += tl.load(bias_ptr + head * D + HALF + rd).to(tl.float32)[:, None]
        dtype = q_ptr.dtype.element_ty
        x1, x2 = x1.to(dtype).to(tl.float32), x2.to(dtype).to(tl.float32)  # the product's rounding
        b, t = rm // T, rm % T
        position = tl.load(pos_ptr + t, mask=m_ok, other=0)
        if head < H + H_KV:  # q or k: normalised per head, then rotated
            if QK_NORM:
                if head < H:  # noqa: SIM108 (Triton compiles no conditional expression on a runtime value)
                    w_ptr_head = qw_ptr
                else:
                    w_ptr_head = kw_ptr
                r = tl.rsqrt((tl.sum(x1 * x1, 0) + tl.sum(x2 * x2, 0)) / D + head_eps)[None, :]
                x1 = (x1 * r * tl.load(w_ptr_head + rd).to(tl.float32)[:, None]).to(dtype).to(tl.float32)
                x2 = (x2 * r * tl.load(w_ptr_head + HALF + rd).to(tl.float32)[:, None]).to(dtype).to(tl.float32)
            c = tl.load(cos_ptr + t[None, :] * s_ct + rd[:, None], mask=half_ok, other=0.0)
            s = tl.load(sin_ptr + t[None, :] * s_ct + rd[:, None], mask=half_ok, other=0.0)
            x1, x2 = x1 * c - x2 * s, x2 * c + x1 * s
            if head < H:
                at = q_ptr + b.to(tl.int64) * sq_b + t * sq_t + head * sq_h
            else:
                at = kc_ptr + b.to(tl.int64) * skc_b + position.to(tl.int64) * skc_t + (head - H) * skc_h
        else:
            at = vc_ptr + b.to(tl.int64) * svc_b + position.to(tl.int64) * svc_t + (head - H - H_KV) * svc_h
        tl.store(at[None, :] + rd[:, None], x1.to(dtype), mask=half_ok)
        tl.store(at[None, :] + HALF + rd[:, None], x2.to(dtype), mask=half_ok)
        reset_count(count_ptr, head)


def qkv_rope(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, norm: tuple[torch.Tensor, float] | None,
             heads: int, kv_heads: int, q_weight: torch.Tensor | None, k_weight: torch.Tensor | None, eps: float,
             cos: torch.Tensor, sin: torch.Tensor, positions: torch.Tensor, k_cache: torch.Tensor,
             v_cache: torch.Tensor, *, split_k: int | None = None, num_stages: int = 4, num_warps: int = 4,
             prefetch_bytes: int = pdl.PREFETCH_BYTES) -> torch.Tensor:  # fmt: skip
    """q ``[B, T, H, D]`` of ``x`` ``[B, T, hidden]`` (``B * T <= 16``; with ``norm`` ``(weight, eps)`` of its
    RMSNorm): the product with ``weight`` ``[(H + 2 Hkv) D, hidden]`` (+ ``bias``), q and k heads normalised
    (``q_weight``/``k_weight``, or neither) and rotated by ``cos``/``sin`` ``[T, D/2]``, k and v written into
    the caches ``[B, capacity, Hkv, D]`` at ``positions`` ``[T]``. Inputs as ``kernels.fused.qk_norm_rope``
    checks them."""
    B, T, hidden = x.shape
    D = weight.shape[0] // (heads + 2 * kv_heads)
    rows = x.reshape(B * T, hidden)
    rows = rows if rows.stride(-1) == 1 else rows.contiguous()
    k_chunk, split_k = k_chunks(hidden, split_k or triton.cdiv(hidden, SPLIT_K_COLUMNS), BLOCK_K)
    grid = (heads + 2 * kv_heads, split_k)
    # always through the partials, even unsplit: the program that sums a head reads its two halves from them
    part, squares, counts = split_buffers(grid, weight.shape[0], x.device, "qkv_rope", always=True)
    q = x.new_empty(B, T, heads, D)
    launch = pdl.launch_options(x.device)
    cos, sin = cos.contiguous(), sin.contiguous()
    _qkv_rope_kernel[grid](
        rows, rows.stride(0), weight, weight.stride(0), rows if norm is None else norm[0].contiguous(),
        0.0 if norm is None else norm[1], rows if bias is None else bias,
        q if q_weight is None else q_weight.contiguous(), q if k_weight is None else k_weight.contiguous(), eps,
        cos, sin, cos.stride(0), positions, q, *q.stride()[:3],
        k_cache, *k_cache.stride()[:3], v_cache, *v_cache.stride()[:3],
        part, squares, counts, B * T, T, heads, kv_heads, weight.shape[0], hidden, k_chunk,
        D=D, BLOCK_K=BLOCK_K, SPLIT=split_k, **dot_options(x), NORM=norm is not None, BIAS=bias is not None,
        QK_NORM=q_weight is not None, **prefetch_options(weight, grid, D, k_chunk, prefetch_bytes, launch),
        num_stages=num_stages, num_warps=num_warps, **launch,
    )  # fmt: skip
    return q
