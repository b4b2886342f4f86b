"""Fused confidence selection: Triton (interpreter) against the torch reference, and the reference's own semantics."""

import pytest
import torch

from kernels import confidence_and_token, reference, select_confident
from kernels.selfcheck import check_confidence

pytest.importorskip("triton")

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
# the default streaming stage, its per-lane variants and its software-pipelined loop (candidates the GPU check's
# sweep times)
ACCUMULATION = pytest.mark.parametrize("accumulation", [{"lanewise": False}, {"lanewise": True},
                                                        {"lanewise": True, "lane_max": True},
                                                        {"lanewise": True, "lane_max": True, "stages": 3},
                                                        {"lanewise": False, "stages": 3}],
                                       ids=["tiles", "lanes", "lanes-max", "lanes-max, pipelined",
                                            "tiles, pipelined"])


@ACCUMULATION
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    ("n", "vocab", "block_v", "splits"),
    [(1, 300, 128, 1), (7, 1000, 256, 3), (16, 2000, 512, 2), (5, 1031, 128, 4)],
)
def test_greedy_matches_reference(dtype, n, vocab, block_v, splits, accumulation):
    check_confidence(n, vocab, dtype, block_v=block_v, splits=splits, seed=n * vocab, **accumulation)


@ACCUMULATION
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_ties_go_to_lowest_index(dtype, accumulation):
    check_confidence(7, 1000, dtype, ties=True, block_v=128, splits=3, masked_fraction=1.0, seed=3, **accumulation)


@ACCUMULATION
def test_ties_within_one_lane_go_to_the_earlier_tile(accumulation):
    """Two maxima 128 apart share a lane when tiles are 128 wide: the earlier one must still win."""
    from kernels import confidence_triton

    logits = torch.randn(1, 3, 1000, generator=torch.Generator().manual_seed(0))
    logits[0, :, 130] = logits[0, :, 258] = 50.0
    masked = torch.ones(1, 3, dtype=torch.bool)
    _, token, _ = confidence_triton.confidence_select(logits, masked, None, 0.0, 0.0, None, block_v=128, splits=1,
                                                      **accumulation)  # fmt: skip
    assert token.tolist() == [[130, 130, 130]]


@ACCUMULATION
@pytest.mark.parametrize("temperature", [0.5, 1.3])
def test_gumbel_sample_matches_reference(temperature, accumulation):
    check_confidence(7, 1000, torch.float32, temperature=temperature, block_v=256, splits=2, seed=11, **accumulation)


@ACCUMULATION
@pytest.mark.parametrize("masked_fraction", [0.0, 1.0])
def test_all_or_no_positions_masked(masked_fraction, accumulation):
    check_confidence(16, 700, torch.float16, masked_fraction=masked_fraction, block_v=256, splits=2, seed=5,
                     **accumulation)  # fmt: skip


@ACCUMULATION
def test_fallback_commits_most_confident_per_block(accumulation):
    check_confidence(7, 500, torch.float32, batch=3, force_fallback=True, block_v=128, splits=2, seed=7,
                     **accumulation)  # fmt: skip


@ACCUMULATION
def test_maxima_that_rise_tile_after_tile_rescale_the_sums(accumulation):
    """Ascending logits raise every lane's max at every tile (the rescaling path each time), over a range wide
    enough that an unrescaled sum would overflow; a row of -inf but one logit, and -inf lanes beside it."""
    from kernels import confidence_triton

    gen = torch.Generator().manual_seed(4)
    logits = torch.linspace(-80.0, 80.0, 1000).repeat(3, 1) + torch.rand(3, 1000, generator=gen)
    logits[1] = float("-inf")
    logits[1, 777] = 3.0
    logits[2, 500:] = float("-inf")
    masked = torch.ones(1, 3, dtype=torch.bool)
    conf, token, _ = confidence_triton.confidence_select(logits[None], masked, None, 0.0, 0.0, None, block_v=128,
                                                         splits=2, **accumulation)  # fmt: skip
    conf_r, token_r = reference.confidence_and_token_ref(logits[None], masked=masked)
    assert torch.equal(token, token_r) and token[0, 1] == 777
    torch.testing.assert_close(conf, conf_r, rtol=1e-5, atol=1e-6)


