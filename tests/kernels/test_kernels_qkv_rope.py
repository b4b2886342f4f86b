"""The attention input in one launch (Triton, interpreted) against the q/k/v product then ``qk_norm_rope``:
split and unsplit K, with and without each norm and a bias, batches, cache offsets, dtypes."""

import pytest
import torch

from kernels import selfcheck

pytest.importorskip("triton")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(("case", "options"), [
    ("Qwen3 layer, K split", {"split_k": 3}),
    ("unsplit", {"split_k": 1}),
    ("Qwen2 layer: bias, no q/k norm", {"qk_norm": False, "bias": True, "split_k": 2}),
    ("no input norm", {"input_norm": False}),
    ("two blocks of 5 tokens, late in the cache", {"batch": 2, "start": 40}),
])  # fmt: skip
def test_the_fused_attention_input_matches_the_product_and_the_torch_steps(dtype, case, options):
    tokens = 5 if options.get("batch", 1) > 1 else 16
    selfcheck.check_qkv_rope(tokens, 96, 4, 2, 16, 64, dtype, **options)


def test_the_split_counts_are_left_at_zero_for_the_next_launch():
    for seed in range(2):  # the second launch reuses the counts the first one used (each check asserts them zero)
        selfcheck.check_qkv_rope(16, 96, 4, 2, 16, 32, torch.float32, seed=seed, split_k=3)
