"""Kernel-vs-reference checks on fresh random inputs, shared by the CPU tests and the GPU check.

Each ``check_*`` builds inputs for one shape, runs the Triton kernel (tile sizes and split
counts can be forced, so the CPU interpreter covers multi-tile and multi-split merges), poisons
every output buffer and every cache slot the kernel must ignore, and raises ``AssertionError``
with the worst deviation when the kernel and its reference disagree.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from kernels import reference
from kernels.dispatch import kernel_path


@dataclass(frozen=True)
class Tolerance:
    atol: float
    rtol: float


# Attention outputs carry the input dtype's rounding; the oracle is the fp32 reference.
ATTENTION_TOL = {
    torch.float32: Tolerance(2e-5, 1e-4),
    torch.float16: Tolerance(4e-3, 4e-3),
    torch.bfloat16: Tolerance(3e-2, 2e-2),
}
# Confidences are computed in fp32 from upcast logits for every input dtype, so one tolerance.
CONFIDENCE_TOL = Tolerance(1e-6, 1e-4)
_NOISE_TIE = 1e-4  # Gumbel scores this close may order differently under different exp/log


def _triton(device: str) -> None:
    """Fail with the dispatcher's explanation when Triton cannot run on this device."""
    kernel_path("triton", device)


def _assert_close(got: torch.Tensor, want: torch.Tensor, tol: Tolerance, what: str) -> None:
    got, want = got.float(), want.float()
    if not torch.isfinite(got).all():
        raise AssertionError(f"{what}: non-finite values in the output (poison left behind?)")
    err = (got - want).abs()
    bound = tol.atol + tol.rtol * want.abs()
    if (err > bound).any():
        worst = int((err - bound).argmax())
        raise AssertionError(
            f"{what}: max |error| {err.max().item():.3g} over tolerance (atol {tol.atol}, rtol {tol.rtol}); "
            f"worst element {worst}: got {got.flatten()[worst].item():.6g}, want {want.flatten()[worst].item():.6g}"
        )


def _sampler(gen: torch.Generator, dtype: torch.dtype, device: str) -> Callable[..., torch.Tensor]:
    """``rand(*shape, scale=1, offset=0)``: normal samples from ``gen`` (on the CPU, so a check draws the same
    inputs on any device), scaled and shifted, in ``dtype`` on ``device``."""

    def rand(*shape: int, scale: float = 1.0, offset: float = 0.0) -> torch.Tensor:
        return (torch.randn(*shape, generator=gen) * scale + offset).to(dtype=dtype, device=device)

    return rand


def _assert_counts_zero(device: str, what: str) -> None:
    """A kernel that merges its splits in its last program leaves the split counts at zero for the next launch."""
    from kernels.split_count_triton import device_counts

    if device_counts(torch.device(device)).count_nonzero():
        raise AssertionError(f"{what}: split counts left non-zero; the next launch would merge too early")