def test_batched_blocks():
    check_confidence(16, 600, torch.bfloat16, batch=2, block_v=256, splits=3, seed=9)


def test_public_api_paths_agree():
    gen = torch.Generator().manual_seed(1)
    logits = torch.randn(7, 900, generator=gen) * 3
    masked = torch.tensor([True, False, True, True, False, True, True])
    results = {}
    for path in ("triton", "torch"):
        ids, m = torch.full((7,), 42, dtype=torch.int64), masked.clone()
        out_ids, out_m, count = select_confident(logits, m, ids, 0.2, temperature=0.7, generator_seed=5, path=path)
        assert out_ids is ids and out_m is m and count.dim() == 0
        results[path] = (ids, m, count)
    assert all(torch.equal(a, b) for a, b in zip(results["triton"], results["torch"], strict=True))
    conf_t, tok_t = confidence_and_token(logits, masked=masked, path="triton")
    conf_r, tok_r = confidence_and_token(logits, masked=masked, path="torch")
    assert torch.equal(tok_t, tok_r)
    torch.testing.assert_close(conf_t, conf_r)


def test_a_row_with_no_finite_logit_has_no_confidence_on_either_path():
    logits = torch.randn(3, 40, generator=torch.Generator().manual_seed(0)) * 0.01
    logits[0] = float("-inf")
    for path in ("triton", "torch"):
        masked, ids = torch.ones(3, dtype=torch.bool), torch.zeros(3, dtype=torch.int64)
        select_confident(logits, masked, ids, 0.9, path=path)
        assert masked.tolist() == [True, False, True], path  # the fallback commits a row that has a confidence
        assert confidence_and_token(logits, path=path)[0][0] == 0, path


def test_reference_commit_semantics():
    # Position 1 is unmasked (its high confidence must be ignored); 0 and 3 pass 0.5.
    conf = torch.tensor([0.6, 0.99, 0.2, 0.7])
    token = torch.tensor([10, 11, 12, 13])
    masked = torch.tensor([True, False, True, True])
    ids = torch.tensor([-5, 77, -5, -5])
    conf = torch.where(masked, conf, torch.tensor(float("-inf")))
    _, _, count = reference.commit_ref(conf, token, masked, ids, 0.5)
    assert ids.tolist() == [10, 77, -5, 13] and masked.tolist() == [False, False, True, False] and int(count) == 2
    # Nothing passes 0.95: only the most confident masked position (2 ties with 3 -> lowest) is committed.
    conf2 = torch.tensor([float("-inf"), float("-inf"), 0.3, 0.3])
    masked2, ids2 = torch.tensor([False, False, True, True]), torch.tensor([1, 2, -5, -5])
    _, _, count2 = reference.commit_ref(conf2, token, masked2, ids2, 0.95)
    assert ids2.tolist() == [1, 2, 12, -5] and masked2.tolist() == [False, False, False, True] and int(count2) == 1
    # Nothing masked: nothing changes.
    masked3, ids3 = torch.zeros(4, dtype=torch.bool), torch.arange(4)
    _, _, count3 = reference.commit_ref(torch.full((4,), float("-inf")), token, masked3, ids3, 0.0)
    assert ids3.tolist() == [0, 1, 2, 3] and int(count3) == 0


def test_reference_confidence_is_softmax_probability_of_the_token():
    logits = torch.tensor([[0.0, 2.0, 2.0, -1.0]])
    conf, token = reference.confidence_and_token_ref(logits)
    assert token.tolist() == [1]
    torch.testing.assert_close(conf, torch.softmax(logits, -1)[:, 1])
    # A seeded sample is reproducible and follows the Gumbel-max law of logits / T.
    wide = torch.log(torch.tensor([[0.7, 0.2, 0.1]])).expand(3000, 3).contiguous()
    _, draws = reference.confidence_and_token_ref(wide, temperature=1.0, seed=123)
    _, again = reference.confidence_and_token_ref(wide, temperature=1.0, seed=123)
    assert torch.equal(draws, again)
    freq = torch.bincount(draws, minlength=3).float() / 3000
    torch.testing.assert_close(freq, torch.tensor([0.7, 0.2, 0.1]), atol=0.03, rtol=0)


