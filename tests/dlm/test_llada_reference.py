"""LLaDA's reference samplers (ML-GSAI and Fast-dLLM, cached variants included) decode every fixture id."""

import json

import pytest
import torch

from dlm.checkpoint import load_model
from dlm.decoding import llada
from tests.conftest import FIXTURES

REFERENCE = json.loads((FIXTURES / "llada" / "reference.json").read_text()) if FIXTURES.is_dir() else {}
CACHE = {"generate": None, "generate_with_prefix_cache": "prefix", "generate_with_dual_cache": "dual"}


@pytest.fixture(scope="module")
def model(fixtures_dir):
    return load_model(fixtures_dir / "llada" / "checkpoint")


def _run(model, entry: dict) -> llada.Generation:
    args = entry["args"]
    common = dict(
        steps=args["steps"], gen_length=args["gen_length"], block_length=args["block_length"], mask_id=args["mask_id"]
    )
    repo, function = entry["function"].split("::")
    if repo.startswith("ML-GSAI"):
        return llada.generate(model, entry["prompt_ids"], confidence_dtype=None, **common)
    return llada.generate(
        model, entry["prompt_ids"], threshold=args["threshold"], cache=CACHE[function], **common
    )


@pytest.mark.parametrize(
    "entry", REFERENCE.get("generation", []), ids=lambda e: f"p{e['prompt_index']}-{e['setting']}"
)
def test_generation_matches_reference(model, entry):
    out = _run(model, entry)
    assert out.output_ids == entry["output_ids"]
    if entry["nfe"] is not None:
        assert out.nfe == entry["nfe"]


def test_bad_block_arguments_are_named(model):
    with pytest.raises(ValueError, match="not a multiple of block_length"):
        llada.generate(model, [1, 2], steps=4, gen_length=10, block_length=4, mask_id=310)
    with pytest.raises(ValueError, match="not a multiple of the number of blocks"):
        llada.generate(model, [1, 2], steps=3, gen_length=8, block_length=4, mask_id=310)


def test_model_dtype_confidence_is_what_ml_gsai_uses(model):
    """The float64 and model-dtype softmaxes agree on these weights' greedy fixed-schedule decodes."""
    entry = REFERENCE["generation"][0]
    common = dict(steps=16, gen_length=16, block_length=8, mask_id=310)
    a = llada.generate(model, entry["prompt_ids"], confidence_dtype=None, **common)
    b = llada.generate(model, entry["prompt_ids"], confidence_dtype=torch.float64, **common)
    assert a.output_ids == b.output_ids == entry["output_ids"]
