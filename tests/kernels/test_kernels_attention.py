"""Block attention, block-causal prefill and rotary embeddings: Triton (interpreter) against fp32 references."""

import pytest
import torch

from kernels import apply_rotary, block_attention, block_causal_attention, reference
from kernels.selfcheck import check_block_attention, check_block_causal, check_rotary

pytest.importorskip("triton")

DTYPES = [torch.float32, torch.float16, torch.bfloat16]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    ("n_q", "h_q", "h_kv", "head_dim", "capacity", "cache_len", "splits"),
    [
        (16, 4, 2, 64, 200, 131, 3),  # GQA 2, cache length not a tile multiple, several splits
        (7, 2, 2, 32, 64, 0, 2),  # empty prefix: the block attends only itself
        (1, 8, 2, 16, 50, 50, 1),  # a single query, full cache, GQA 4
        (5, 4, 2, 16, 300, 290, 8),  # 5 cache splits + the block's: merged 4 at a time, the second group partial
    ],
)
@pytest.mark.parametrize("one_launch", [False, True], ids=["merge launch", "last split merges"])
def test_block_attention_with_block_kv(dtype, n_q, h_q, h_kv, head_dim, capacity, cache_len, splits, one_launch):
    check_block_attention(n_q, h_q, h_kv, head_dim, capacity, cache_len, dtype, splits=splits, seed=cache_len,
                          one_launch=one_launch)  # fmt: skip


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("one_launch", [False, True], ids=["merge launch", "last split merges"])
def test_block_attention_block_already_in_cache(dtype, one_launch):
    check_block_attention(16, 4, 1, 32, 96, 77, dtype, batch=2, with_block=False, tensor_len=True, splits=4,
                          one_launch=one_launch)  # fmt: skip


@pytest.mark.parametrize("one_launch", [False, True], ids=["merge launch", "last split merges"])
def test_block_attention_many_rows_use_several_tiles(one_launch):
    # 24 queries x group 4 = 96 rows: more than one 64-row tile per KV head (two tiles counted apart).
    check_block_attention(24, 8, 2, 16, 40, 33, torch.float32, splits=2, batch=2, one_launch=one_launch)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    ("n_q", "n_k", "h_q", "h_kv", "head_dim", "block_size"),
    [
        (45, 45, 4, 2, 32, 4),  # whole prompt, block 4, length not a tile multiple
        (20, 53, 2, 1, 64, 16),  # continuation of a cached prefix (q_offset 33)
        (37, 37, 2, 2, 16, 1),  # plain causal
    ],
)
@pytest.mark.parametrize("heavy_first", [False, True], ids=["row tiles in order", "heavy first"])
def test_block_causal_matches_reference(dtype, n_q, n_k, h_q, h_kv, head_dim, block_size, heavy_first):
    check_block_causal(n_q, n_k, h_q, h_kv, head_dim, block_size, dtype, block_m=16, block_n=16, seed=n_k,
                       heavy_first=heavy_first)  # fmt: skip


def test_block_causal_mask_semantics():
    mask = reference.block_causal_mask(4, 6, block_size=2, q_offset=2)
    # Queries at positions 2..5 are in blocks 1, 1, 2, 2: they see keys of blocks <= their own.
    assert mask.int().tolist() == [[1, 1, 1, 1, 0, 0]] * 2 + [[1, 1, 1, 1, 1, 1]] * 2


@pytest.mark.parametrize("path", ["torch", "triton"])
def test_block_causal_offset_on_the_device_over_a_longer_cache(path):
    """A graphed prefill's call: the offset a tensor, the keys the whole cache (stale rows after the queries'
    blocks must stay hidden); the same output as the int offset over exactly the keys so far."""
    gen = torch.Generator().manual_seed(4)
    q = torch.randn(1, 8, 4, 16, generator=gen)
    k, v = torch.randn(1, 40, 2, 16, generator=gen), torch.randn(1, 40, 2, 16, generator=gen)
    want = block_causal_attention(q, k[:, :20], v[:, :20], block_size=4, q_offset=12, path=path)
    got = block_causal_attention(q, k, v, block_size=4, q_offset=torch.tensor([12]), path=path)
    torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-4)
    with pytest.raises(ValueError, match="one integer"):
        block_causal_attention(q, k, v, block_size=4, q_offset=torch.tensor([12.0]), path=path)


def test_torch_path_equals_explicit_mask_sdpa():
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 10, 2, 16, generator=gen) for _ in range(3))
    got = block_causal_attention(q, k, v, block_size=4, path="torch")
    mask = torch.tensor([[j // 4 <= i // 4 for j in range(10)] for i in range(10)])
    want = torch.nn.functional.scaled_dot_product_attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=mask
    ).transpose(1, 2)
    torch.testing.assert_close(got, want)


def test_unbatched_inputs_and_out_buffer():
    gen = torch.Generator().manual_seed(2)
    q = torch.randn(5, 4, 16, generator=gen)
    kc, vc = torch.randn(30, 2, 16, generator=gen), torch.randn(30, 2, 16, generator=gen)
    kb, vb = torch.randn(5, 2, 16, generator=gen), torch.randn(5, 2, 16, generator=gen)
    want = block_attention(q, kc, vc, 21, kb, vb, path="torch")
    out = torch.full_like(q, float("nan"))
    got = block_attention(q, kc, vc, torch.tensor(21), kb, vb, out=out, path="triton")
    assert got.data_ptr() == out.data_ptr()
    torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-4)


def test_bad_inputs_are_rejected():
    q, k = torch.randn(4, 3, 16), torch.randn(10, 2, 16)
    with pytest.raises(ValueError, match="multiple of KV heads"):
        block_attention(q, k, k, 5)
    with pytest.raises(ValueError, match="no keys"):
        block_attention(torch.randn(4, 4, 16), k, k, 0)
    with pytest.raises(ValueError, match="capacity"):
        block_attention(torch.randn(4, 4, 16), k, k, 11, path="triton")
    with pytest.raises(ValueError, match="block_size"):
        block_causal_attention(torch.randn(4, 4, 16), k, k, block_size=0)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("n_tokens", "heads", "head_dim", "batch"), [(7, 3, 64, 1), (16, 8, 128, 2), (1, 1, 16, 3)])
def test_rotary_matches_reference(dtype, n_tokens, heads, head_dim, batch):
    check_rotary(n_tokens, heads, head_dim, dtype, batch=batch, seed=n_tokens)


def test_rotary_in_place_and_semantics():
    check_rotary(5, 2, 32, torch.float32, in_place=True)
    # Angle pi/2 on the first frequency maps (x1, x2) -> (-x2, x1); angle 0 is the identity.
    x = torch.tensor([[[1.0, 0.0, 2.0, 3.0]]])  # [T=1, H=1, D=4]
    angles = torch.tensor([[torch.pi / 2, 0.0]])
    got = apply_rotary(x, angles.cos(), angles.sin(), path="torch")
    torch.testing.assert_close(got, torch.tensor([[[-2.0, 0.0, 1.0, 3.0]]]), atol=1e-6, rtol=0)
