"""What the public kernel wrappers take that a kernel cannot read as given: strided views are made dense first,
a head size the one-launch kernel cannot span takes the two-step path, and shapes that do not fit are refused
naming them (each had been read wrongly on the Triton path, silently, where the torch path raised or was right)."""

import pytest
import torch
import torch.nn.functional as F

from kernels import apply_rotary, block_attention
from kernels.fused import qk_norm_rope
from kernels.linear import linear, qkv_norm_rope

pytest.importorskip("triton")


def randn(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def caches(heads: int, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.zeros(1, 8, heads, dim), torch.zeros(1, 8, heads, dim)


def test_a_strided_bias_is_added_as_its_values_not_its_memory():
    x, weight, bias = randn(3, 40), randn(24, 40, seed=1) * 0.1, randn(48, seed=2)[::2]
    torch.testing.assert_close(linear(x, weight, bias, path="triton"), F.linear(x, weight, bias))
    heads, kv_heads, dim, tokens = 2, 1, 16, 3
    width = (heads + 2 * kv_heads) * dim
    x, weight, bias = randn(1, tokens, 32), randn(width, 32, seed=1) * 0.2, randn(2 * width, seed=2)[::2]
    angles = torch.rand(tokens, dim // 2, generator=torch.Generator().manual_seed(3)) * 10
    q = {path: qkv_norm_rope(x, weight, bias, None, heads, kv_heads, None, None, 1e-6, angles.cos(), angles.sin(),
                             torch.arange(tokens), *caches(kv_heads, dim), path=path)
         for path in ("triton", "torch")}  # fmt: skip
    torch.testing.assert_close(q["triton"], q["torch"])


def test_rotary_into_a_strided_out_or_in_place_over_a_strided_x():
    x, angles = randn(1, 3, 2, 16), torch.rand(3, 8, generator=torch.Generator().manual_seed(1)) * 10
    want = apply_rotary(x, angles.cos(), angles.sin(), path="torch")
    out = torch.zeros(1, 3, 16, 2).transpose(2, 3)  # last dim strided
    apply_rotary(x, angles.cos(), angles.sin(), out=out, path="triton")
    torch.testing.assert_close(out, want)
    strided = x.transpose(2, 3).contiguous().transpose(2, 3)  # x's values, its last dim strided
    apply_rotary(strided, angles.cos(), angles.sin(), out=strided, path="triton")
    torch.testing.assert_close(strided, want)


def test_a_head_size_one_launch_cannot_span_takes_the_two_steps():
    heads, kv_heads, dim, tokens = 2, 1, 24, 3  # 24: not a power of two
    width = (heads + 2 * kv_heads) * dim
    x, weight = randn(1, tokens, 32), randn(width, 32, seed=1) * 0.2
    norms = randn(dim, seed=2).abs(), randn(dim, seed=3).abs()
    angles = torch.rand(tokens, dim // 2, generator=torch.Generator().manual_seed(4)) * 10
    q = {path: qkv_norm_rope(x, weight, None, None, heads, kv_heads, *norms, 1e-6, angles.cos(), angles.sin(),
                             torch.arange(tokens), *caches(kv_heads, dim), path=path)
         for path in ("triton", "torch")}  # fmt: skip
    torch.testing.assert_close(q["triton"], q["torch"])


@pytest.mark.parametrize("path", ["triton", "torch"])
def test_shapes_the_kernels_would_misread_are_refused(path: str):
    q, k_cache, v_cache = randn(1, 2, 4, 16), randn(1, 10, 2, 16), randn(1, 10, 2, 16)
    k_block = v_block = randn(1, 3, 4, 16)  # 4 KV heads against the cache's 2
    with pytest.raises(ValueError, match="block K/V heads x dim"):
        block_attention(q, k_cache, v_cache, 5, k_block, v_block, path=path)
    heads, kv_heads, dim, tokens = 2, 1, 16, 3
    qkv, angles = randn(1, tokens, (heads + 2 * kv_heads) * dim), torch.rand(tokens, dim // 2)
    wide = randn(2 * dim), randn(2 * dim)  # norm weights twice the head size
    with pytest.raises(ValueError, match=r"q/k norm weights must be \[16\]"):
        qk_norm_rope(qkv, heads, kv_heads, *wide, 1e-6, angles.cos(), angles.sin(), torch.arange(tokens),
                     *caches(kv_heads, dim), path=path)
