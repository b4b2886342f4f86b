"""LLaDA's streaming generator: Fast-dLLM's cached decoding, streamed, with an adaptive canvas and stops."""

import json

import pytest
import torch

from dlm.checkpoint import load_model
from dlm.decoding import DecodeParams, llada
from tests.conftest import FIXTURES

REFERENCE = json.loads((FIXTURES / "llada" / "reference.json").read_text()) if FIXTURES.is_dir() else {}
MASK = 310
PROMPT = REFERENCE["generation"][0]["prompt_ids"] if REFERENCE else []


@pytest.fixture(scope="module")
def model(fixtures_dir):
    return load_model(fixtures_dir / "llada" / "checkpoint")


def _tokens(commits) -> list[int]:
    return [t for c in commits for t in c.token_ids]


@pytest.mark.parametrize(
    "entry",
    [e for e in REFERENCE.get("generation", []) if "cache" in e["function"]],
    ids=lambda e: f"p{e['prompt_index']}-{e['setting']}",
)
def test_full_canvas_reproduces_fast_dllm_cached_decoding(model, entry):
    """Configured like the reference (whole canvas up front, no stops), the stream decodes its exact ids."""
    args = entry["args"]
    params = DecodeParams(max_new_tokens=args["gen_length"], block_size=args["block_length"], threshold=args["threshold"])
    cache = "dual" if "dual" in entry["function"] else "prefix"
    commits = list(llada.stream_generate(model, entry["prompt_ids"], params, MASK, cache=cache, lookahead_blocks=None))
    assert entry["prompt_ids"] + _tokens(commits) == entry["output_ids"]
    assert commits[-1].finished and commits[-1].forward_passes <= entry["nfe"]


def test_fixed_schedule_matches_reference_prefix_cache(model):
    params = DecodeParams(max_new_tokens=16, block_size=8, threshold=None, steps_per_block=4)
    ref = llada.generate(model, PROMPT, steps=8, gen_length=16, block_length=8, mask_id=MASK, cache="prefix")
    commits = list(llada.stream_generate(model, PROMPT, params, MASK, cache="prefix", lookahead_blocks=None))
    assert PROMPT + _tokens(commits) == ref.output_ids
    assert commits[-1].forward_passes == 8  # exactly steps_per_block passes per block


@pytest.mark.parametrize("cache", ["prefix", "dual"])
def test_stream_is_contiguous_and_each_token_is_sent_once(model, cache):
    params = DecodeParams(max_new_tokens=21, block_size=4, threshold=0.5)
    commits = list(llada.stream_generate(model, PROMPT, params, MASK, cache=cache, lookahead_blocks=1))
    assert len(_tokens(commits)) == 21  # a partial last block still ends at max_new_tokens
    assert MASK not in _tokens(commits)
    assert [c.finished for c in commits] == [False] * (len(commits) - 1) + [True]
    passes = [c.forward_passes for c in commits]
    assert passes == sorted(passes)
    assert sum(c.block_done for c in commits) == 6  # ceil(21 / 4) blocks


def test_block_of_one_without_lookahead_is_greedy_next_mask_prediction(model):
    """One position per block, no future masks: each token is the argmax at a single appended mask."""
    params = DecodeParams(max_new_tokens=5, block_size=1, threshold=0.9)
    got = _tokens(llada.stream_generate(model, PROMPT, params, MASK, lookahead_blocks=0))
    seq = list(PROMPT)
    with torch.no_grad():
        for _ in range(5):
            seq.append(int(model(torch.tensor([seq + [MASK]]))[0, -1].argmax()))
    assert got == seq[len(PROMPT) :]


def test_stops_at_a_stop_token_without_emitting_it(model):
    params = DecodeParams(max_new_tokens=16, block_size=8, threshold=0.3)
    full = _tokens(llada.stream_generate(model, PROMPT, params, MASK))
    stop = full[3]
    commits = list(llada.stream_generate(model, PROMPT, params, MASK, stop_ids={stop}))
    assert _tokens(commits) == full[: full.index(stop)]
    assert commits[-1].finished
    via_params = DecodeParams(max_new_tokens=16, block_size=8, threshold=0.3, stop_ids=frozenset({stop}))
    assert _tokens(llada.stream_generate(model, PROMPT, via_params, MASK)) == full[: full.index(stop)]


def test_adaptive_canvas_grows_with_the_answer(model):
    lengths: list[int] = []
    hook = model.model.embed_tokens.register_forward_pre_hook(lambda _m, args: lengths.append(args[0].shape[1]))
    try:
        params = DecodeParams(max_new_tokens=32, block_size=4, threshold=None, steps_per_block=1)
        list(llada.stream_generate(model, PROMPT, params, MASK, lookahead_blocks=2))
    finally:
        hook.remove()
    # One refresh pass per block over prompt + canvas: the canvas is the block plus two blocks of masks.
    assert lengths == [len(PROMPT) + min(32, 4 * (b + 3)) for b in range(8)]


def test_sampling_is_reproducible_with_a_seed(model):
    params = DecodeParams(max_new_tokens=8, block_size=4, threshold=0.5, temperature=1.0, top_p=0.9, seed=7)
    a = _tokens(llada.stream_generate(model, PROMPT, params, MASK))
    b = _tokens(llada.stream_generate(model, PROMPT, params, MASK))
    assert a == b and len(a) == 8


def test_bad_requests_are_named(model):
    with pytest.raises(ValueError, match="prompt is empty"):
        next(llada.stream_generate(model, [], DecodeParams(), MASK))
    with pytest.raises(ValueError, match="cache must be"):
        next(llada.stream_generate(model, PROMPT, DecodeParams(), MASK, cache="none"))
    with pytest.raises(ValueError, match="max_new_tokens must be positive"):
        next(llada.stream_generate(model, PROMPT, DecodeParams(max_new_tokens=0), MASK))
    with pytest.raises(ValueError, match="block_size must be positive"):
        next(llada.stream_generate(model, PROMPT, DecodeParams(block_size=0), MASK))
    with pytest.raises(ValueError, match="context length"):
        next(llada.stream_generate(model, PROMPT, DecodeParams(max_new_tokens=10_000), MASK, lookahead_blocks=None))
