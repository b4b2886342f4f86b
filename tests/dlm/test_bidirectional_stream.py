"""The bidirectional families' shared block decoder (LLaDA, Dream): a commit after every pass, no more passes
on the fixed schedule than a block has masks, and the block-causal decoder's options refused."""

import pytest

from dlm.checkpoint import load_model
from dlm.decoding import DecodeParams, dream, llada
from dlm.engine import Engine
from tests.conftest import FIXTURES

# family -> (its stream generator, its mask id)
FAMILIES = {"llada": (llada.stream_generate, 310), "dream": (dream.stream_generate, 313)}
PROMPT = [40, 41, 42, 43, 44]


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def family(request, fixtures_dir):
    stream, mask = FAMILIES[request.param]
    return stream, load_model(FIXTURES / request.param / "checkpoint"), mask


@pytest.mark.parametrize("cache", ["prefix", "dual"])
@pytest.mark.parametrize("rule", [{"threshold": 0.9}, {"threshold": None, "steps_per_block": 8}])
def test_every_pass_is_followed_by_a_commit(family, cache, rule):
    """The scheduler runs other generations, and a cancel lands, only between commits: one per pass, even a
    pass that leaves the decoded prefix as it was."""
    stream, model, mask = family
    params = DecodeParams(max_new_tokens=20, block_size=8, **rule)
    commits = list(stream(model, PROMPT, params, mask, cache=cache))
    assert [c.forward_passes for c in commits] == list(range(1, len(commits) + 1))
    assert sum(len(c.token_ids) for c in commits) == 20 and commits[-1].finished


def test_a_short_block_takes_one_pass_per_mask_at_most(family):
    """effort=high gives a block as many passes as its size; a 5-token answer in a 32-token block has 5 masks,
    and Dream's float32 linspace over 32 passes would unmask nothing in the first 28 of them."""
    stream, model, mask = family
    params = DecodeParams(max_new_tokens=5, block_size=32, threshold=None, steps_per_block=32)
    commits = list(stream(model, PROMPT, params, mask))
    assert commits[-1].forward_passes == 5
    assert sum(len(c.token_ids) for c in commits) == 5 and mask not in commits[-1].token_ids


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def engine(request, fixtures_dir):
    eng = Engine.from_dir(FIXTURES / request.param / "checkpoint")
    yield eng
    eng.close()


def test_effort_high_on_a_short_answer_costs_a_pass_per_token(engine):
    """`dlm generate --effort high --max-tokens 5` on Dream had taken 32 passes, the block size."""
    assert engine.generate("abc", effort="high", max_new_tokens=5).forward_passes == 5


@pytest.mark.parametrize("option", [{"first_block_size": 2}, {"sub_block": 2}, {"in_order": False}, {"top_k": 5}])
def test_block_causal_options_are_refused_not_ignored(engine, option):
    (name,) = option
    with pytest.raises(ValueError, match=rf"^{name}: block-causal decoding only"):
        engine.generate("abc", max_new_tokens=4, **option)
