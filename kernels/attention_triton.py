"""Triton kernels for block attention over a KV cache and for block-causal prefill.

Block attention is decode-shaped: few queries (one block) against a long cache. One program
owns one KV head and packs that head's whole GQA group of queries into its tile, so each K/V
tile is read once per group; the cache is split across programs (flash-decoding) and a second
launch merges the partial softmaxes, or (``one_launch``, a candidate the GPU check times) the split that
finishes last merges them (``kernels.split_count_triton``). Launched with PDL (``kernels.pdl``), the programs ask L2
for their first cached keys and values before waiting for the kernel before: the prefix is not that kernel's
output. Prefill is the usual flash-attention forward with a block-causal mask, skipping the mask on tiles every
query of the tile can see.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels import pdl
from kernels.dispatch import sm_count
from kernels.pdl_triton import L2_LINE_BYTES, line_elements, prefetch_l2, wait_for_previous_kernel
from kernels.split_count_triton import count_in, reset_count, split_counts

NEG_BIG = tl.constexpr(-1.0e30)  # finite running-max start: keeps exp2(m_old - m_new) free of NaN
LOG2E = 1.4426950408889634
MERGE_AT_ONCE = tl.constexpr(4)  # splits whose partials the merging program loads together (one L2 round trip)


@triton.jit
def _attend(
    q, k_base, v_base, stride_kt, stride_vt, start, hi, acc, m_i, l_i, scale_log2, rd, d_ok,
    q_blk, block_size,
    BLOCK_N: tl.constexpr, MASK_BLOCKS: tl.constexpr, PREC: tl.constexpr, UPCAST: tl.constexpr,
):  # fmt: skip
    """One online-softmax step over keys ``[start, start + BLOCK_N)`` clipped to ``hi``."""
    rt = start + tl.arange(0, BLOCK_N)
    t_ok = rt < hi
    kv_mask = t_ok[:, None] & d_ok[None, :]
    k = tl.load(k_base + rt[:, None].to(tl.int64) * stride_kt + rd[None, :], mask=kv_mask, other=0.0)
    if UPCAST:
        k = k.to(tl.float32)
    s = tl.dot(q, tl.trans(k), input_precision=PREC) * scale_log2
    visible = t_ok[None, :]
    if MASK_BLOCKS:
        visible = visible & ((rt // block_size)[None, :] <= q_blk[:, None])
    s = tl.where(visible, s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, 1))
    alpha = tl.exp2(m_i - m_new)
    p = tl.exp2(s - m_new[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    v = tl.load(v_base + rt[:, None].to(tl.int64) * stride_vt + rd[None, :], mask=kv_mask, other=0.0)
    if UPCAST:
        v = v.to(tl.float32)
    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PREC)
    return acc, m_new, l_i


@triton.jit
def _block_partials_kernel(
    q_ptr, sq_b, sq_n, sq_h,
    kc_ptr, vc_ptr, skc_b, skc_t, skc_h, svc_b, svc_t, svc_h,
    kb_ptr, vb_ptr, skb_b, skb_t, skb_h, svb_b, svb_t, svb_h,
    len_ptr, o_part_ptr, m_part_ptr, l_part_ptr, count_ptr, out_ptr, so_b, so_n, so_h,
    H_KV, n_rows, group, n_block, chunk, capacity, scale_log2, D,
    HAS_BLOCK: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    PREC: tl.constexpr, UPCAST: tl.constexpr, MERGE: tl.constexpr, GDC: tl.constexpr,
    PREFETCH_KEYS: tl.constexpr, ROW_LINES: tl.constexpr, LINE: tl.constexpr,
):  # fmt: skip
    """A split's partial softmax for one tile of query rows; with ``MERGE`` the split that finishes last merges
    every split's partials into the output (else :func:`_block_combine_kernel` does, a launch later). Under PDL
    the split's first ``PREFETCH_KEYS`` cached keys and values are asked of L2 before waiting for the kernel
    before."""
    pid_bh = tl.program_id(0)
    split = tl.program_id(1)
    pid_m = tl.program_id(2)
    n_splits = tl.num_programs(1)
    b = pid_bh // H_KV
    h_kv = pid_bh % H_KV
    kc_base = kc_ptr + b.to(tl.int64) * skc_b + h_kv * skc_h
    vc_base = vc_ptr + b.to(tl.int64) * svc_b + h_kv * svc_h
    lo = split * chunk
    if GDC and PREFETCH_KEYS > 0:
        _prefetch_keys(kc_base, vc_base, skc_t, svc_t, lo, tl.minimum(tl.load(len_ptr + b), capacity), D,
                       PREFETCH_KEYS, ROW_LINES, LINE)  # fmt: skip
    wait_for_previous_kernel(GDC)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)  # row = query * group + head-in-group
    rd = tl.arange(0, BLOCK_D)
    d_ok = rd < D
    row_ok = rm < n_rows
    h_q = h_kv * group + rm % group
    q_off = b.to(tl.int64) * sq_b + (rm // group) * sq_n + h_q * sq_h
    q = tl.load(q_ptr + q_off[:, None] + rd[None, :], mask=row_ok[:, None] & d_ok[None, :], other=0.0)
    if UPCAST:
        q = q.to(tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    m_i = tl.full([BLOCK_M], NEG_BIG, tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    no_blk = tl.zeros([BLOCK_M], tl.int32)
    # The last split (when there is a block) attends the block's own keys; the others a cache chunk.
    hi = tl.minimum(tl.minimum(lo + chunk, tl.load(len_ptr + b)), capacity)  # a bad length cannot read past the cache
    if HAS_BLOCK:
        hi = tl.where(split == n_splits - 1, lo, hi)
    for start in range(lo, hi, BLOCK_N):
        acc, m_i, l_i = _attend(q, kc_base, vc_base, skc_t, svc_t, start, hi, acc, m_i, l_i, scale_log2,
                                rd, d_ok, no_blk, 1, BLOCK_N, False, PREC, UPCAST)
    if HAS_BLOCK:
        kb_base = kb_ptr + b.to(tl.int64) * skb_b + h_kv * skb_h
        vb_base = vb_ptr + b.to(tl.int64) * svb_b + h_kv * svb_h
        b_hi = tl.where(split == n_splits - 1, n_block, 0)
        for start in range(0, b_hi, BLOCK_N):
            acc, m_i, l_i = _attend(q, kb_base, vb_base, skb_t, svb_t, start, b_hi, acc, m_i, l_i,
                                    scale_log2, rd, d_ok, no_blk, 1, BLOCK_N, False, PREC, UPCAST)
    part = (pid_bh * n_splits + split) * n_rows + rm
    tl.store(m_part_ptr + part, m_i, mask=row_ok)
    tl.store(l_part_ptr + part, l_i, mask=row_ok)
    tl.store(o_part_ptr + part[:, None] * BLOCK_D + rd[None, :], acc, mask=row_ok[:, None])
    if MERGE:
        tile = pid_bh * tl.num_programs(2) + pid_m
        if count_in(count_ptr, tile, n_splits):
            out = _merged_splits(o_part_ptr, m_part_ptr, l_part_ptr, pid_bh * n_splits * n_rows + rm, row_ok,
                                 n_splits, n_rows, rd, BLOCK_M, BLOCK_D)  # fmt: skip
            o_off = b.to(tl.int64) * so_b + (rm // group) * so_n + h_q * so_h
            tl.store(out_ptr + o_off[:, None] + rd[None, :], out.to(out_ptr.dtype.element_ty),
                     mask=row_ok[:, None] & d_ok[None, :])  # fmt: skip
            reset_count(count_ptr, tile)


@triton.jit
def _prefetch_keys(kc_base, vc_base, skc_t, svc_t, lo, length, D,
                   KEYS: tl.constexpr, ROW_LINES: tl.constexpr, LINE: tl.constexpr):  # fmt: skip
    """Ask L2 for cached keys ``[lo, lo + KEYS)`` below ``length`` of this head's K and V, a pointer into each
    line of a row. Only a hint, so it may run before the kernel before has finished: the prefix it reads is no
    kernel's output in a pass, and lines that kernel is still writing (the block's own keys) are coherent in L2,
    where writes land. The addresses are clamped to real cache rows, whatever the length."""
    rows = tl.maximum(tl.minimum(lo + tl.arange(0, KEYS), length - 1), 0).to(tl.int64)
    cols = tl.minimum(tl.arange(0, ROW_LINES) * LINE, D - 1)
    prefetch_l2(kc_base + rows[:, None] * skc_t + cols[None, :])
    prefetch_l2(vc_base + rows[:, None] * svc_t + cols[None, :])


@triton.jit
def _merged_splits(o_part_ptr, m_part_ptr, l_part_ptr, first, row_ok, n_splits, n_rows, rd,
                   BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr):  # fmt: skip
    """The attention output of rows whose split ``s`` partials are at ``first + s * n_rows``: the splits' partial
    softmaxes merged by an online rescale, read from L2 since other SMs wrote them, :data:`MERGE_AT_ONCE` splits
    an iteration so that their loads are in flight together."""
    m_run = tl.full([BLOCK_M], NEG_BIG, tl.float32)
    l_run = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    for s0 in range(0, n_splits, MERGE_AT_ONCE):
        for j in tl.static_range(MERGE_AT_ONCE):  # a split past the last reads as empty: it adds nothing
            # (tested as a vector: the interpreter mistypes a scalar bool & a vector bool)
            ok = row_ok & (s0 + j + tl.zeros_like(first) < n_splits)
            part = first + (s0 + j) * n_rows
            m_s = tl.load(m_part_ptr + part, mask=ok, other=NEG_BIG, cache_modifier=".cg")
            l_s = tl.load(l_part_ptr + part, mask=ok, other=0.0, cache_modifier=".cg")
            o = tl.load(o_part_ptr + part[:, None] * BLOCK_D + rd[None, :], mask=ok[:, None], other=0.0,
                        cache_modifier=".cg")  # fmt: skip
            m_new = tl.maximum(m_run, m_s)
            keep, take = tl.exp2(m_run - m_new), tl.exp2(m_s - m_new)
            l_run = l_run * keep + take * l_s
            acc = acc * keep[:, None] + take[:, None] * o
            m_run = m_new
    return acc / tl.where(l_run > 0.0, l_run, 1.0)[:, None]


@triton.jit
def _block_combine_kernel(
    o_part_ptr, m_part_ptr, l_part_ptr, out_ptr, so_b, so_n, so_h,
    H_KV, n_rows, group, n_splits, D,
    BLOCK_S: tl.constexpr, BLOCK_D: tl.constexpr, GDC: tl.constexpr,
):  # fmt: skip
    """One program per (batch, KV head, query row): the row's partial softmaxes over all splits, read as
    ``[BLOCK_S, D]`` tiles, so even a single block's few rows spread over many SMs."""
    wait_for_previous_kernel(GDC)
    pid_bh = tl.program_id(0)
    row = tl.program_id(1)
    b = pid_bh // H_KV
    h_kv = pid_bh % H_KV
    rs = tl.arange(0, BLOCK_S)
    rd = tl.arange(0, BLOCK_D)
    first = pid_bh * n_splits
    m_max = tl.full([], NEG_BIG, tl.float32)
    for s0 in range(0, n_splits, BLOCK_S):
        s_ok = s0 + rs < n_splits
        m_s = tl.load(m_part_ptr + (first + s0 + rs) * n_rows + row, mask=s_ok, other=NEG_BIG)
        m_max = tl.maximum(m_max, tl.max(m_s, 0))
    acc = tl.zeros([BLOCK_D], tl.float32)
    l_tot = tl.full([], 0.0, tl.float32)
    for s0 in range(0, n_splits, BLOCK_S):
        s_ok = s0 + rs < n_splits
        part = (first + s0 + rs) * n_rows + row
        w = tl.exp2(tl.load(m_part_ptr + part, mask=s_ok, other=NEG_BIG) - m_max)
        l_tot += tl.sum(w * tl.load(l_part_ptr + part, mask=s_ok, other=0.0), 0)
        o = tl.load(o_part_ptr + part[:, None] * BLOCK_D + rd[None, :], mask=s_ok[:, None], other=0.0)
        acc += tl.sum(w[:, None] * o, 0)
    out = acc / tl.where(l_tot > 0.0, l_tot, 1.0)
    h_q = h_kv * group + row % group
    o_off = b.to(tl.int64) * so_b + (row // group) * so_n + h_q * so_h
    tl.store(out_ptr + o_off + rd, out.to(out_ptr.dtype.element_ty), mask=rd < D)


@triton.jit
def _block_causal_kernel(
    q_ptr, sq_b, sq_t, sq_h, k_ptr, sk_b, sk_t, sk_h, v_ptr, sv_b, sv_t, sv_h, out_ptr, so_b, so_t, so_h,
    H_Q, group, n_q, n_k, q_offset, offset_ptr, block_size, scale_log2, D,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, PREC: tl.constexpr,
    UPCAST: tl.constexpr, OFFSET_PTR: tl.constexpr, HEAVY_FIRST: tl.constexpr,
):  # fmt: skip
    if OFFSET_PTR:  # the queries' first position on the device (a CUDA graph replays any offset)
        q_offset = tl.load(offset_ptr).to(tl.int32)
    if HEAVY_FIRST:  # grid (heads, row tiles): every head's last rows, which see the most keys, launch first
        pid_bh = tl.program_id(0)
        pid_m = tl.num_programs(1) - 1 - tl.program_id(1)
    else:  # grid (row tiles, heads)
        pid_m = tl.program_id(0)
        pid_bh = tl.program_id(1)
    b = pid_bh // H_Q
    h_q = pid_bh % H_Q
    h_kv = h_q // group
    ri = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rd = tl.arange(0, BLOCK_D)
    d_ok = rd < D
    i_ok = ri < n_q
    q_off = b.to(tl.int64) * sq_b + ri.to(tl.int64) * sq_t + h_q * sq_h
    q = tl.load(q_ptr + q_off[:, None] + rd[None, :], mask=i_ok[:, None] & d_ok[None, :], other=0.0)
    if UPCAST:
        q = q.to(tl.float32)
    q_blk = (q_offset + ri) // block_size
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    m_i = tl.full([BLOCK_M], NEG_BIG, tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    k_base = k_ptr + b.to(tl.int64) * sk_b + h_kv * sk_h
    v_base = v_ptr + b.to(tl.int64) * sv_b + h_kv * sv_h
    first_row = q_offset + pid_m * BLOCK_M
    last_row = q_offset + tl.minimum(pid_m * BLOCK_M + BLOCK_M, n_q) - 1
    # Keys before the first row's block are visible to every row of the tile: no mask needed.
    full_hi = tl.minimum((first_row // block_size) * block_size, n_k)
    full_hi = (full_hi // BLOCK_N) * BLOCK_N
    hi = tl.minimum((last_row // block_size + 1) * block_size, n_k)
    for start in range(0, full_hi, BLOCK_N):
        acc, m_i, l_i = _attend(q, k_base, v_base, sk_t, sv_t, start, hi, acc, m_i, l_i, scale_log2,
                                rd, d_ok, q_blk, block_size, BLOCK_N, False, PREC, UPCAST)
    for start in range(full_hi, hi, BLOCK_N):
        acc, m_i, l_i = _attend(q, k_base, v_base, sk_t, sv_t, start, hi, acc, m_i, l_i, scale_log2,
                                rd, d_ok, q_blk, block_size, BLOCK_N, True, PREC, UPCAST)
    out = acc / tl.where(l_i > 0.0, l_i, 1.0)[:, None]
    o_off = b.to(tl.int64) * so_b + ri.to(tl.int64) * so_t + h_q * so_h
    tl.store(out_ptr + o_off[:, None] + rd[None, :], out.to(out_ptr.dtype.element_ty),
             mask=i_ok[:, None] & d_ok[None, :])


def _last_dim_contiguous(*tensors: torch.Tensor) -> list[torch.Tensor]:
    return [t if t.stride(-1) == 1 else t.contiguous() for t in tensors]


def dot_options(t: torch.Tensor) -> dict[str, object]:
    """fp32 dots in full precision (no TF32); bf16 dots in fp32 under the interpreter, whose
    numpy backend cannot multiply bf16 (on a GPU the tensor cores take bf16 directly)."""
    upcast = t.device.type != "cuda" and t.dtype == torch.bfloat16
    return {"PREC": "ieee" if upcast or t.dtype == torch.float32 else "tf32", "UPCAST": upcast}


def plan_splits(q: torch.Tensor, k_cache: torch.Tensor, splits: int | None, block_n: int | None) -> tuple[int, int, int]:
    """``(block_m, block_n, chunk)``: the query-row and key tiles, and the keys of each cache split. ``splits``
    as asked (at most one a key tile); None: about two programs per SM, each on at least four key tiles."""
    B, n_q, h_q, _ = q.shape
    h_kv, cap = k_cache.shape[2], k_cache.shape[1]
    cuda = q.device.type == "cuda"
    n_rows = n_q * (h_q // h_kv)
    block_m = max(16, min(64, triton.next_power_of_2(n_rows)))
    block_n = block_n or (64 if cuda else 32)
    auto = splits is None
    if auto:
        # at most two programs per SM, rounded down: a third partial wave cost 28% at B8 over 4K keys
        # (splits 5 vs 4, latency_bench/results/gpu_check_h200_2026-12-04_run3.md)
        splits = 2 * sm_count(q.device) // (B * h_kv * triton.cdiv(n_rows, block_m)) if cuda else 2
    splits = max(1, min(splits, triton.cdiv(cap, block_n)))
    chunk = triton.cdiv(triton.cdiv(cap, splits), block_n) * block_n
    if auto and cuda:  # a split's partial output costs as much traffic as ~64 keys: keep chunks long
        chunk = max(chunk, 4 * block_n)
    return block_m, block_n, chunk


def block_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    lengths: torch.Tensor,
    k_block: torch.Tensor | None,
    v_block: torch.Tensor | None,
    scale: float,
    out: torch.Tensor | None = None,
    splits: int | None = None,
    block_n: int | None = None,
    one_launch: bool = False,
    prefetch_bytes: int = pdl.PREFETCH_BYTES,
) -> torch.Tensor:
    """Batched ``[B, Nq, Hq, D]`` queries over ``k_cache[:, :lengths[b]]`` (+ the block's K/V); ``one_launch``:
    the split finishing last merges the partials (else a second launch does); ``prefetch_bytes``: under PDL, the
    cached K/V bytes all programs ask L2 for before they wait."""
    q, k_cache, v_cache = _last_dim_contiguous(q, k_cache, v_cache)
    B, n_q, h_q, D = q.shape
    h_kv, cap = k_cache.shape[2], k_cache.shape[1]
    group = h_q // h_kv
    n_rows = n_q * group
    has_block = k_block is not None
    if has_block:
        k_block, v_block = _last_dim_contiguous(k_block, v_block)
    else:
        k_block, v_block = k_cache, v_cache
    device = q.device
    block_m, block_n, chunk = plan_splits(q, k_cache, splits, block_n)
    block_d = max(16, triton.next_power_of_2(D))
    cache_splits = triton.cdiv(cap, chunk)
    total_splits = cache_splits + int(has_block)
    f32 = dict(dtype=torch.float32, device=device)
    o_part = torch.empty(B * h_kv * total_splits * n_rows * block_d, **f32)
    m_part = torch.empty(B * h_kv * total_splits * n_rows, **f32)
    l_part = torch.empty_like(m_part)
    m_tiles = triton.cdiv(n_rows, block_m)
    launch = pdl.launch_options(device)
    out = torch.empty_like(q) if out is None else out
    counts = split_counts(device, B * h_kv * m_tiles, "block_attention") if one_launch else m_part
    row_lines = triton.next_power_of_2(triton.cdiv(D * k_cache.element_size(), L2_LINE_BYTES))
    key_bytes = 2 * row_lines * L2_LINE_BYTES  # a key's K and V rows, in whole lines
    keys = pdl.prefetch_count(prefetch_bytes, B * h_kv * cache_splits, key_bytes, chunk, device) if launch["GDC"] else 0
    _block_partials_kernel[(B * h_kv, total_splits, m_tiles)](
        q, q.stride(0), q.stride(1), q.stride(2),
        k_cache, v_cache, *k_cache.stride()[:3], *v_cache.stride()[:3],
        k_block, v_block, *k_block.stride()[:3], *v_block.stride()[:3],
        lengths, o_part, m_part, l_part, counts, out, out.stride(0), out.stride(1), out.stride(2),
        h_kv, n_rows, group, k_block.shape[1] if has_block else 0, chunk, cap, scale * LOG2E, D,
        HAS_BLOCK=has_block, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_D=block_d, **dot_options(q), MERGE=one_launch,
        PREFETCH_KEYS=keys, ROW_LINES=row_lines, LINE=line_elements(k_cache), **launch,
    )  # fmt: skip
    if one_launch:
        return out
    _block_combine_kernel[(B * h_kv, n_rows)](
        o_part, m_part, l_part, out, out.stride(0), out.stride(1), out.stride(2),
        h_kv, n_rows, group, total_splits, D,
        BLOCK_S=min(32, triton.next_power_of_2(total_splits)), BLOCK_D=block_d, **launch,
    )  # fmt: skip
    return out


def _offset_args(q_offset: int | torch.Tensor, q: torch.Tensor) -> tuple[int, torch.Tensor]:
    """The kernel's (scalar offset, offset pointer) pair: ``OFFSET_PTR`` picks one (q stands in for the unused
    pointer, which is never read)."""
    return (0, q_offset) if isinstance(q_offset, torch.Tensor) else (q_offset, q)


def block_causal_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    block_size: int,
    q_offset: int | torch.Tensor,
    scale: float,
    out: torch.Tensor | None = None,
    block_m: int | None = None,
    block_n: int | None = None,
    heavy_first: bool = False,
    stages: int | None = None,
) -> torch.Tensor:
    """Batched block-causal attention, ``q [B, Tq, Hq, D]`` over ``k, v [B, Tk, Hkv, D]``; ``q_offset`` an int
    or a 1-element integer device tensor. Candidates the GPU check's sweep times: ``heavy_first``, the row tiles
    that see the most keys launch first, over all heads, so the last wave holds short ones; ``stages``, the key
    tiles in flight (Triton's default 3)."""
    q, k, v = _last_dim_contiguous(q, k, v)
    B, n_q, h_q, D = q.shape
    cuda = q.device.type == "cuda"
    block_m = block_m or (64 if cuda else 32)
    block_n = block_n or (64 if cuda else 32)
    block_d = max(16, triton.next_power_of_2(D))
    out = torch.empty_like(q) if out is None else out
    grid = (triton.cdiv(n_q, block_m), B * h_q)
    _block_causal_kernel[grid[::-1] if heavy_first else grid](
        q, *q.stride()[:3], k, *k.stride()[:3], v, *v.stride()[:3], out, *out.stride()[:3],
        h_q, h_q // k.shape[2], n_q, k.shape[1], *_offset_args(q_offset, q), block_size, scale * LOG2E, D,
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_D=block_d, **dot_options(q),
        OFFSET_PTR=isinstance(q_offset, torch.Tensor), HEAVY_FIRST=heavy_first, num_warps=4 if block_d <= 64 else 8,
        **({} if stages is None else {"num_stages": stages}),
    )  # fmt: skip
    return out
