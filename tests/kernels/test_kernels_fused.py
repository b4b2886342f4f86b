"""Fused layer steps (residual + RMSNorm, SwiGLU activation, q/k norm + RoPE + KV write): Triton in the
interpreter against the torch steps they replace."""

import pytest
import torch

from kernels.fused import add_rms_norm, qk_norm_rope, silu_mul
from kernels.selfcheck import check_add_rms_norm, check_qk_norm_rope, check_silu_mul

pytest.importorskip("triton")

DTYPES = [torch.float32, torch.float16, torch.bfloat16]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    ("rows", "hidden"), [(16, 64), (3, 100), (1, 1000)]
)  # widths off the power of two too
def test_add_rms_norm(dtype, rows, hidden):
    check_add_rms_norm(rows, hidden, dtype, seed=rows)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("rows", "inner"), [(16, 96), (5, 3000)])  # 3000: more than one column tile
def test_silu_mul(dtype, rows, inner):
    check_silu_mul(rows, inner, dtype, seed=inner)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    ("tokens", "heads", "kv_heads", "head_dim", "capacity", "batch", "start"),
    [
        (16, 4, 2, 32, 40, 1, 8),  # a block written mid-cache
        (5, 6, 2, 24, 9, 2, 4),  # head dim off the power of two, batch 2, block at the cache's end
        (12, 2, 2, 16, 12, 1, 0),  # a prefill filling the whole cache
    ],
)
def test_qk_norm_rope(dtype, tokens, heads, kv_heads, head_dim, capacity, batch, start):
    check_qk_norm_rope(
        tokens, heads, kv_heads, head_dim, capacity, dtype, batch=batch, start=start, seed=tokens
    )


@pytest.mark.parametrize("dtype", DTYPES)
def test_rope_without_norm_for_qwen2_style_layers(dtype):
    check_qk_norm_rope(9, 4, 2, 32, 24, dtype, batch=2, start=7, seed=5, norm=False)


def test_bad_shapes_are_refused_with_the_shapes_named():
    x = torch.zeros(2, 8)
    with pytest.raises(ValueError, match="add_rms_norm"):
        add_rms_norm(x, torch.zeros(2, 4), torch.ones(8), 1e-6)
    with pytest.raises(ValueError, match="must be even"):
        silu_mul(torch.zeros(2, 7))
    cache = torch.zeros(1, 8, 1, 4)
    with pytest.raises(ValueError, match="both q and k norm weights, or neither"):
        qk_norm_rope(torch.zeros(1, 2, 12), 1, 1, torch.ones(4), None, 1e-6, torch.ones(2, 2),
                     torch.ones(2, 2), torch.arange(2), cache, cache)  # fmt: skip
    with pytest.raises(ValueError, match="width 10"):
        qk_norm_rope(torch.zeros(1, 2, 10), 1, 1, torch.ones(4), torch.ones(4), 1e-6, torch.ones(2, 2),
                     torch.ones(2, 2), torch.arange(2), cache, cache)  # fmt: skip
