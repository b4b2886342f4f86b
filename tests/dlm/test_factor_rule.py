"""The factor rule (Fast-dLLM's parallel decoding rule), the default effort's: how many tokens a pass commits."""

import json

import pytest
import torch

from dlm.checkpoint import load_config, load_model
from dlm.decoding import DecodeParams, dream
from dlm.decoding.block_causal import BlockPolicy
from dlm.decoding.confidence import by_factor, factor_bar
from dlm.effort import Knobs, resolve
from dlm.engine import Engine
from tests.conftest import FIXTURES

EVERY = torch.ones(5, dtype=torch.bool)


def reference_factor(conf: list[float], candidates: list[bool], factor: float) -> set[int]:
    """The rule as the Fast-dLLM paper states it, one rank at a time: take the next most confident while
    (n + 1) * (1 - its confidence) < factor; the first always."""
    ranked = sorted((i for i, ok in enumerate(candidates) if ok), key=lambda i: -conf[i])
    taken = ranked[:1]
    for n, i in enumerate(ranked[1:], start=2):
        if (n + 1) * (1 - conf[i]) >= factor:
            break
        taken.append(i)
    return set(taken)


def chosen(conf: list[float], factor: float, candidates: torch.Tensor = EVERY) -> set[int]:
    return set(by_factor(torch.tensor(conf), candidates, factor).nonzero()[:, 0].tolist())


def test_the_bar_rises_with_each_extra_token():
    # at factor 1: the 2nd token needs 0.67 (0.7 passes), the 3rd 0.75 (0.7 fails) and the run stops there
    assert chosen([0.95, 0.6, 0.7, 0.3, 0.9], factor=1.0) == {0, 4}
    assert [round(factor_bar(n, 1.0), 3) for n in (1, 2, 3, 7)] == [0.5, 0.667, 0.75, 0.875]


def test_the_run_stops_at_the_first_miss_and_keeps_at_least_one():
    # by rank: 0.99, 0.8 (clears 0.67), 0.74 (misses 0.75): the run stops there, 0.7 is never tried
    assert chosen([0.7, 0.74, 0.99, 0.8, 0.1], factor=1.0) == {2, 3}
    assert chosen([0.2, 0.1, 0.3, 0.05, 0.0], factor=1.0) == {2}  # nobody clears a bar: the best alone
    assert chosen([1.0] * 5, factor=0.1) == {0, 1, 2, 3, 4}  # certain tokens all go at any factor
    assert chosen([0.3, 0.5, 0.5, 0.1, 0.5], factor=1.0) == {1}  # a tie at the cut: the lowest position, as argmax


def test_only_candidates_are_chosen():
    candidates = torch.tensor([True, False, True, True, False])
    assert chosen([0.99, 1.0, 0.3, 0.98, 1.0], 1.0, candidates) == {0, 3}


@pytest.mark.parametrize("factor", [0.5, 0.8, 1.0, 2.0])
def test_matches_the_papers_rank_by_rank_rule_on_random_confidences(factor):
    gen = torch.Generator().manual_seed(int(factor * 10))
    for _ in range(200):
        n = int(torch.randint(1, 17, (1,), generator=gen))
        conf = torch.rand(n, generator=gen) ** 0.3  # skewed towards sure, as a trained model's are
        candidates = torch.rand(n, generator=gen) < 0.8
        candidates[int(torch.randint(0, n, (1,), generator=gen))] = True
        got = by_factor(conf, candidates, factor).nonzero()[:, 0].tolist()
        assert set(got) == reference_factor(conf.tolist(), candidates.tolist(), factor)


