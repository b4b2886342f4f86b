"""A Triton matrix product for the few rows of a denoising pass: ``x [M <= 16, K] @ weight [N, K]^T``.

A 16-token pass of a 1.7B model is bound by reading its weights, and at 16 rows cuBLAS reads them at 53-75 %
of the H200's copy bandwidth (``latency_bench/results/gpu_check_h200_2026-12-04_run5.md``). Here each program
streams a ``[BLOCK_N, BLOCK_K]`` strip of the weight against the whole (cached) activation, computing the
output transposed so the weight's rows are the dot's wide side; a long K is split across programs, and of the
programs of a column tile the one that finishes last (an atomic count says which) sums their fp32 partials, so
a split product is still one launch. The steps around a layer's products ride along, each a launch fewer:
``gated``: the activation is a fused gate/up projection and the product's input is SwiGLU's ``silu(gate) * up``,
formed tile by tile as it is read; ``norm_weight``: the input is the RMSNorm of the activation, whose weight is
applied as each tile is read and whose per-row scale factors out of the sum over K, so it is applied once at the
end from the sums of squares of the tiles read (K splits leave theirs beside their partials); ``add``: the output
is the residual stream, to which the product is added in place; ``bias``: added to the product (Qwen2-style
q/k/v). Launched with PDL (``kernels.pdl``), a program asks L2 for the start of its weight strip before it waits
for the kernel that writes its activation: the weights never depend on it. A candidate: the GPU check's sweep
times it against cuBLAS per shape.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels import pdl
from kernels.attention_triton import dot_options
from kernels.pdl_triton import L2_LINE_BYTES, line_elements, prefetch_l2, wait_for_previous_kernel
from kernels.split_count_triton import count_in, reset_count, split_counts

# Launch defaults from the sweep of a 1.7B layer's products on an H200 (gpu_check_h200_2026-12-04_run7.md):
# 64 x 128 tiles were the best or tied for q/k/v, o, gate/up and the LM head, without K splits at K = 2048;
# down (K = 6144) was best with 4 splits, 1536 columns each.
BLOCK_N, BLOCK_K, SPLIT_K_COLUMNS = 64, 128, 1536
UNSPLIT_K = 2048  # the longest K read by one program


@triton.jit
def strip_product(
    x_ptr, sx, w_ptr, sw, norm_ptr, rn, n_ok, m_ok, split, k_chunk, N, K,
    BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, PREC: tl.constexpr, UPCAST: tl.constexpr, GATED: tl.constexpr,
    NORM: tl.constexpr, GDC: tl.constexpr, PREFETCH_LINES: tl.constexpr, LINE: tl.constexpr,
):  # fmt: skip
    """This program's share of the product: weight rows ``rn`` against K columns ``split * k_chunk ..`` of the
    (at most 16) activation rows, as ``[BLOCK_N, 16]`` fp32, and with ``NORM`` the rows' sums of squares over
    those columns (``[16]``; the norm weight is applied as the tiles are read, the row scale is the caller's).
    Under PDL the weight strip's first lines are asked of L2 before waiting for the kernel before."""
    rm = tl.arange(0, 16)
    rk = tl.arange(0, BLOCK_K)
    k_lo = split * k_chunk
    k_left = tl.minimum(k_chunk, K - k_lo)  # this split's share of K
    if GDC and PREFETCH_LINES > 0:  # a pointer into each L2 line at the start of every row, clamped to the weight
        lines = tl.minimum(tl.arange(0, PREFETCH_LINES) * LINE, k_left - 1)
        prefetch_l2(w_ptr + tl.minimum(rn, N - 1).to(tl.int64)[:, None] * sw + (k_lo + lines)[None, :])
    wait_for_previous_kernel(GDC)
    w_tile = w_ptr + rn.to(tl.int64)[:, None] * sw + (k_lo + rk)[None, :]
    x_tile = x_ptr + rm[None, :] * sx + (k_lo + rk)[:, None]
    norm_tile = norm_ptr + k_lo + rk
    acc = tl.zeros([BLOCK_N, 16], tl.float32)  # the output transposed: [N, M]
    squares = tl.zeros([BLOCK_K, 16], tl.float32)  # for NORM, each row's squares, summed over K after the loop
    for i in range(0, tl.cdiv(k_left, BLOCK_K)):  # a counted loop with moving pointers: Triton pipelines it
        k_ok = rk < k_left - i * BLOCK_K
        w = tl.load(w_tile, mask=n_ok[:, None] & k_ok[None, :], other=0.0)
        xt = tl.load(x_tile, mask=k_ok[:, None] & m_ok[None, :], other=0.0)
        if GATED:  # up is K columns after gate; silu rounds to the dtype before the product, as silu_mul does
            up = tl.load(x_tile + K, mask=k_ok[:, None] & m_ok[None, :], other=0.0).to(tl.float32)
            gate = xt.to(tl.float32)
            xt = ((gate / (1.0 + tl.exp(-gate))).to(xt.dtype).to(tl.float32) * up).to(xt.dtype)
        if NORM:
            xf = xt.to(tl.float32)
            squares += xf * xf
            xt = (xf * tl.load(norm_tile, mask=k_ok, other=0.0).to(tl.float32)[:, None]).to(xt.dtype)
            norm_tile += BLOCK_K
        if UPCAST:
            w, xt = w.to(tl.float32), xt.to(tl.float32)
        acc = tl.dot(w, xt, acc, input_precision=PREC)
        w_tile += BLOCK_K
        x_tile += BLOCK_K
    return acc, tl.sum(squares, 0)


@triton.jit
def leave_partial(acc, squares, part_ptr, squares_ptr, count_ptr, tile, split, rn, ok, N,
                  SPLIT: tl.constexpr, NORM: tl.constexpr):  # fmt: skip
    """Store this split's partial product (and with ``NORM`` its sums of squares) for column tile ``tile``, and
    count it in: True in the program that counts last, which may then read every split's partial (see
    :func:`split_sums`) and must zero the count (:func:`reset_count`)."""
    rm = tl.arange(0, 16)
    tl.store(part_ptr + (split * 16 + rm[None, :]).to(tl.int64) * N + rn[:, None], acc, mask=ok)
    if NORM:
        tl.store(squares_ptr + (tile * SPLIT + split) * 16 + rm, squares)
    return count_in(count_ptr, tile, SPLIT)


@triton.jit
def split_sums(part_ptr, squares_ptr, tile, rn, ok, N, SPLIT: tl.constexpr, NORM: tl.constexpr):
    """Every split's partials of rows ``rn`` summed (``[len(rn), 16]``), and with ``NORM`` their sums of squares
    (``[16]``): read from L2, since other SMs wrote them."""
    rm = tl.arange(0, 16)
    acc = tl.zeros(ok.shape, tl.float32)
    squares = tl.zeros([16], tl.float32)
    for s in tl.static_range(SPLIT):
        acc += tl.load(part_ptr + (s * 16 + rm[None, :]).to(tl.int64) * N + rn[:, None], mask=ok, other=0.0,
                       cache_modifier=".cg")  # fmt: skip
        if NORM:
            squares += tl.load(squares_ptr + (tile * SPLIT + s) * 16 + rm, cache_modifier=".cg")
    return acc, squares


@triton.jit
def _thin_linear_kernel(
    x_ptr, sx, w_ptr, sw, norm_ptr, eps, bias_ptr, part_ptr, squares_ptr, count_ptr, out_ptr, so, M, N, K, k_chunk,
    BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SPLIT: tl.constexpr, PREC: tl.constexpr, UPCAST: tl.constexpr,
    GATED: tl.constexpr, NORM: tl.constexpr, BIAS: tl.constexpr, ADD: tl.constexpr, GDC: tl.constexpr,
    PREFETCH_LINES: tl.constexpr, LINE: tl.constexpr,
):  # fmt: skip
    pid_n = tl.program_id(0)
    split = tl.program_id(1)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rm = tl.arange(0, 16)
    n_ok = rn < N
    ok = n_ok[:, None] & (rm < M)[None, :]
    acc, squares = strip_product(x_ptr, sx, w_ptr, sw, norm_ptr, rn, n_ok, rm < M, split, k_chunk, N, K, BLOCK_N,
                                 BLOCK_K, PREC, UPCAST, GATED, NORM, GDC, PREFETCH_LINES, LINE)  # fmt: skip
    out_at = out_ptr + rm[None, :] * so + rn[:, None]
    if SPLIT == 1:
        _store_output(out_at, acc, squares, K, eps, bias_ptr + rn, n_ok, ok, NORM, BIAS, ADD)
    elif leave_partial(acc, squares, part_ptr, squares_ptr, count_ptr, pid_n, split, rn, ok, N, SPLIT, NORM):
        acc, squares = split_sums(part_ptr, squares_ptr, pid_n, rn, ok, N, SPLIT, NORM)
        _store_output(out_at, acc, squares, K, eps, bias_ptr + rn, n_ok, ok, NORM, BIAS, ADD)
        reset_count(count_ptr, pid_n)


@triton.jit
def row_scale(squares, K, eps):
    """RMSNorm's scale of each row ``[1, 16]``, from its sum of squares over all ``K`` columns."""
    return tl.rsqrt(squares / K + eps)[None, :]


@triton.jit
def _store_output(at, acc, squares, K, eps, bias_at, n_ok, ok, NORM: tl.constexpr, BIAS: tl.constexpr,
                  ADD: tl.constexpr):  # fmt: skip
    """The whole product (with ``NORM``, scaled by the rows' norms; with ``BIAS``, plus the bias at ``bias_at``)
    in the output's dtype (``ADD``: added to what is there, rounded as a separate add would)."""
    if NORM:
        acc *= row_scale(squares, K, eps)
    if BIAS:
        acc += tl.load(bias_at, mask=n_ok, other=0.0).to(tl.float32)[:, None]
    y = acc.to(at.dtype.element_ty)
    if ADD:
        y = (tl.load(at, mask=ok, other=0.0).to(tl.float32) + y.to(tl.float32)).to(at.dtype.element_ty)
    tl.store(at, y, mask=ok)


def k_chunks(K: int, split_k: int, block_k: int) -> tuple[int, int]:
    """The K columns a split reads (whole tiles) and the splits that makes."""
    k_chunk = triton.cdiv(triton.cdiv(K, split_k), block_k) * block_k
    return k_chunk, triton.cdiv(K, k_chunk)


def split_buffers(grid: tuple[int, int], N: int, device: torch.device, name: str, always: bool = False
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
    """A split product's scratch: fp32 partials ``[splits, 16, N]``, partial sums of squares ``[tiles, splits,
    16]``, and the per-tile counts (:mod:`kernels.split_count_triton`). Unsplit (unless ``always``), one small
    placeholder stands for all three."""
    tiles, splits = grid
    if splits == 1 and not always:
        placeholder = torch.empty(1, dtype=torch.float32, device=device)
        return placeholder, placeholder, placeholder
    counts = split_counts(device, tiles, name)
    part = torch.empty(splits * 16 * N, dtype=torch.float32, device=device)
    return part, torch.empty(tiles * splits * 16, dtype=torch.float32, device=device), counts


def thin_linear(x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor, block_n: int = BLOCK_N,
                block_k: int = BLOCK_K, split_k: int | None = None, num_stages: int = 4, num_warps: int = 4,
                prefetch_bytes: int = pdl.PREFETCH_BYTES, gated: bool = False, norm_weight: torch.Tensor | None = None,
                eps: float = 0.0, bias: torch.Tensor | None = None, add: bool = False) -> torch.Tensor:  # fmt: skip
    """``out [M, N] = x [M, K] @ weight [N, K]^T`` for ``M <= 16`` (2-D, contiguous last dims); ``gated``: x is
    ``[M, 2K]``, gate then up, and the input is ``silu(gate) * up``; ``norm_weight`` ``[K]``: the input is
    ``rms_norm(x, eps) * norm_weight``; ``bias`` ``[N]``: added to the product; ``add``: ``out += ...`` (``out``
    must not overlap ``x``).
    ``split_k`` None: unsplit up to ``UNSPLIT_K``, else splits of about ``SPLIT_K_COLUMNS``."""
    M, K = x.shape[0], weight.shape[1]
    N = weight.shape[0]
    if split_k is None:
        split_k = 1 if K <= UNSPLIT_K else triton.cdiv(K, SPLIT_K_COLUMNS)
    k_chunk, split_k = k_chunks(K, split_k, block_k)
    grid = (triton.cdiv(N, block_n), split_k)
    part, squares, counts = split_buffers(grid, N, x.device, "thin_linear")
    launch = pdl.launch_options(x.device)
    _thin_linear_kernel[grid](
        x, x.stride(0), weight, weight.stride(0), x if norm_weight is None else norm_weight, eps,
        x if bias is None else bias, part, squares, counts, out, out.stride(0), M, N, K, k_chunk,
        BLOCK_N=block_n, BLOCK_K=block_k, SPLIT=split_k, **dot_options(x), GATED=gated, NORM=norm_weight is not None,
        BIAS=bias is not None, ADD=add, **prefetch_options(weight, grid, block_n, k_chunk, prefetch_bytes, launch),
        num_stages=num_stages, num_warps=num_warps, **launch,
    )  # fmt: skip
    return out


def prefetch_options(weight: torch.Tensor, grid: tuple[int, int], block_n: int, k_chunk: int, budget: int,
                     launch: dict[str, bool]) -> dict[str, int]:  # fmt: skip
    """A weight-streaming launch's ``PREFETCH_LINES`` and ``LINE`` (the weight's elements an L2 line holds): no
    prefetch unless it is launched with PDL (``launch``), since only then is there a wait to read ahead of."""
    line = line_elements(weight)
    programs, line_bytes = grid[0] * grid[1], block_n * L2_LINE_BYTES  # a line of each of the strip's rows
    lines = pdl.prefetch_count(budget, programs, line_bytes, k_chunk // line, weight.device) if launch["GDC"] else 0
    return {"PREFETCH_LINES": lines, "LINE": line}
