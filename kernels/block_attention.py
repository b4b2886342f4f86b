"""Attention for diffusion decoding: a block over the KV cache, and block-causal prefill.

Layouts are sequence-major, ``[B, T, H, D]`` (the leading batch dim may be omitted), which is
how a static KV cache is naturally written. GQA: ``Hq`` must be a multiple of ``Hkv``.
RoPE is the caller's job: rotate q and k (with their absolute positions) before calling and
store rotated keys in the cache, so these functions see plain vectors and stay model-agnostic.

Both functions dispatch like the rest of ``kernels``: Triton on CUDA (or when forced), the
SDPA reference otherwise. Whether the engine should prefer SDPA on a GPU is decided by the
numbers in ``latency_bench/gpu_check``.
"""

from __future__ import annotations

import math

import torch

from kernels import reference
from kernels.dispatch import kernel_path

_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _check_heads(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, name: str) -> None:
    if q.dim() not in (3, 4) or k.dim() != q.dim() or v.dim() != q.dim():
        raise ValueError(f"{name}: q, k, v must all be [T, H, D] or [B, T, H, D]; got {q.shape}, {k.shape}, {v.shape}")
    if q.dtype not in _DTYPES or k.dtype != q.dtype or v.dtype != q.dtype:
        raise ValueError(f"{name}: q, k, v must share one of {_DTYPES}; got {q.dtype}, {k.dtype}, {v.dtype}")
    if k.shape != v.shape:
        raise ValueError(f"{name}: k and v shapes differ: {tuple(k.shape)} vs {tuple(v.shape)}")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"{name}: head dims differ: q {q.shape[-1]} vs k {k.shape[-1]}")
    if q.shape[-2] % k.shape[-2]:
        raise ValueError(f"{name}: query heads {q.shape[-2]} not a multiple of KV heads {k.shape[-2]}")
    if q.dim() == 4 and q.shape[0] != k.shape[0]:
        raise ValueError(f"{name}: batch sizes differ: q {q.shape[0]} vs k {k.shape[0]}")
    if len({q.device, k.device, v.device}) != 1:
        raise ValueError(f"{name}: q, k, v must be on one device")


def _check_out(out: torch.Tensor | None, q: torch.Tensor) -> None:
    if out is not None and (out.shape != q.shape or out.dtype != q.dtype or out.device != q.device):
        raise ValueError(f"out must match q: {tuple(q.shape)} {q.dtype} {q.device}")
    if out is not None and out.stride(-1) != 1:
        raise ValueError("out must have a contiguous last dimension")


def _into(result: torch.Tensor, out: torch.Tensor | None) -> torch.Tensor:
    return result if out is None else out.copy_(result)


def _lengths(cache_len: int | torch.Tensor, batch: int, capacity: int, device: torch.device) -> torch.Tensor:
    """Per-batch valid cache lengths as an int32 device tensor (no host sync for tensor input)."""
    if isinstance(cache_len, torch.Tensor):
        if cache_len.device != device or cache_len.numel() not in (1, batch):
            raise ValueError(f"cache_len tensor must be on {device} with 1 or {batch} elements")
        lengths = cache_len.to(torch.int32).reshape(-1)
        return lengths if lengths.numel() == batch else lengths.expand(batch).contiguous()
    if not 0 <= cache_len <= capacity:
        raise ValueError(f"cache_len {cache_len} outside the cache capacity 0..{capacity}")
    return torch.full((batch,), cache_len, dtype=torch.int32, device=device)


