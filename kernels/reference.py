"""Plain-torch references: the semantics every Triton kernel must match, and the CPU path.

Shapes follow the kernels: logits ``[N, V]`` or ``[B, N, V]`` (a block of N positions per batch
row); attention tensors are sequence-major ``[B, T, H, D]`` (a leading batch dim is optional).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

_MASK32 = 0xFFFFFFFF


def mix32(x: torch.Tensor) -> torch.Tensor:
    """A 32-bit integer hash (the "lowbias32" finaliser) on int64 tensors holding uint32 values.

    Triton and torch compute it bit-identically, so the Gumbel noise of a seeded sample is the
    same on both paths and the kernel can be checked exactly against this reference.
    """
    x = x ^ (x >> 16)
    x = (x * 0x7FEB352D) & _MASK32
    x = x ^ (x >> 15)
    x = (x * 0x846CA68B) & _MASK32
    return x ^ (x >> 16)


def gumbel_noise(seed: int, rows: int, vocab: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """Standard Gumbel noise ``[rows, vocab]`` (fp32) from a counter-based hash of (seed, row*vocab+col)."""
    seed_mix = mix32(torch.tensor(seed & _MASK32, dtype=torch.int64, device=device))
    counter = torch.arange(rows * vocab, dtype=torch.int64, device=device) & _MASK32
    bits = mix32(counter ^ seed_mix)
    u = ((bits >> 8).to(torch.float32) + 0.5) * (1.0 / 16777216.0)
    return (-torch.log(-torch.log(u))).view(rows, vocab)


def _as_batched(x: torch.Tensor, batched: bool) -> torch.Tensor:
    return x if batched else x.unsqueeze(0)


def confidence_and_token_ref(
    logits: torch.Tensor,
    temperature: float = 0.0,
    seed: int = 0,
    masked: torch.Tensor | None = None,
    tempered: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per position: the chosen token and its probability under ``softmax(logits)``.

    At temperature 0 the token is the argmax (ties go to the lowest index, as ``torch.argmax``);
    above 0 it is a Gumbel-max sample of ``logits / temperature``. The confidence is the
    probability of that token under the untempered softmax (the LLaDA / Fast-dLLM convention),
    or with ``tempered`` under ``softmax(logits / temperature)``, the distribution it was drawn
    from (the product decoder's rule). Positions outside ``masked`` (when given) get confidence
    ``-inf`` and token ``-1``.
    """
    x = logits.float()
    lead = x.shape[:-1]
    flat = x.reshape(-1, x.shape[-1])
    if temperature > 0.0:
        scaled = flat / temperature
        score = scaled + gumbel_noise(seed, flat.shape[0], flat.shape[1], flat.device)
        if tempered:
            flat = scaled
    else:
        score = flat
    token = torch.argmax(score, dim=-1)
    logit_tok = flat.gather(1, token[:, None])[:, 0]
    # a row with no finite logit has no confidence, as in the kernel (-inf - -inf had made it NaN, and argmax
    # then committed that row first)
    conf = torch.exp(logit_tok - torch.logsumexp(flat, dim=-1)).nan_to_num(nan=0.0)
    conf, token = conf.view(lead), token.view(lead)
    if masked is not None:
        conf = torch.where(masked, conf, torch.full_like(conf, float("-inf")))
        token = torch.where(masked, token, torch.full_like(token, -1))
    return conf, token


def commit_ref(
    conf: torch.Tensor,
    token: torch.Tensor,
    masked: torch.Tensor,
    ids: torch.Tensor,
    threshold: float,
    strict: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Commit masked positions with ``conf >= threshold`` (``>`` when ``strict``, as Fast-dLLM v2
    and the product decoder compare); if none pass, the most confident one.

    Updates ``ids`` and ``masked`` in place and returns them with the number committed per block
    (0-d for an unbatched block). Fallback ties go to the lowest position, as ``torch.argmax``.
    """
    batched = masked.dim() == 2
    c, t, m, i = (_as_batched(v, batched) for v in (conf, token, masked, ids))
    passes = m & ((c > threshold) if strict else (c >= threshold))
    fallback = torch.argmax(torch.where(m, c, torch.full_like(c, -1.0)), dim=-1)
    need = (passes.sum(-1) == 0) & m.any(-1)
    # scatter_ with a Python scalar, not an indexed assignment: that copies the value from the host,
    # which CUDA-graph capture forbids
    one_hot = torch.zeros_like(passes).scatter_(1, fallback[:, None], True)
    commit = passes | (one_hot & need[:, None])
    i.copy_(torch.where(commit, t.to(i.dtype), i))
    m.copy_(m & ~commit)
    count = commit.sum(-1)
    return ids, masked, count if batched else count[0]


def select_confident_ref(
    logits: torch.Tensor,
    masked: torch.Tensor,
    ids: torch.Tensor,
    threshold: float,
    temperature: float = 0.0,
    seed: int = 0,
    strict: bool = False,
    tempered: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Confidence-threshold parallel decoding of one step for a block (see ``commit_ref``)."""
    conf, token = confidence_and_token_ref(logits, temperature, seed, masked, tempered)
    return commit_ref(conf, token, masked, ids, threshold, strict)


def _lengths(cache_len: int | torch.Tensor, batch: int, device: torch.device) -> torch.Tensor:
    lengths = torch.as_tensor(cache_len, device=device).to(torch.int64).reshape(-1)
    return lengths.expand(batch) if lengths.numel() == 1 else lengths


def _sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, scale: float | None):
    """SDPA on sequence-major ``[B, T, H, D]`` tensors, GQA included."""
    out = F.scaled_dot_product_attention(
        q.transpose(1, 2),
        k.transpose(1, 2),
        v.transpose(1, 2),
        attn_mask=mask,
        scale=scale,
        enable_gqa=q.shape[2] != k.shape[2],
    )
    return out.transpose(1, 2)


