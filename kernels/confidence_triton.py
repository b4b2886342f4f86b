"""Triton kernels for fused confidence selection (imported only when the Triton path runs).

Stage 1 (grid: rows x vocabulary splits) streams a slice of one row's logits once, keeping an
online softmax (running max and rescaled sum) and the running best selection score, so the
probabilities are never written. Stage 2 (grid: one program per block) merges the splits,
forms each position's confidence, applies the threshold and the at-least-one fallback, and
updates the block's ids and mask in place. Splitting the vocabulary keeps every SM streaming
even for a 16-position block; the merge is exact because softmax partials combine associatively.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels import pdl
from kernels.dispatch import sm_count
from kernels.pdl_triton import wait_for_previous_kernel

NEG_BIG = tl.constexpr(-1.0e30)  # finite "minus infinity" for running maxima: exp(-inf - -inf) is NaN
# The loop's exponentials are tl.exp2 of x * LOG2E: one ex2.approx.ftz each, where tl.exp compiles to
# ex2.approx.f32, which ptxas guards against a denormal result with a compare and two multiplies (a fifth of
# the loop's SASS; a term under 1e-38 of a sum that holds a 1 changes no confidence).
LOG2E = tl.constexpr(1.4426950408889634)


@triton.jit
def _mix32(x):
    """lowbias32 on uint32 values; must match ``kernels.reference.mix32`` bit for bit."""
    x = x ^ (x >> 16)
    x = x * 0x7FEB352D
    x = x ^ (x >> 15)
    x = x * 0x846CA68B
    return x ^ (x >> 16)


@triton.jit
def _partials_kernel(
    logits_ptr, stride_lb, stride_ln,
    masked_ptr, stride_mb, stride_mn,
    seed_ptr,
    part_max_ptr, part_sum_ptr, part_score_ptr, part_idx_ptr, part_logit_ptr,
    N, V, chunk, inv_temp,
    HAS_MASK: tl.constexpr, NOISE: tl.constexpr, TEMPERED: tl.constexpr, LANEWISE: tl.constexpr,
    LANE_MAX: tl.constexpr, STAGES: tl.constexpr, BLOCK_V: tl.constexpr, GDC: tl.constexpr,
):  # fmt: skip
    wait_for_previous_kernel(GDC)
    row = tl.program_id(0)
    split = tl.program_id(1)
    n_splits = tl.num_programs(1)
    b = row // N
    n = row % N
    lo = split * chunk
    hi = tl.minimum(lo + chunk, V)
    if HAS_MASK:
        # Committed positions need no work: an empty range leaves the neutral partials.
        is_masked = tl.load(masked_ptr + b * stride_mb + n * stride_mn)
        hi = tl.where(is_masked != 0, hi, lo)
    row_ptr = logits_ptr + b.to(tl.int64) * stride_lb + n.to(tl.int64) * stride_ln
    if NOISE:
        seed_mix = _mix32(tl.load(seed_ptr).to(tl.uint32))
    cols = tl.arange(0, BLOCK_V)
    run_max = tl.full([], NEG_BIG, tl.float32)
    run_sum = tl.full([], 0.0, tl.float32)
    best_score = tl.full([], float("-inf"), tl.float32)
    best_logit = tl.full([], float("-inf"), tl.float32)
    best_idx = tl.full([], 0, tl.int32)
    # LANEWISE: each lane keeps its own running sum and best, so a tile costs one reduction (its max) rather
    # than three; the lanes are merged once, after the loop. LANE_MAX: each lane keeps its own running max too,
    # so a tile costs no reduction at all, and still one exponential per logit: exp(-|x - max|) is the new
    # term when x is not above the lane's max, and the factor rescaling the lane's sum when it is.
    max_lanes = tl.full([BLOCK_V], NEG_BIG, tl.float32)
    sum_lanes = tl.zeros([BLOCK_V], tl.float32)
    best_lanes = tl.full([BLOCK_V], float("-inf"), tl.float32)
    logit_lanes = tl.full([BLOCK_V], float("-inf"), tl.float32)
    idx_lanes = tl.zeros([BLOCK_V], tl.int32)
    # STAGES > 1: the loop is software-pipelined, STAGES - 1 tiles' loads in flight ahead of the one worked on
    # (copied asynchronously through shared memory); Triton pipelines a loop's loads that feed no dot only
    # when asked, so at 1 each program waits for every tile it reads
    for start in tl.range(lo, hi, BLOCK_V, num_stages=STAGES):
        offs = start + cols
        x = tl.load(row_ptr + offs, mask=offs < hi, other=float("-inf")).to(tl.float32)
        if TEMPERED:  # the softmax (and so the confidence) of the tempered logits
            x = x * inv_temp
        if LANE_MAX:
            above = x - max_lanes
            factor = tl.exp2(-tl.abs(above) * LOG2E)
            rises = above > 0.0
            sum_lanes = tl.where(rises, sum_lanes * factor + 1.0, sum_lanes + factor)
            max_lanes = tl.where(rises, x, max_lanes)
        else:
            new_max = tl.maximum(run_max, tl.max(x, 0))
            if LANEWISE:
                sum_lanes = sum_lanes * tl.exp(run_max - new_max) + tl.exp2((x - new_max) * LOG2E)
            else:
                run_sum = run_sum * tl.exp(run_max - new_max) + tl.sum(tl.exp2((x - new_max) * LOG2E), 0)
            run_max = new_max
        if NOISE:
            counter = (row.to(tl.int64) * V + offs).to(tl.uint32)
            bits = _mix32(counter ^ seed_mix)
            u = ((bits >> 8).to(tl.float32) + 0.5) * (1.0 / 16777216.0)
            score = (x if TEMPERED else x * inv_temp) - tl.log(-tl.log(u))
        else:
            score = x
        if LANEWISE:  # a lane keeps the start of the tile its best came from, and adds its own column at the end
            if LANE_MAX and not NOISE:
                idx_lanes = tl.where(rises, start, idx_lanes)  # the lane's max is its best logit: nothing more
            else:
                better_lanes = score > best_lanes  # strict: within a lane, earlier tiles win ties
                best_lanes = tl.where(better_lanes, score, best_lanes)
                if NOISE:  # else the best score is the best logit
                    logit_lanes = tl.where(better_lanes, x, logit_lanes)
                idx_lanes = tl.where(better_lanes, start, idx_lanes)
        else:
            tile_best, tile_arg = tl.max(score, 0, return_indices=True, return_indices_tie_break_left=True)
            tile_logit = tl.sum(tl.where(cols == tile_arg, x, 0.0), 0) if NOISE else tile_best
            better = tile_best > best_score  # strict: earlier tiles win ties
            best_idx = tl.where(better, start + tile_arg, best_idx)
            best_logit = tl.where(better, tile_logit, best_logit)
            best_score = tl.where(better, tile_best, best_score)
    if LANE_MAX:
        run_max = tl.max(max_lanes, 0)
        run_sum = tl.sum(sum_lanes * tl.exp(max_lanes - run_max), 0)
    elif LANEWISE:
        run_sum = tl.sum(sum_lanes, 0)
    if LANEWISE:
        if LANE_MAX and not NOISE:  # a lane that saw no logit keeps the -inf best of one that saw none
            best_lanes = tl.where(max_lanes > NEG_BIG, max_lanes, float("-inf"))
        if not NOISE:
            logit_lanes = best_lanes
        idx_lanes += cols
        best_score = tl.max(best_lanes, 0)
        # lanes hold distinct vocabulary ids: among the tied best, the lowest id (torch.argmax's rule)
        best_idx = tl.min(tl.where(best_lanes == best_score, idx_lanes, 2147483647), 0)
        best_idx = tl.where(best_score > float("-inf"), best_idx, 0)
        best_logit = tl.max(tl.where(idx_lanes == best_idx, logit_lanes, float("-inf")), 0)
    out = row * n_splits + split
    tl.store(part_max_ptr + out, run_max)
    tl.store(part_sum_ptr + out, run_sum)
    tl.store(part_score_ptr + out, best_score)
    tl.store(part_idx_ptr + out, best_idx)
    tl.store(part_logit_ptr + out, best_logit)


@triton.jit
def _select_kernel(
    part_max_ptr, part_sum_ptr, part_score_ptr, part_idx_ptr, part_logit_ptr,
    masked_ptr, stride_mb, stride_mn,
    ids_ptr, stride_ib, stride_in,
    conf_ptr, token_ptr, count_ptr,
    N, n_splits, threshold,
    HAS_MASK: tl.constexpr, COMMIT: tl.constexpr, STRICT: tl.constexpr,
    BLOCK_N: tl.constexpr, BLOCK_S: tl.constexpr, GDC: tl.constexpr,
):  # fmt: skip
    wait_for_previous_kernel(GDC)
    b = tl.program_id(0)
    rn = tl.arange(0, BLOCK_N)
    rs = tl.arange(0, BLOCK_S)
    in_block = rn < N
    ok = in_block[:, None] & (rs[None, :] < n_splits)
    part = (b * N + rn)[:, None] * n_splits + rs[None, :]
    p_max = tl.load(part_max_ptr + part, mask=ok, other=NEG_BIG)
    p_sum = tl.load(part_sum_ptr + part, mask=ok, other=0.0)
    p_score = tl.load(part_score_ptr + part, mask=ok, other=float("-inf"))
    row_max = tl.max(p_max, 1)
    row_sum = tl.sum(p_sum * tl.exp(p_max - row_max[:, None]), 1)
    _, best_split = tl.max(p_score, 1, return_indices=True, return_indices_tie_break_left=True)
    pick = ok & (rs[None, :] == best_split[:, None])
    token = tl.max(tl.where(pick, tl.load(part_idx_ptr + part, mask=ok, other=0), -1), 1)
    logit = tl.max(tl.where(pick, tl.load(part_logit_ptr + part, mask=ok, other=0.0), float("-inf")), 1)
    conf = tl.exp(logit - row_max) / tl.where(row_sum > 0.0, row_sum, 1.0)
    m_off = b * stride_mb + rn * stride_mn
    if HAS_MASK:
        candidate = in_block & (tl.load(masked_ptr + m_off, mask=in_block, other=0) != 0)
    else:
        candidate = in_block
    conf = tl.where(candidate, conf, float("-inf"))
    token = tl.where(candidate, token.to(tl.int64), -1)
    tl.store(conf_ptr + b * N + rn, conf, mask=in_block)
    tl.store(token_ptr + b * N + rn, token, mask=in_block)
    if COMMIT:
        passes = candidate & ((conf > threshold) if STRICT else (conf >= threshold))
        n_pass = tl.sum(passes.to(tl.int32), 0)
        _, fallback = tl.max(tl.where(candidate, conf, -1.0), 0, return_indices=True,
                             return_indices_tie_break_left=True)
        # Scalar conditions go through the index (not `&` with a vector): the interpreter
        # mistypes scalar-bool & vector-bool.
        commit = passes | (candidate & (rn == tl.where(n_pass == 0, fallback, -1)))
        tl.store(ids_ptr + b * stride_ib + rn * stride_in, token, mask=commit)
        tl.store(masked_ptr + m_off, tl.zeros([BLOCK_N], tl.uint8), mask=commit)
        tl.store(count_ptr + b, tl.sum(commit.to(tl.int64), 0))

# Per-lane accumulation pays once a program streams this many vocabulary tiles: on an H200 it won at every
# split size of three tiles or more (up to 1.8x at one split per row) and lost at two (0.0091 vs 0.0069 ms).
LANEWISE_MIN_TILES = 3


def _plan_splits(rows: int, vocab: int, block_v: int, splits: int | None, device: torch.device) -> int:
    """About two programs per SM (one split per row in the interpreter): on an H200, 16 rows in 15 splits
    of five tiles took 0.0070 ms lanewise against 0.0084 for four programs per SM in splits of three
    (``latency_bench/results/gpu_check_h200_2026-12-04_run3.md``, tuning sweep)."""
    tiles = triton.cdiv(vocab, block_v)
    if splits is None:
        splits = triton.cdiv(2 * sm_count(device), rows) if device.type == "cuda" else 1
    return max(1, min(splits, tiles, 1024))


def confidence_select(
    logits: torch.Tensor,
    masked: torch.Tensor | None,
    ids: torch.Tensor | None,
    threshold: float,
    temperature: float,
    seed: torch.Tensor | None,
    out: tuple[torch.Tensor, torch.Tensor] | None = None,
    block_v: int | None = None,
    splits: int | None = None,
    strict: bool = False,
    tempered: bool = False,
    lanewise: bool | None = None,
    lane_max: bool = False,
    stages: int = 1,
    max_registers: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Launch both stages on batched ``[B, N, V]`` logits; commits in place when ``ids`` is given.

    Returns ``(conf [B, N] fp32, token [B, N] int64, count [B] int64 or None)``. ``seed`` is a
    1-element int64 device tensor (so CUDA graphs can change it between replays); ``out`` are
    optional contiguous ``[B, N]`` buffers for conf and token. ``strict`` and ``tempered`` as in
    ``kernels.reference.commit_ref`` / ``confidence_and_token_ref``. ``lanewise``: the streaming stage's
    per-lane accumulation (one reduction per split instead of three per tile); None chooses it when each
    program streams at least :data:`LANEWISE_MIN_TILES` tiles, where the GPU check's sweep measured it faster.
    ``lane_max`` (per-lane accumulation only): each lane keeps its own running max as well, so the loop has no
    reduction at all; a candidate the sweep times, not yet measured on a GPU. ``stages`` > 1: each program keeps
    ``stages - 1`` tiles' loads in flight ahead of the one it works on (a candidate too). ``max_registers``: a
    cap on the streaming stage's registers a thread (ptxas's allocation; the interpreter has none), so an SM
    holds more of its programs and so more loads in flight (a candidate: the lanewise loop's 58 registers hold 4
    programs an SM, 48 hold 5 with no spill, 40 hold 6: ``python -m latency_bench.kernels_compile``).
    """
    B, N, V = logits.shape
    if logits.stride(2) != 1:
        logits = logits.contiguous()
    device = logits.device
    if block_v is None:
        block_v = 2048 if device.type == "cuda" else 512
    n_splits = _plan_splits(B * N, V, block_v, splits, device)
    chunk = triton.cdiv(triton.cdiv(V, n_splits), block_v) * block_v
    n_splits = triton.cdiv(V, chunk)
    if lanewise is None:
        lanewise = chunk // block_v >= LANEWISE_MIN_TILES
    if lane_max and not lanewise:
        raise ValueError("lane_max keeps per-lane maxima for the per-lane accumulation: it needs lanewise")
    rows = B * N
    f32 = dict(dtype=torch.float32, device=device)
    part_max, part_sum, part_score, part_logit = (torch.empty(rows * n_splits, **f32) for _ in range(4))
    part_idx = torch.empty(rows * n_splits, dtype=torch.int32, device=device)
    has_mask = masked is not None
    mask_u8 = masked.view(torch.uint8) if has_mask else part_idx
    m_strides = masked.stride() if has_mask else (0, 0)
    noise = temperature > 0.0
    if noise and seed is None:
        raise ValueError("sampling at temperature > 0 needs a seed tensor")
    seed_arg = seed if noise else part_idx
    launch = pdl.launch_options(device)
    _partials_kernel[(rows, n_splits)](
        logits, logits.stride(0), logits.stride(1),
        mask_u8, m_strides[0], m_strides[1],
        seed_arg,
        part_max, part_sum, part_score, part_idx, part_logit,
        N, V, chunk, 1.0 / temperature if noise else 1.0,
        HAS_MASK=has_mask, NOISE=noise, TEMPERED=noise and tempered, LANEWISE=lanewise, LANE_MAX=lane_max,
        STAGES=stages, BLOCK_V=block_v,
        num_warps=8 if block_v >= 2048 else 4, **launch,
        **({"maxnreg": max_registers} if max_registers else {}),
    )  # fmt: skip
    if out is None:
        conf, token = torch.empty(B, N, **f32), torch.empty(B, N, dtype=torch.int64, device=device)
    else:
        conf, token = out
    commit = ids is not None
    count = torch.empty(B, dtype=torch.int64, device=device) if commit else None
    _select_kernel[(B,)](
        part_max, part_sum, part_score, part_idx, part_logit,
        mask_u8, m_strides[0], m_strides[1],
        ids if commit else token, ids.stride(0) if commit else 0, ids.stride(1) if commit else 0,
        conf, token, count if commit else token,
        N, n_splits, float(threshold),
        HAS_MASK=has_mask, COMMIT=commit, STRICT=strict,
        BLOCK_N=triton.next_power_of_2(N), BLOCK_S=triton.next_power_of_2(n_splits), **launch,
    )  # fmt: skip
    return conf, token, count
