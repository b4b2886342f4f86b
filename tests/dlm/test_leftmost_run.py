"""Committing left to right: each pass takes a run of the leftmost masked positions its rule allows."""

import pytest
import torch

from dlm.checkpoint import load_config, load_model
from dlm.decoding.block_causal import BlockPolicy, CachedForward, decode
from dlm.decoding.confidence import by_factor, factor_bar, leftmost_run, without_parallel_repeats
from dlm.effort import Knobs, resolve
from dlm.kv_cache import KVCache


def run_of(conf: list[float], candidates: list[bool] | None = None, threshold: float | None = None,
           factor: float | None = None, count: int | None = None) -> list[int]:
    mask = torch.tensor(candidates if candidates is not None else [True] * len(conf))
    return leftmost_run(torch.tensor(conf), mask, threshold, factor, count).nonzero()[:, 0].tolist()


def reference_run(conf: list[float], candidates: list[bool], bar) -> list[int]:
    """The rule one candidate at a time, left to right: each while it clears its bar, and the first always."""
    ranked = [i for i, ok in enumerate(candidates) if ok]
    taken = []
    for k, i in enumerate(ranked, start=1):
        if not conf[i] > bar(k):
            break
        taken.append(i)
    return taken or ranked[:1]


def test_the_factor_rule_in_position_order_stops_at_the_first_miss():
    conf = [0.95, 0.6, 0.99, 0.3]
    # rank 2 needs 0.67 at factor 1: 0.6 misses, so the sure 0.99 after it waits for the next pass
    assert run_of(conf, factor=1.0) == [0]
    assert sorted(by_factor(torch.tensor(conf), torch.ones(4, dtype=torch.bool), 1.0).nonzero()[:, 0].tolist()) == [0, 2]
    assert run_of([0.9, 0.8, 0.99, 0.3], factor=1.0) == [0, 1, 2]


def test_the_leftmost_candidate_always_commits_and_others_are_skipped():
    assert run_of([0.1, 0.99, 0.99], threshold=0.9) == [0]  # unsure, but the leftmost goes anyway
    # already decoded positions (not candidates) neither break the run nor count as a rank
    assert run_of([0.0, 0.95, 1.0, 0.92, 0.5], [False, True, False, True, True], threshold=0.9) == [1, 3]
    assert run_of([0.2, 0.9, 0.9, 0.9], count=2) == [0, 1]  # a fixed share: the leftmost ones


def test_a_run_stops_before_a_token_that_repeats_its_neighbour_in_the_same_pass():
    def cut(picked: list[int], run: list[bool]) -> list[bool]:
        return without_parallel_repeats(torch.tensor(picked), torch.tensor(run)).tolist()

    assert cut([5, 9, 9, 7], [True, True, True, True]) == [True, True, False, False]  # "plus" "plus": one now
    assert cut([9, 9], [True, False]) == [True, False]  # the leftmost always commits
    assert cut([5, 7, 7], [True, True, False]) == [True, True, False]  # a repeat outside the run is no matter
    assert cut([5, 7, 5, 7], [True] * 4) == [True] * 4  # only neighbours


@pytest.mark.parametrize("factor", [0.5, 0.8, 1.5])
def test_matches_the_rule_taken_one_candidate_at_a_time(factor):
    gen = torch.Generator().manual_seed(int(factor * 10))
    for _ in range(200):
        n = int(torch.randint(1, 17, (1,), generator=gen))
        conf = torch.rand(n, generator=gen) ** 0.3
        candidates = torch.rand(n, generator=gen) < 0.8
        candidates[int(torch.randint(0, n, (1,), generator=gen))] = True
        want = reference_run(conf.tolist(), candidates.tolist(), lambda k: factor_bar(k, factor))
        assert run_of(conf.tolist(), candidates.tolist(), factor=factor) == want


def test_efforts_decode_in_order_unless_told_not_to(fixtures_dir):
    tiny = load_config(fixtures_dir / "sdar" / "checkpoint")
    assert all(resolve(tiny, Knobs(effort=e), frozenset()).in_order for e in ("low", "medium", "high"))
    assert not resolve(tiny, Knobs(in_order=False), frozenset()).in_order


@pytest.mark.parametrize("in_order", [True, False])
def test_in_order_every_pass_streams_a_token(fixtures_dir, in_order):
    """On a real (tiny random) SDAR checkpoint: in order, the leftmost masked position commits every pass, so
    each pass streams at least one token; by confidence a pass may commit only later positions, which wait."""
    model = load_model(fixtures_dir / "sdar" / "checkpoint")
    prompt = [5, 17, 42, 99, 123, 200, 7]
    policy = BlockPolicy(block_size=4, threshold=None, factor=1.0, in_order=in_order, max_new_tokens=24)
    forward = CachedForward(model, KVCache(model.cfg, 64))
    forward.extend(prompt[:4], 4)
    with torch.no_grad():
        commits = list(decode(model.cfg, forward, list(prompt), policy))
    streamed = [len(c.token_ids) for c in commits if not c.finished]
    assert sum(len(c.token_ids) for c in commits) == 24
    assert (min(streamed) >= 1) == in_order
