"""Dream's streaming generator: shifted logits inside cached windows, adaptive canvas, stops."""

import json

import pytest
import torch

from dlm.checkpoint import load_model
from dlm.decoding import DecodeParams, dream
from tests.conftest import FIXTURES

REFERENCE = json.loads((FIXTURES / "dream" / "reference.json").read_text()) if FIXTURES.is_dir() else {}
MASK = 313
PROMPT = REFERENCE["generation"][0]["prompt_ids"] if REFERENCE else []


@pytest.fixture(scope="module")
def model(fixtures_dir):
    return load_model(fixtures_dir / "dream" / "checkpoint")


def _tokens(commits) -> list[int]:
    return [t for c in commits for t in c.token_ids]


def test_block_of_one_is_predicted_from_its_left_neighbour(model):
    """One position per block, no future masks: each token is the argmax of the previous position's output."""
    params = DecodeParams(max_new_tokens=5, block_size=1, threshold=0.9)
    got = _tokens(dream.stream_generate(model, PROMPT, params, MASK, lookahead_blocks=0))
    seq = list(PROMPT)
    with torch.no_grad():
        for _ in range(5):
            seq.append(int(model(torch.tensor([seq + [MASK]]))[0, -2].argmax()))
    assert got == seq[len(PROMPT) :]


@pytest.mark.parametrize("cache", ["prefix", "dual"])
@pytest.mark.parametrize("threshold", [None, 0.3])
def test_stream_is_contiguous_complete_and_final(model, cache, threshold):
    params = DecodeParams(max_new_tokens=18, block_size=8, threshold=threshold, steps_per_block=4)
    commits = list(dream.stream_generate(model, PROMPT, params, MASK, cache=cache))
    tokens = _tokens(commits)
    assert len(tokens) == 18 and MASK not in tokens
    assert commits[-1].finished and not any(c.finished for c in commits[:-1])
    if threshold is None:  # four passes per full block, two for the 2-token tail (one pass per mask at most)
        assert commits[-1].forward_passes == 10


def test_fixed_schedule_is_the_float32_linspace(model):
    """With every pass unmasking what the schedule says, a block takes exactly steps_per_block passes."""
    params = DecodeParams(max_new_tokens=16, block_size=16, threshold=None, steps_per_block=16)
    commits = list(dream.stream_generate(model, PROMPT, params, MASK, lookahead_blocks=0))
    assert commits[-1].forward_passes == 16
    # The schedule's first pass unmasks nothing, so the first tokens come no earlier than the second pass.
    assert next(c for c in commits if c.token_ids).forward_passes >= 2


def test_stops_at_a_stop_token_without_emitting_it(model):
    params = DecodeParams(max_new_tokens=16, block_size=4, threshold=0.3)
    full = _tokens(dream.stream_generate(model, PROMPT, params, MASK))
    stop = full[5]
    commits = list(dream.stream_generate(model, PROMPT, params, MASK, stop_ids={stop}))
    assert _tokens(commits) == full[: full.index(stop)]
    assert commits[-1].finished
