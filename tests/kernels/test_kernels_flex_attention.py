"""FlexAttention's forms of the block attention and the block-causal prefill against the fp32 references (eager on
the CPU: the masks are what is checked here; the GPU check compiles and times them)."""

import pytest
import torch

from kernels.selfcheck import check_flex_attention


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize(
    ("n_q", "h_q", "h_kv", "head_dim", "capacity", "block_size"),
    [
        (16, 4, 2, 32, 70, 16),  # GQA 2; lengths 70 and 16, neither a multiple of the mask's 128-key tiles
        (5, 8, 2, 16, 300, 4),  # GQA 4, three key tiles, a short block
        (1, 2, 2, 64, 33, 8),  # one query (lengths 33 and 1), no GQA
    ],
)
def test_flex_attention_matches_the_references(dtype, n_q, h_q, h_kv, head_dim, capacity, block_size):
    check_flex_attention(n_q, h_q, h_kv, head_dim, capacity, block_size, dtype, seed=capacity)


def test_a_key_past_the_length_changes_nothing_and_one_inside_does():
    from kernels import flex_attention as flex

    q, k, v = torch.randn(1, 4, 2, 16), torch.randn(1, 40, 2, 16), torch.randn(1, 40, 2, 16)
    lengths = torch.tensor([30])
    before = flex.attend(q, k, v, flex.cache_mask(lengths, 4, 40))
    v[:, 30:] += 100.0
    assert torch.equal(flex.attend(q, k, v, flex.cache_mask(lengths, 4, 40)), before)
    v[:, 29] += 100.0
    assert not torch.allclose(flex.attend(q, k, v, flex.cache_mask(lengths, 4, 40)), before)