def block_attention_ref(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    cache_len: int | torch.Tensor,
    k_block: torch.Tensor | None = None,
    v_block: torch.Tensor | None = None,
    scale: float | None = None,
) -> torch.Tensor:
    """A block's queries over the first ``cache_len`` cache entries plus (optionally) the block's own K/V.

    Every query sees every valid key: the prefix is in the past and the block is bidirectional.
    ``cache_len`` may be a tensor (``[B]`` or 0-d) so the call has fixed shapes for CUDA graphs.
    """
    batched = q.dim() == 4
    q, k_cache, v_cache = (_as_batched(t, batched) for t in (q, k_cache, v_cache))
    if isinstance(cache_len, int) and k_block is None:
        out = _sdpa(q, k_cache[:, :cache_len], v_cache[:, :cache_len], None, scale)
        return out if batched else out[0]
    lengths = _lengths(cache_len, q.shape[0], q.device)
    mask = torch.arange(k_cache.shape[1], device=q.device)[None, :] < lengths[:, None]
    k, v = k_cache, v_cache
    if k_block is not None:
        if v_block is None:
            raise ValueError("k_block and v_block must be given together")
        k_block, v_block = _as_batched(k_block, batched), _as_batched(v_block, batched)
        k, v = torch.cat([k_cache, k_block], dim=1), torch.cat([v_cache, v_block], dim=1)
        mask = torch.cat([mask, mask.new_ones(mask.shape[0], k_block.shape[1])], dim=1)
    out = _sdpa(q, k, v, mask[:, None, None, :], scale)
    return out if batched else out[0]


def block_causal_mask(
    n_queries: int, n_keys: int, block_size: int, q_offset: int | torch.Tensor = 0, device: torch.device | str = "cpu"
) -> torch.Tensor:
    """Bool ``[n_queries, n_keys]``: query i (absolute position q_offset+i) sees key j iff same or earlier block."""
    q_block = (torch.arange(n_queries, device=device) + q_offset) // block_size
    k_block = torch.arange(n_keys, device=device) // block_size
    return k_block[None, :] <= q_block[:, None]


def block_causal_attention_ref(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    block_size: int,
    q_offset: int | torch.Tensor = 0,
    scale: float | None = None,
) -> torch.Tensor:
    """Block-causal attention: keys are absolute positions ``0..Tk-1``, queries ``q_offset..q_offset+Tq-1``
    (``q_offset`` an int or a 1-element device tensor)."""
    batched = q.dim() == 4
    q, k, v = (_as_batched(t, batched) for t in (q, k, v))
    mask = block_causal_mask(q.shape[1], k.shape[1], block_size, q_offset, q.device)
    out = _sdpa(q, k, v, mask, scale)
    return out if batched else out[0]


def rotary_ref(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate-half RoPE: ``x`` ``[B, T, H, D]``, ``cos``/``sin`` ``[B, T, D/2]`` (un-duplicated angles)."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half].float(), x[..., half:].float()
    c, s = cos.float()[:, :, None, :], sin.float()[:, :, None, :]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1).to(x.dtype)


def add_rms_norm_ref(x: torch.Tensor, delta: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """``x += delta`` in place (the residual stream), then RMSNorm of the new ``x`` times ``weight``."""
    x.add_(delta)
    return F.rms_norm(x, (x.shape[-1],), weight, eps)


def silu_mul_ref(gate_up: torch.Tensor) -> torch.Tensor:
    """SwiGLU's activation on a fused gate-up projection: ``silu(first half) * second half``."""
    gate, up = gate_up.chunk(2, dim=-1)
    return F.silu(gate) * up


def qk_norm_rope_ref(
    qkv: torch.Tensor, heads: int, kv_heads: int, q_weight: torch.Tensor | None, k_weight: torch.Tensor | None,
    eps: float, cos: torch.Tensor, sin: torch.Tensor, positions: torch.Tensor, k_cache: torch.Tensor,
    v_cache: torch.Tensor,
) -> torch.Tensor:  # fmt: skip
    """Split a fused QKV projection ``[B, T, (H + 2 Hkv) D]``; per-head RMSNorm (Qwen3; none without weights)
    and RoPE on q and k; k and v written into the caches ``[B, cap, Hkv, D]`` at ``positions``; returns q
    ``[B, T, H, D]``."""
    B, T, width = qkv.shape
    D = width // (heads + 2 * kv_heads)
    q, k, v = qkv.view(B, T, heads + 2 * kv_heads, D).split([heads, kv_heads, kv_heads], dim=2)
    tables = (cos[None].expand(B, -1, -1), sin[None].expand(B, -1, -1))
    if q_weight is not None:
        q, k = F.rms_norm(q, (D,), q_weight, eps), F.rms_norm(k, (D,), k_weight, eps)
    q, k = rotary_ref(q, *tables), rotary_ref(k, *tables)
    k_cache.index_copy_(1, positions, k)
    v_cache.index_copy_(1, positions, v)
    return q