def test_bad_inputs_are_rejected():
    logits = torch.randn(4, 50)
    ok_mask, ok_ids = torch.ones(4, dtype=torch.bool), torch.zeros(4, dtype=torch.int64)
    with pytest.raises(ValueError, match="masked must be a bool"):
        select_confident(logits, ok_mask.int(), ok_ids, 0.9)
    with pytest.raises(ValueError, match="ids must be an int64"):
        select_confident(logits, ok_mask, ok_ids[:3], 0.9)
    with pytest.raises(ValueError, match="logits must be"):
        select_confident(logits.long(), ok_mask, ok_ids, 0.9)
    with pytest.raises(ValueError, match="temperature"):
        select_confident(logits, ok_mask, ok_ids, 0.9, temperature=-1.0)


@pytest.mark.parametrize("path", ["triton", "torch"])
def test_strict_threshold_leaves_a_tie_at_the_threshold_masked(path):
    """``strict`` commits only confidences above the threshold (Fast-dLLM v2 and the product decoder)."""
    gen = torch.Generator().manual_seed(21)
    logits = (torch.randn(2, 9, 700, generator=gen) * 3).to(torch.bfloat16)
    masked = torch.rand(2, 9, generator=gen) < 0.7
    masked[:, :3] = True
    conf, token = confidence_and_token(logits, masked=masked, path=path)
    # Each block's threshold is exactly its third most confident masked position's confidence.
    third = conf.topk(3, dim=-1)
    threshold = float(third.values[0, 2])
    for strict in (False, True):
        ids, m = torch.full((2, 9), -7, dtype=torch.int64), masked.clone()
        _, _, count = select_confident(logits, m, ids, threshold, strict=strict, path=path)
        passes = masked & ((conf > threshold) if strict else (conf >= threshold))
        none = ~passes.any(-1)
        passes[none, conf[none].argmax(-1)] = True
        passes &= masked
        assert torch.equal(~m & masked, passes) and torch.equal(count, passes.sum(-1))
        assert torch.equal(ids[passes], token[passes]) and bool((ids[~passes] == -7).all())
        assert bool(passes[0, third.indices[0, 2]]) is not strict


@pytest.mark.parametrize("splits", [1, 3])
def test_tempered_confidence_is_the_probability_under_the_sampled_distribution(splits):
    from kernels import confidence_triton

    gen = torch.Generator().manual_seed(4)
    logits = torch.randn(1, 7, 1000, generator=gen) * 3
    masked = torch.tensor([[True, True, False, True, True, True, False]])
    temperature, seed = 0.6, 99
    conf_r, tok_r = reference.confidence_and_token_ref(logits, temperature, seed, masked, tempered=True)
    out = (torch.full((1, 7), float("nan")), torch.full((1, 7), -(2**40), dtype=torch.int64))
    conf_k, tok_k, _ = confidence_triton.confidence_select(
        logits, masked, None, 0.0, temperature, torch.tensor([seed]), out=out, block_v=128, splits=splits,
        tempered=True,
    )
    assert torch.equal(tok_k, tok_r)
    torch.testing.assert_close(conf_k[masked], conf_r[masked], atol=1e-6, rtol=1e-4)
    want = torch.softmax(logits / temperature, -1).gather(-1, tok_r.clamp(min=0)[..., None])[..., 0]
    torch.testing.assert_close(conf_r[masked], want[masked])
    untempered, _ = reference.confidence_and_token_ref(logits, temperature, seed, masked)
    assert not torch.allclose(untempered[masked], conf_r[masked])
    # Committing on the tempered confidence: the kernel and the reference pick the same positions.
    results = {}
    for path in ("triton", "torch"):
        ids, m = torch.zeros(1, 7, dtype=torch.int64), masked.clone()
        select_confident(logits, m, ids, 0.3, temperature, seed, strict=True, tempered=True, path=path)
        results[path] = (ids, m)
    assert all(torch.equal(a, b) for a, b in zip(results["triton"], results["torch"], strict=True))
