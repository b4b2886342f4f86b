"""SDAR's reference sampler reproduces every generation the official code produced on the fixture."""

import json

import pytest

from dlm.checkpoint import load_model
from dlm.decoding.sdar import block_diffusion_generate


@pytest.fixture(scope="module")
def sdar(fixtures_dir):
    root = fixtures_dir / "sdar"
    return load_model(root / "checkpoint"), json.loads((root / "reference.json").read_text())


def test_every_sdar_generation_matches_reference(sdar):
    model, ref = sdar
    for entry in ref["generation"]:
        out = block_diffusion_generate(model, entry["prompt_ids"], **entry["args"])
        assert out == entry["output_ids"], entry["setting"]
        assert out.count(entry["args"]["mask_id"]) == entry["num_remaining_mask_tokens"]