def make_logits(
    batch: int, n: int, vocab: int, dtype: torch.dtype, device: str, gen: torch.Generator, ties: bool
) -> torch.Tensor:
    """Random logits; with ``ties`` every row's maximum appears twice (a low and a high index)
    and the last row repeats the first, so both argmax and fallback ties are exercised."""
    logits = torch.randn(batch, n, vocab, generator=gen) * 4.0
    if ties:
        lo = torch.randint(0, max(1, vocab // 2), (batch, n), generator=gen)
        hi = torch.randint(vocab // 2, vocab, (batch, n), generator=gen)
        top = logits.amax(-1) + 1.0
        logits.scatter_(-1, lo[..., None], top[..., None])
        logits.scatter_(-1, hi[..., None], top[..., None])
        if n > 1:
            logits[:, -1] = logits[:, 0]
    return logits.to(dtype=dtype, device=device)


def check_confidence(
    n: int,
    vocab: int,
    dtype: torch.dtype,
    device: str = "cpu",
    *,
    batch: int = 1,
    temperature: float = 0.0,
    masked_fraction: float = 0.5,
    ties: bool = False,
    force_fallback: bool = False,
    seed: int = 0,
    block_v: int | None = None,
    splits: int | None = None,
    lanewise: bool = False,
    lane_max: bool = False,
    stages: int = 1,
) -> None:
    """Triton ``confidence_select`` against ``confidence_and_token_ref`` and ``commit_ref``."""
    from kernels import confidence_triton

    _triton(device)
    gen = torch.Generator().manual_seed(seed)
    logits = make_logits(batch, n, vocab, dtype, device, gen, ties)
    masked = (torch.rand(batch, n, generator=gen) < masked_fraction).to(device)
    garbage = torch.randint(-(2**40), 2**40, (batch, n), generator=gen).to(device)
    noise_seed = int(torch.randint(0, 2**31 - 1, (), generator=gen))
    seed_t = torch.tensor([noise_seed], dtype=torch.int64, device=device)

    conf_r, tok_r = reference.confidence_and_token_ref(logits, temperature, noise_seed, masked)
    out = (torch.full((batch, n), float("nan"), device=device), garbage.clone())
    conf_k, tok_k, _ = confidence_triton.confidence_select(
        logits, masked, None, 0.0, temperature, seed_t, out=out, block_v=block_v, splits=splits, lanewise=lanewise,
        lane_max=lane_max, stages=stages,
    )
    if conf_k.data_ptr() != out[0].data_ptr() or tok_k.data_ptr() != out[1].data_ptr():
        raise AssertionError("confidence_select did not write into the given out buffers")
    if not torch.equal(tok_k[~masked], tok_r[~masked]) or not bool((conf_k[~masked] == float("-inf")).all()):
        raise AssertionError("unmasked positions must report token -1 and confidence -inf")
    _assert_close(conf_k[masked], conf_r[masked], CONFIDENCE_TOL, "confidence")
    differ = masked & (tok_k != tok_r)
    if differ.any():
        if temperature == 0.0:
            raise AssertionError(f"argmax differs at {differ.nonzero().tolist()}: {tok_k[differ]} vs {tok_r[differ]}")
        flat = logits.float().reshape(-1, vocab)
        score = flat / temperature + reference.gumbel_noise(noise_seed, flat.shape[0], vocab, flat.device)
        rows = differ.reshape(-1).nonzero()[:, 0]
        gap = score[rows, tok_r.reshape(-1)[rows]] - score[rows, tok_k.reshape(-1)[rows]]
        if (gap.abs() > _NOISE_TIE).any():
            raise AssertionError(f"Gumbel sample differs beyond rounding: score gaps {gap.tolist()}")

    threshold = 2.0 if force_fallback else float(conf_r[masked].median()) if masked.any() else 0.5
    ids_k, masked_k = garbage.clone(), masked.clone()
    _, _, count_k = confidence_triton.confidence_select(
        logits, masked_k, ids_k, threshold, temperature, seed_t, block_v=block_v, splits=splits, lanewise=lanewise,
        lane_max=lane_max, stages=stages,
    )
    ids_w, masked_w = garbage.clone(), masked.clone()
    _, _, count_w = reference.commit_ref(conf_k, tok_k, masked_w, ids_w, threshold)
    if not (torch.equal(ids_k, ids_w) and torch.equal(masked_k, masked_w) and torch.equal(count_k, count_w)):
        raise AssertionError(
            f"commit step differs from commit_ref: ids {ids_k.tolist()} vs {ids_w.tolist()}, "
            f"masked {masked_k.tolist()} vs {masked_w.tolist()}, count {count_k.tolist()} vs {count_w.tolist()}"
        )
    if bool((count_k != masked.sum(-1).clamp(max=1)).any()) and force_fallback:
        raise AssertionError(f"forced fallback must commit exactly one per block with a mask: {count_k.tolist()}")


def _fp32_oracle(fn, *args: object, **kwargs: object) -> torch.Tensor:
    """The reference evaluated on fp32 copies: the truth both dtypes' kernels are measured against."""
    return fn(*(a.float() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args), **kwargs)


def check_block_attention(
    n_q: int,
    h_q: int,
    h_kv: int,
    head_dim: int,
    capacity: int,
    cache_len: int,
    dtype: torch.dtype,
    device: str = "cpu",
    *,
    batch: int = 1,
    with_block: bool = True,
    tensor_len: bool = False,
    seed: int = 0,
    splits: int | None = None,
    block_n: int | None = None,
    one_launch: bool = False,
) -> None:
    """Triton ``block_attention`` against the fp32 SDPA reference; cache slots past ``cache_len`` are NaN.
    ``one_launch``: the splits merged by the last one (see ``kernels.attention_triton``)."""
    from kernels import attention_triton

    _triton(device)
    gen = torch.Generator().manual_seed(seed)
    rand = _sampler(gen, dtype, device)

    q = rand(batch, n_q, h_q, head_dim)
    k_cache, v_cache = rand(batch, capacity, h_kv, head_dim), rand(batch, capacity, h_kv, head_dim)
    k_block = rand(batch, n_q, h_kv, head_dim) if with_block else None
    v_block = rand(batch, n_q, h_kv, head_dim) if with_block else None
    want = _fp32_oracle(
        reference.block_attention_ref, q, k_cache[:, :cache_len], v_cache[:, :cache_len], cache_len, k_block, v_block
    )
    k_cache[:, cache_len:] = float("nan")
    v_cache[:, cache_len:] = float("nan")
    lengths = torch.full((batch,), cache_len, dtype=torch.int32, device=device)
    out = torch.full_like(q, float("nan"))
    scale = head_dim**-0.5
    got = attention_triton.block_attention(
        q, k_cache, v_cache, lengths, k_block, v_block, scale, out=out, splits=splits, block_n=block_n,
        one_launch=one_launch,
    )
    if got.data_ptr() != out.data_ptr():
        raise AssertionError("block_attention did not write into the given out buffer")
    _assert_close(got, want, ATTENTION_TOL[dtype], f"block_attention {dtype}")
    if one_launch:
        _assert_counts_zero(device, "block_attention")
    if tensor_len:  # the public API with a device-tensor length (the CUDA-graph form) agrees too
        from kernels.block_attention import block_attention

        again = block_attention(q, k_cache, v_cache, lengths[:1], k_block, v_block, path="triton",
                                one_launch=one_launch)  # fmt: skip
        _assert_close(again, want, ATTENTION_TOL[dtype], f"block_attention {dtype} (tensor cache_len)")


def check_block_causal(
    n_q: int,
    n_k: int,
    h_q: int,
    h_kv: int,
    head_dim: int,
    block_size: int,
    dtype: torch.dtype,
    device: str = "cpu",
    *,
    batch: int = 1,
    seed: int = 0,
    block_m: int | None = None,
    block_n: int | None = None,
    heavy_first: bool = False,
) -> None:
    """Triton block-causal prefill (queries are the last ``n_q`` of ``n_k`` positions) vs the fp32 reference."""
    from kernels import attention_triton

    _triton(device)
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, n_q, h_q, head_dim, generator=gen).to(dtype=dtype, device=device)
    k = torch.randn(batch, n_k, h_kv, head_dim, generator=gen).to(dtype=dtype, device=device)
    v = torch.randn(batch, n_k, h_kv, head_dim, generator=gen).to(dtype=dtype, device=device)
    q_offset = n_k - n_q
    want = _fp32_oracle(reference.block_causal_attention_ref, q, k, v, block_size=block_size, q_offset=q_offset)
    out = torch.full_like(q, float("nan"))
    got = attention_triton.block_causal_attention(
        q, k, v, block_size, q_offset, head_dim**-0.5, out=out, block_m=block_m, block_n=block_n,
        heavy_first=heavy_first,
    )
    if got.data_ptr() != out.data_ptr():
        raise AssertionError("block_causal_attention did not write into the given out buffer")
    _assert_close(got, want, ATTENTION_TOL[dtype], f"block_causal_attention {dtype} block {block_size}")


def check_flex_attention(
    n_q: int, h_q: int, h_kv: int, head_dim: int, capacity: int, block_size: int, dtype: torch.dtype,
    device: str = "cpu", *, batch: int = 2, seed: int = 0,
) -> None:  # fmt: skip
    """FlexAttention's two forms (:mod:`kernels.flex_attention`) against the fp32 references: a block's queries
    over caches of different lengths (up to ``capacity``; the slots past a length hold large garbage, finite as in
    the engine's zeroed cache: FlexAttention weighs a masked value by zero, and zero times NaN is NaN), and a
    ``capacity``-token block-causal prefill."""
    from kernels import flex_attention as flex

    gen = torch.Generator().manual_seed(seed)
    rand = _sampler(gen, dtype, device)
    q = rand(batch, n_q, h_q, head_dim)
    k_cache, v_cache = rand(batch, capacity, h_kv, head_dim), rand(batch, capacity, h_kv, head_dim)
    lengths = torch.linspace(capacity, n_q, batch).round().to(torch.int32).to(device)
    want = _fp32_oracle(reference.block_attention_ref, q, k_cache, v_cache, lengths)
    past = torch.arange(capacity, device=device)[None, :] >= lengths[:, None]
    k_cache[past], v_cache[past] = 1e3, -1e3
    got = flex.attend(q, k_cache, v_cache, flex.cache_mask(lengths, n_q, capacity))
    _assert_close(got, want, ATTENTION_TOL[dtype], f"flex block attention {dtype} over lengths {lengths.tolist()}")

    k, v = rand(1, capacity, h_kv, head_dim), rand(1, capacity, h_kv, head_dim)
    q = rand(1, capacity, h_q, head_dim)
    want = _fp32_oracle(reference.block_causal_attention_ref, q, k, v, block_size=block_size)
    got = flex.attend(q, k, v, flex.block_causal_mask(capacity, block_size, device))
    _assert_close(got, want, ATTENTION_TOL[dtype], f"flex block-causal prefill {dtype} block {block_size}")


def check_rotary(
    n_tokens: int, heads: int, head_dim: int, dtype: torch.dtype, device: str = "cpu", *, batch: int = 1,
    seed: int = 0, in_place: bool = False,
) -> None:  # fmt: skip
    """Triton rotary against the fp32 reference; the output buffer is poisoned (or is ``x``)."""
    from kernels.rotary import apply_rotary

    _triton(device)
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, n_tokens, heads, head_dim, generator=gen).to(dtype=dtype, device=device)
    angles = torch.rand(n_tokens, head_dim // 2, generator=gen).to(device) * 100.0
    cos, sin = angles.cos(), angles.sin()
    want = _fp32_oracle(apply_rotary, x, cos, sin, path="torch")
    out = x if in_place else torch.full_like(x, float("nan"))
    got = apply_rotary(x, cos, sin, out=out, path="triton")
    if got.data_ptr() != out.data_ptr():
        raise AssertionError("apply_rotary did not write into the given out buffer")
    _assert_close(got, want, ATTENTION_TOL[dtype], f"rotary {dtype}")


def check_add_rms_norm(rows: int, hidden: int, dtype: torch.dtype, device: str = "cpu", *, seed: int = 0) -> None:
    """Fused residual add + RMSNorm against the torch steps: the updated residual stream and the output."""
    from kernels.fused import add_rms_norm

    _triton(device)
    gen = torch.Generator().manual_seed(seed)
    x, delta = (torch.randn(rows, hidden, generator=gen).to(dtype=dtype, device=device) for _ in range(2))
    weight = (1.0 + torch.randn(hidden, generator=gen) * 0.1).to(dtype=dtype, device=device)
    x_ref = x.clone()
    want = add_rms_norm(x_ref, delta, weight, 1e-6, path="torch")
    got = add_rms_norm(x, delta, weight, 1e-6, path="triton")
    _assert_close(x, x_ref, ATTENTION_TOL[dtype], f"add_rms_norm residual {dtype}")
    _assert_close(got, want, ATTENTION_TOL[dtype], f"add_rms_norm output {dtype}")


def check_silu_mul(rows: int, inner: int, dtype: torch.dtype, device: str = "cpu", *, seed: int = 0) -> None:
    """SwiGLU's activation on a fused gate-up projection against ``silu(gate) * up``."""
    from kernels.fused import silu_mul

    _triton(device)
    gen = torch.Generator().manual_seed(seed)
    gate_up = (torch.randn(rows, 2 * inner, generator=gen) * 3.0).to(dtype=dtype, device=device)
    _assert_close(silu_mul(gate_up, path="triton"), silu_mul(gate_up, path="torch"), ATTENTION_TOL[dtype],
                  f"silu_mul {dtype}")  # fmt: skip


def _poisoned_caches(batch: int, capacity: int, kv_heads: int, head_dim: int, dtype: torch.dtype, device: str,
                     paths: tuple[str, str]) -> dict[str, list[torch.Tensor]]:  # fmt: skip
    """A NaN-filled K and V cache ``[batch, capacity, Hkv, D]`` for each of two ways of writing them."""
    return {p: [torch.full((batch, capacity, kv_heads, head_dim), float("nan"), dtype=dtype, device=device)
                for _ in range(2)] for p in paths}  # fmt: skip


def _assert_cache_writes(got: list[torch.Tensor], want: list[torch.Tensor], start: int, tokens: int,
                         dtype: torch.dtype, what: str) -> None:  # fmt: skip
    """The K and V caches ``got`` match ``want`` at positions ``start..start+tokens-1`` and still hold their NaN
    poison everywhere else."""
    written = slice(start, start + tokens)
    for name, cache, expected in zip(("k", "v"), got, want, strict=True):
        _assert_close(cache[:, written], expected[:, written], ATTENTION_TOL[dtype], f"{what} {name} cache")
        if not torch.cat([cache[:, :start], cache[:, start + tokens:]], 1).isnan().all():
            raise AssertionError(f"{what} wrote {name} cache slots outside positions {start}..{start + tokens - 1}")


def check_qk_norm_rope(
    tokens: int, heads: int, kv_heads: int, head_dim: int, capacity: int, dtype: torch.dtype, device: str = "cpu",
    *, batch: int = 1, start: int = 0, seed: int = 0, norm: bool = True,
) -> None:  # fmt: skip
    """Fused q/k norm (none without ``norm``) + RoPE + KV write against the torch steps. The caches are
    poisoned: the written slots must match, every other slot must still hold the poison."""
    from kernels.fused import qk_norm_rope

    _triton(device)
    gen = torch.Generator().manual_seed(seed)
    width = (heads + 2 * kv_heads) * head_dim
    qkv = torch.randn(batch, tokens, width, generator=gen).to(dtype=dtype, device=device)
    q_w, k_w = ((1.0 + torch.randn(head_dim, generator=gen) * 0.1).to(dtype=dtype, device=device) if norm else None
                for _ in range(2))  # fmt: skip
    angles = torch.rand(tokens, head_dim // 2, generator=gen).to(device) * 100.0
    positions = torch.arange(start, start + tokens, device=device)
    caches = _poisoned_caches(batch, capacity, kv_heads, head_dim, dtype, device, ("torch", "triton"))
    q = {p: qk_norm_rope(qkv, heads, kv_heads, q_w, k_w, 1e-6, angles.cos(), angles.sin(), positions, *caches[p],
                         path=p) for p in caches}  # fmt: skip
    _assert_close(q["triton"], q["torch"], ATTENTION_TOL[dtype], f"qk_norm_rope q {dtype}")
    _assert_cache_writes(caches["triton"], caches["torch"], start, tokens, dtype, f"qk_norm_rope {dtype}")


def check_qkv_rope(
    tokens: int, hidden: int, heads: int, kv_heads: int, head_dim: int, capacity: int, dtype: torch.dtype,
    device: str = "cpu", *, batch: int = 1, start: int = 0, seed: int = 0, qk_norm: bool = True,
    input_norm: bool = True, bias: bool = False, split_k: int | None = None,
) -> None:  # fmt: skip
    """The attention input in one launch (q/k/v product of the RMSNorm of the residual stream, q/k norm, RoPE,
    KV write) against the product then ``qk_norm_rope`` on the torch path. The caches are poisoned: the written
    slots must match, every other slot must still hold the poison."""
    from kernels.fused import qk_norm_rope
    from kernels.linear import linear, qkv_norm_rope

    _triton(device)
    gen = torch.Generator().manual_seed(seed)
    rand = _sampler(gen, dtype, device)

    width = (heads + 2 * kv_heads) * head_dim
    x, weight = rand(batch, tokens, hidden, scale=2.0), rand(width, hidden, scale=hidden**-0.5)
    norm = (rand(hidden, scale=0.1, offset=1.0), 1e-6) if input_norm else None
    qkv_bias = rand(width, scale=0.5) if bias else None
    q_w, k_w = (rand(head_dim, scale=0.1, offset=1.0) if qk_norm else None for _ in range(2))
    angles = torch.rand(tokens, head_dim // 2, generator=gen).to(device) * 100.0
    positions = torch.arange(start, start + tokens, device=device)
    caches = _poisoned_caches(batch, capacity, kv_heads, head_dim, dtype, device, ("fused", "steps"))
    rope = (heads, kv_heads, q_w, k_w, 1e-6, angles.cos(), angles.sin(), positions)
    want = qk_norm_rope(linear(x, weight, qkv_bias, path="torch", norm=norm), *rope, *caches["steps"], path="torch")
    got = qkv_norm_rope(x, weight, qkv_bias, norm, *rope, *caches["fused"], path="triton", split_k=split_k)
    what = f"qkv_rope {dtype} split_k={split_k}"
    _assert_close(got, want, ATTENTION_TOL[dtype], f"{what} q")
    _assert_cache_writes(caches["fused"], caches["steps"], start, tokens, dtype, what)
    _assert_counts_zero(device, what)


def check_pdl_chain(hidden: int, inner: int, dtype: torch.dtype, device: str = "cpu", *, repeats: int = 3,
                    seed: int = 0) -> None:  # fmt: skip
    """A layer's MLP half as the thin-product pass launches it under ``programmatic_launch``: the gate/up
    product of the residual stream's RMSNorm, the down product of their SwiGLU activation (K split past 2048)
    added to the residual stream, and the next product of its RMSNorm, each kernel waiting for the one before.
    Every intermediate buffer is poisoned before each repeat, so a kernel that read its input before the kernel
    writing it had finished would carry the poison to the output; the residual stream is read by the first
    product and rewritten by the second, so one that wrote it early would change the first's result."""
    import torch.nn.functional as F

    from kernels import thin_linear_triton
    from kernels.pdl import programmatic_launch

    _triton(device)
    gen = torch.Generator().manual_seed(seed)
    rand = _sampler(gen, dtype, device)

    rows, eps = 16, 1e-6
    x0 = rand(rows, hidden)
    norm_weight = rand(hidden, scale=0.1) + 1.0
    gate_up_weight, down_weight = rand(2 * inner, hidden, scale=hidden**-0.5), rand(hidden, inner, scale=inner**-0.5)
    next_weight = rand(hidden, hidden, scale=hidden**-0.5)

    def normed(x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, (hidden,), norm_weight, eps)

    x_want = x0 + F.linear(reference.silu_mul_ref(F.linear(normed(x0), gate_up_weight)), down_weight)
    want = F.linear(normed(x_want), next_weight)
    gate_up, out = (torch.empty(rows, n, dtype=dtype, device=device) for n in (2 * inner, hidden))
    tolerance = Tolerance(5e-2, 5e-2) if dtype != torch.float32 else Tolerance(1e-4, 1e-4)  # bf16/fp16 products
    for _ in range(repeats):
        x = x0.clone()
        for buffer in (gate_up, out):
            buffer.fill_(float("nan"))
        with programmatic_launch():
            thin_linear_triton.thin_linear(x, gate_up_weight, gate_up, norm_weight=norm_weight, eps=eps)
            thin_linear_triton.thin_linear(gate_up, down_weight, x, gated=True, add=True)
            thin_linear_triton.thin_linear(x, next_weight, out, norm_weight=norm_weight, eps=eps)
        _assert_close(x, x_want, tolerance, f"PDL chain residual {dtype}")
        _assert_close(out, want, tolerance, f"PDL chain {dtype}")


def check_pdl_attention_chain(hidden: int, heads: int, kv_heads: int, head_dim: int, prefix: int,
                              dtype: torch.dtype, device: str = "cpu", *, repeats: int = 3, seed: int = 0) -> None:  # fmt: skip
    """A layer's attention half as the thin-product pass launches it under ``programmatic_launch``: the q/k/v
    product of the residual stream's RMSNorm with q/k norm and RoPE, writing the block's K/V after a cached
    prefix; the one-launch block attention over prefix and block; the o product added to the residual stream.
    The block's cache rows and the attention output are poisoned before each repeat, so an attention that read
    the block's keys before the kernel writing them had finished (whatever it asked L2 for ahead of its wait),
    or an o product that read the attention early, would carry NaN to the output."""
    from kernels.block_attention import block_attention
    from kernels.linear import linear, qkv_norm_rope
    from kernels.pdl import programmatic_launch

    _triton(device)
    gen = torch.Generator().manual_seed(seed)
    rand = _sampler(gen, dtype, device)

    tokens, eps, width = 16, 1e-6, heads * head_dim
    x0 = rand(1, tokens, hidden, scale=2.0)
    qkv_weight = rand(width + 2 * kv_heads * head_dim, hidden, scale=hidden**-0.5)
    o_weight = rand(hidden, width, scale=width**-0.5)
    norm = (rand(hidden, scale=0.1, offset=1.0), eps)
    q_w, k_w = (rand(head_dim, scale=0.1, offset=1.0) for _ in range(2))
    angles = torch.rand(tokens, head_dim // 2, generator=gen).to(device) * 100.0
    positions = torch.arange(prefix, prefix + tokens, device=device)
    rope = (heads, kv_heads, q_w, k_w, eps, angles.cos(), angles.sin(), positions)
    cached = [rand(1, prefix + tokens, kv_heads, head_dim) for _ in range(2)]
    length = torch.tensor([prefix + tokens], dtype=torch.int32, device=device)

    def attention_half(path: str, caches: list[torch.Tensor], attended: torch.Tensor | None) -> torch.Tensor:
        x = x0.clone()
        q = qkv_norm_rope(x, qkv_weight, None, norm, *rope, *caches, path=path)
        a = block_attention(q, *caches, length, out=attended, path=path, one_launch=path == "triton")
        return linear(a.flatten(2), o_weight, path=path, add_to=x)

    want = attention_half("torch", [c.clone() for c in cached], None)
    for _ in range(repeats):
        caches = [c.clone() for c in cached]
        for cache in caches:
            cache[:, prefix:] = float("nan")
        attended = torch.full((1, tokens, heads, head_dim), float("nan"), dtype=dtype, device=device)
        with programmatic_launch():
            got = attention_half("triton", caches, attended)
        _assert_close(got, want, ATTENTION_TOL[dtype], f"PDL attention chain {dtype}")
    _assert_counts_zero(device, f"PDL attention chain {dtype}")
