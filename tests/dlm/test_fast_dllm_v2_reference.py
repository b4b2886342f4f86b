"""Fast-dLLM v2's reference samplers reproduce every generation the official code produced on the fixture."""

import json

import pytest
import torch

from dlm.checkpoint import load_model
from dlm.decoding import fast_dllm_v2

GENERATE_ARGS = ("max_new_tokens", "mask_id", "threshold", "small_block_size", "block_size", "stop_token",
                 "top_p", "temperature", "use_block_cache")
BATCH_ARGS = ("max_new_tokens", "mask_id", "threshold", "small_block_size", "block_size", "stop_token",
              "top_p", "temperature")


@pytest.fixture(scope="module")
def fixture(fixtures_dir):
    root = fixtures_dir / "fast_dllm_v2"
    return load_model(root / "checkpoint"), json.loads((root / "reference.json").read_text())


def test_every_generation_matches_reference(fixture):
    model, ref = fixture
    settings = set()
    for entry in ref["generation"]:
        args = entry["args"]
        if entry["setting"].startswith("batch_sample"):
            assert args["min_len"] == len(entry["prompt_ids"]) and args["layer_subset"] is None
            out = fast_dllm_v2.batch_sample(model, entry["prompt_ids"], pad_id=args["tokenizer_pad_token_id"],
                                            **{k: args[k] for k in BATCH_ARGS})
        else:
            out = fast_dllm_v2.generate(model, entry["prompt_ids"], **{k: args[k] for k in GENERATE_ARGS})
        assert out == entry["output_ids"], entry["setting"]
        settings.add(entry["setting"].split("_stop_token")[0])
    assert {"hf_generate_threshold0.5_block_cache", "batch_sample_threshold0.5"} <= settings


def test_batch_sample_pads_after_stop_and_finishes_the_block(fixture):
    model, ref = fixture
    entry = next(e for e in ref["generation"] if "stop_token" in e["setting"])
    stop, prompt = entry["args"]["stop_token"], entry["prompt_ids"]
    out = fast_dllm_v2.batch_sample(model, prompt, 24, pad_id=300, mask_id=307, threshold=1, small_block_size=4,
                                    block_size=8, stop_token=stop)
    first = out.index(stop, len(prompt))
    assert out[:first + 1] == entry["output_ids"]
    assert len(out) % 8 == 0 and set(out[first + 1:]) <= {300}


def test_block_cache_is_an_approximation(fixture):
    """The fixture's block-cache entries happen to equal exact decoding; on other prompts the stale
    sub-block keys do change some outputs, so the approximation path is really taken."""
    model, _ = fixture
    gen = torch.Generator().manual_seed(0)
    differ = 0
    for _ in range(12):
        prompt = torch.randint(0, 97, (int(torch.randint(3, 20, (1,), generator=gen)),), generator=gen).tolist()
        kw = dict(mask_id=307, threshold=0.3, small_block_size=4, block_size=8, stop_token=302)
        exact = fast_dllm_v2.generate(model, prompt, 24, **kw)
        differ += exact != fast_dllm_v2.generate(model, prompt, 24, use_block_cache=True, **kw)
    assert 0 < differ < 12