def test_efforts_resolve_to_the_factor_rule_and_raw_knobs_override_it(fixtures_dir):
    tiny = load_config(fixtures_dir / "sdar" / "checkpoint")
    medium = resolve(tiny, Knobs(), frozenset())
    assert (medium.threshold, medium.factor) == (None, 0.3)
    low, high = (resolve(tiny, Knobs(effort=e), frozenset()) for e in ("low", "high"))
    assert (low.factor, high.factor, high.passes_per_block) == (1.5, None, tiny.block_size)
    assert medium.bar(1) == pytest.approx(0.85) and medium.bar(3) == pytest.approx(0.925)  # constrained spans' bars
    explicit = resolve(tiny, Knobs(threshold=0.5), frozenset())
    assert (explicit.threshold, explicit.factor, explicit.bar(5)) == (0.5, None, 0.5)
    fixed = resolve(tiny, Knobs(passes_per_block=2), frozenset())
    assert (fixed.factor, fixed.bar(2)) == (None, float("inf"))
    assert resolve(tiny, Knobs(factor=2.0), frozenset()).factor == 2.0
    with pytest.raises(ValueError, match="not several"):
        resolve(tiny, Knobs(threshold=0.9, factor=1.0), frozenset())
    with pytest.raises(ValueError, match="factor must be positive"):
        resolve(tiny, Knobs(factor=-1.0), frozenset())
    with pytest.raises(ValueError, match="threshold or a factor"):
        BlockPolicy(block_size=4, threshold=0.9, factor=1.0)
    with pytest.raises(ValueError, match="factor must be positive"):
        BlockPolicy(block_size=4, threshold=None, factor=0.0)


def test_the_engine_decodes_by_it_between_one_token_and_a_whole_block_per_pass(fixtures_dir):
    """On a real (tiny random) SDAR checkpoint: a factor no confidence can clear decodes exactly as one token
    per pass does, one every bar is below decodes each block in one pass, and 1.0 lies between. In position
    order a pass stops before a token that repeats its neighbour (`confidence.without_parallel_repeats`), which
    this random model writes often, so the whole-block end is taken in confidence order."""
    engine = Engine.from_dir(fixtures_dir / "sdar" / "checkpoint")
    try:
        prompt, n = [5, 17, 42, 99, 123, 200, 7], 24
        strict, mid = (engine.generate(prompt, max_new_tokens=n, factor=f) for f in (1e-6, 1.0))
        loose = engine.generate(prompt, max_new_tokens=n, factor=50.0, in_order=False)
        loose_in_order = engine.generate(prompt, max_new_tokens=n, factor=50.0)
        one_per_pass = engine.generate(prompt, max_new_tokens=n, effort="high")
        one_pass_per_block = engine.generate(prompt, max_new_tokens=n, passes_per_block=1)
    finally:
        engine.close()
    assert strict.token_ids == one_per_pass.token_ids and strict.forward_passes == one_per_pass.forward_passes
    assert loose.token_ids == one_pass_per_block.token_ids
    assert loose.forward_passes == one_pass_per_block.forward_passes < loose_in_order.forward_passes
    assert loose.forward_passes < mid.forward_passes
    assert mid.forward_passes <= strict.forward_passes


def test_bidirectional_families_decode_by_the_factor_rule_too(fixtures_dir):
    reference = json.loads((FIXTURES / "dream" / "reference.json").read_text())
    model = load_model(fixtures_dir / "dream" / "checkpoint")
    prompt = reference["generation"][0]["prompt_ids"]
    passes = {}
    for factor in (0.1, 50.0):
        params = DecodeParams(max_new_tokens=16, block_size=8, threshold=None, factor=factor)
        commits = list(dream.stream_generate(model, prompt, params, 313))
        tokens = [t for c in commits for t in c.token_ids]
        assert len(tokens) == 16 and 313 not in tokens and commits[-1].finished
        passes[factor] = commits[-1].forward_passes
    # factor 50 clears every bar (1 - 50 / (n + 1) < 0): one pass per block after its refresh; 0.1 almost none
    assert passes[50.0] < passes[0.1]
    with pytest.raises(ValueError, match="factor must be positive"):
        list(dream.stream_generate(model, prompt, DecodeParams(threshold=None, factor=0.0), 313))
