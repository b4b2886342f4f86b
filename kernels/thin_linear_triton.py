"""A Triton matrix product for the few rows of a denoising pass: ``x [M <= 16, K] @ weight [N, K]^T``.

A 16-token pass of a 1.7B model is bound by reading its weights, and at 16 rows cuBLAS reads them at 53-75 %
of the H200's copy bandwidth (``latency_bench/results/gpu_check_h200_2026-12-04_run5.md``). Here each program
streams a ``[BLOCK_N, BLOCK_K]`` strip of the weight against the whole (cached) activation, computing the
output transposed so the weight's rows are the dot's wide side; small outputs split K across programs and a
second launch sums the fp32 partials. A candidate: the GPU check's sweep times it against cuBLAS per shape.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.attention_triton import dot_options
from kernels.dispatch import sm_count


@triton.jit
def _thin_linear_kernel(
    x_ptr, sx, w_ptr, sw, part_ptr, out_ptr, so, M, N, K, k_chunk,
    BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SPLIT: tl.constexpr, PREC: tl.constexpr, UPCAST: tl.constexpr,
):  # fmt: skip
    pid_n = tl.program_id(0)
    split = tl.program_id(1)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rm = tl.arange(0, 16)
    rk = tl.arange(0, BLOCK_K)
    n_ok = rn < N
    m_ok = rm < M
    k_lo = split * k_chunk
    k_left = tl.minimum(k_chunk, K - k_lo)  # this split's share of K
    w_tile = w_ptr + rn.to(tl.int64)[:, None] * sw + (k_lo + rk)[None, :]
    x_tile = x_ptr + rm[None, :] * sx + (k_lo + rk)[:, None]
    acc = tl.zeros([BLOCK_N, 16], tl.float32)  # the output transposed: [N, M]
    for i in range(0, tl.cdiv(k_left, BLOCK_K)):  # a counted loop with moving pointers: Triton pipelines it
        k_ok = rk < k_left - i * BLOCK_K
        w = tl.load(w_tile, mask=n_ok[:, None] & k_ok[None, :], other=0.0)
        xt = tl.load(x_tile, mask=k_ok[:, None] & m_ok[None, :], other=0.0)
        if UPCAST:
            w, xt = w.to(tl.float32), xt.to(tl.float32)
        acc = tl.dot(w, xt, acc, input_precision=PREC)
        w_tile += BLOCK_K
        x_tile += BLOCK_K
    ok = n_ok[:, None] & m_ok[None, :]
    if SPLIT == 1:
        tl.store(out_ptr + rm[None, :] * so + rn[:, None], acc.to(out_ptr.dtype.element_ty), mask=ok)
    else:
        tl.store(part_ptr + (split * 16 + rm[None, :]).to(tl.int64) * N + rn[:, None], acc, mask=ok)


@triton.jit
def _sum_splits_kernel(part_ptr, out_ptr, so, M, N, SPLIT: tl.constexpr, BLOCK: tl.constexpr):
    rn = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    rm = tl.arange(0, 16)
    ok = (rm < M)[:, None] & (rn < N)[None, :]
    acc = tl.zeros([16, BLOCK], tl.float32)
    for s in tl.static_range(SPLIT):
        acc += tl.load(part_ptr + (s * 16 + rm[:, None]).to(tl.int64) * N + rn[None, :], mask=ok, other=0.0)
    tl.store(out_ptr + rm[:, None] * so + rn[None, :], acc.to(out_ptr.dtype.element_ty), mask=ok)


def thin_linear(x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor, block_n: int = 32, block_k: int = 256,
                split_k: int | None = None, num_stages: int = 4, num_warps: int = 4) -> torch.Tensor:  # fmt: skip
    """``out [M, N] = x [M, K] @ weight [N, K]^T`` for ``M <= 16`` (2-D, contiguous last dims). ``split_k``
    None: enough K splits for about two programs per SM (one in the interpreter)."""
    M, K = x.shape
    N = weight.shape[0]
    if split_k is None:
        n_tiles = triton.cdiv(N, block_n)
        split_k = max(1, min(8, 2 * sm_count(x.device) // n_tiles)) if x.device.type == "cuda" else 1
    k_chunk = triton.cdiv(triton.cdiv(K, split_k), block_k) * block_k
    split_k = triton.cdiv(K, k_chunk)
    part = torch.empty(split_k * 16 * N, dtype=torch.float32, device=x.device) if split_k > 1 else out
    _thin_linear_kernel[(triton.cdiv(N, block_n), split_k)](
        x, x.stride(0), weight, weight.stride(0), part, out, out.stride(0), M, N, K, k_chunk,
        BLOCK_N=block_n, BLOCK_K=block_k, SPLIT=split_k, **dot_options(x), num_stages=num_stages, num_warps=num_warps,
    )  # fmt: skip
    if split_k > 1:
        block = 256
        _sum_splits_kernel[(triton.cdiv(N, block),)](part, out, out.stride(0), M, N, SPLIT=split_k, BLOCK=block)
    return out
