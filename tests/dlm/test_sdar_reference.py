"""SDAR's reference sampler reproduces every generation the official code produced on the fixture."""

import itertools
import json

import pytest

from dlm.checkpoint import load_model
from dlm.decoding.sdar import block_diffusion_generate
from dlm.engine import Engine


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


def test_the_engine_reproduces_the_sequential_schedules(sdar, fixtures_dir):
    """Through the engine's own decoder, as `--passes-per-block` runs it: a fixed schedule commits the reference's
    count of the leftmost positions each pass, whatever the tokens (a repeat guard on it had broken 2 per pass).
    The engine ends at the checkpoint's end-of-turn ids, so the reference is cut there."""
    _, ref = sdar
    engine = Engine.from_dir(fixtures_dir / "sdar" / "checkpoint")
    stops = {300, 302}
    try:
        for entry in ref["generation"]:
            args, prompt = entry["args"], entry["prompt_ids"]
            if args["remasking_strategy"] != "sequential" or args["stopping_criteria_idx"] not in (None, [302, 300]):
                continue
            got = engine.generate(prompt, max_new_tokens=args["gen_length"], block_size=args["block_length"],
                                  passes_per_block=args["denoising_steps"]).token_ids
            want = list(itertools.takewhile(lambda t: t not in stops, entry["output_ids"][len(prompt):]))
            assert got == want[: args["gen_length"]], entry["setting"]
    finally:
        engine.close()