def block_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    cache_len: int | torch.Tensor,
    k_block: torch.Tensor | None = None,
    v_block: torch.Tensor | None = None,
    scale: float | None = None,
    *,
    out: torch.Tensor | None = None,
    path: str = "auto",
    one_launch: bool = False,
    prefetch_bytes: int | None = None,
) -> torch.Tensor:
    """Attention of a block's queries over the cached prefix plus the block itself.

    ``q`` ``[B, Nq, Hq, D]``; ``k_cache``/``v_cache`` ``[B, capacity, Hkv, D]`` of which the first
    ``cache_len`` entries are valid (an int, or an int tensor of 1 or B elements that CUDA graphs
    can update in place). The block's own keys either come as ``k_block``/``v_block``
    ``[B, Nb, Hkv, D]`` or are already written into the cache just below ``cache_len`` (then
    pass ``cache_len`` = prefix + block and no block tensors; this avoids a concat on the torch
    path). No mask inside the block: it is bidirectional. ``scale`` defaults to ``1/sqrt(D)``.
    Returns ``[B, Nq, Hq, D]`` in q's dtype (written into ``out`` when given, e.g. a static
    buffer under CUDA graphs). There must be at least one key. ``one_launch`` (Triton path; a candidate the GPU
    check times): the cache splits' partial softmaxes are merged by the split that finishes last, not a second
    launch. ``prefetch_bytes`` (Triton path, under :func:`kernels.pdl.programmatic_launch`): how much of the cache
    the launch asks L2 for while the kernel before finishes, if not :data:`kernels.pdl.PREFETCH_BYTES`.
    """
    _check_heads(q, k_cache, v_cache, "block_attention")
    if (k_block is None) != (v_block is None):
        raise ValueError("block_attention: k_block and v_block must be given together")
    if k_block is not None:
        _check_heads(q, k_block, v_block, "block_attention (block K/V)")
        if k_block.shape[-2:] != k_cache.shape[-2:]:
            raise ValueError(f"block_attention: block K/V heads x dim {tuple(k_block.shape[-2:])} differ from the "
                             f"cache's {tuple(k_cache.shape[-2:])}")
    if k_block is None and isinstance(cache_len, int) and cache_len == 0:
        raise ValueError("block_attention: no keys (cache_len is 0 and no block K/V)")
    _check_out(out, q)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    if kernel_path(path, q.device) == "torch":
        return _into(reference.block_attention_ref(q, k_cache, v_cache, cache_len, k_block, v_block, scale), out)
    from kernels import attention_triton

    batched = q.dim() == 4
    args = [t if batched or t is None else t.unsqueeze(0) for t in (q, k_cache, v_cache, k_block, v_block, out)]
    lengths = _lengths(cache_len, args[0].shape[0], args[1].shape[1], q.device)
    budget = {} if prefetch_bytes is None else {"prefetch_bytes": prefetch_bytes}
    result = attention_triton.block_attention(*args[:3], lengths, *args[3:5], scale, out=args[5],
                                              one_launch=one_launch, **budget)  # fmt: skip
    return result if batched else result[0]


def block_causal_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    block_size: int,
    q_offset: int | torch.Tensor = 0,
    scale: float | None = None,
    *,
    out: torch.Tensor | None = None,
    path: str = "auto",
) -> torch.Tensor:
    """Block-causal (prefill) attention: query i sees key j iff ``j // block_size <= (q_offset + i) // block_size``.

    Keys ``k, v`` ``[B, Tk, Hkv, D]`` sit at absolute positions ``0..Tk-1`` (a cached prefix followed
    by the new tokens); queries ``q`` ``[B, Tq, Hq, D]`` at ``q_offset..q_offset+Tq-1``, so a prompt
    can be prefilled in pieces. ``block_size=1`` is ordinary causal attention. ``q_offset`` may be a
    1-element integer tensor on q's device (what a CUDA graph replays at any offset; it is not range-checked,
    which would sync): then the keys may run past the queries, since the rule hides every later block.
    """
    _check_heads(q, k, v, "block_causal_attention")
    if isinstance(q_offset, torch.Tensor):
        if q_offset.numel() != 1 or q_offset.device != q.device or q_offset.is_floating_point():
            raise ValueError(f"block_causal_attention: a q_offset tensor must be one integer on {q.device}")
    elif q_offset < 0 or q_offset >= k.shape[-3]:
        raise ValueError(f"block_causal_attention: q_offset {q_offset} outside the {k.shape[-3]} keys")
    if block_size < 1:
        raise ValueError(f"block_causal_attention: need block_size >= 1, got {block_size}")
    _check_out(out, q)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    if kernel_path(path, q.device) == "torch":
        return _into(reference.block_causal_attention_ref(q, k, v, block_size, q_offset, scale), out)
    from kernels import attention_triton

    batched = q.dim() == 4
    q4, k4, v4, o4 = (t if batched or t is None else t.unsqueeze(0) for t in (q, k, v, out))
    result = attention_triton.block_causal_attention(q4, k4, v4, block_size, q_offset, scale, out=o4)
    return result if batched else result[0]
