"""Dream's reference samplers (no cache, and the block-wise prefix/dual cache) decode every fixture id."""

import json

import pytest
import torch

from dlm.checkpoint import load_model
from dlm.decoding import dream
from tests.conftest import FIXTURES

REFERENCE = json.loads((FIXTURES / "dream" / "reference.json").read_text()) if FIXTURES.is_dir() else {}


@pytest.fixture(scope="module")
def model(fixtures_dir):
    return load_model(fixtures_dir / "dream" / "checkpoint")


def _run(model, entry: dict) -> dream.DreamGeneration:
    args = entry["args"]
    common = dict(
        max_new_tokens=args["max_new_tokens"], steps=args["steps"], alg=args["alg"], mask_id=REFERENCE["mask_token_id"]
    )
    if "threshold" in args:
        common["threshold"] = args["threshold"]
    if "block_length" in args:
        return dream.block_generate(
            model, entry["prompt_ids"], block_length=args["block_length"], dual_cache=args["dual_cache"], **common
        )
    return dream.diffusion_generate(model, entry["prompt_ids"], **common)


@pytest.mark.parametrize(
    "entry", REFERENCE.get("generation", []), ids=lambda e: f"p{e['prompt_index']}-{e['setting']}"
)
def test_generation_matches_reference(model, entry):
    out = _run(model, entry)
    assert out.output_ids == entry["output_ids"]
    assert out.nfe == entry["nfe"]
    if "unmask_step" in entry:
        assert out.unmask_step == entry["unmask_step"]
        assert out.tokens_unmasked_per_step == entry["tokens_unmasked_per_step"]


def test_float32_linspace_schedule_is_uneven():
    """16 masks over 16 steps: float32 rounding of s/t makes the first step take none, the last two."""
    assert dream.linspace_schedule(16, 16) == [0] + [1] * 14 + [2]
    assert dream.linspace_schedule(16, 8) == [1, 2, 2, 2, 2, 2, 2, 3]
    assert sum(dream.linspace_schedule(37, 5)) == 37


def test_logits_shift_right_by_one():
    logits = torch.arange(6.0).reshape(3, 2)
    assert dream.shift_logits(logits).tolist() == [[0, 1], [0, 1], [2, 3]]


def test_unknown_alg_is_named(model):
    with pytest.raises(ValueError, match="unknown Dream alg 'origin'"):
        dream.diffusion_generate(model, [1, 2], max_new_tokens=4, steps=4, alg="origin", mask_id=313)
