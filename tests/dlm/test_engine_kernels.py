"""The engine's kernel setting: the fused Triton selection (interpreter on CPU) decodes exactly what torch does."""

import json

import pytest
import torch

from dlm.cli import main
from dlm.decoding.block_causal import BlockPolicy
from dlm.decoding.confidence import (
    GREEDY,
    Sampling,
    above_threshold,
    above_threshold_fused,
    pick_tokens,
    pick_tokens_fused,
)
from dlm.engine import Engine

pytest.importorskip("triton")

PROMPTS = ([5, 17, 42, 99, 123, 200, 7], "The quick brown fox jumps over 12 lazy dogs")


@pytest.fixture(scope="module", params=["sdar", "fast_dllm_v2"])
def engines(request, fixtures_dir):
    path = fixtures_dir / request.param / "checkpoint"
    pair = {k: Engine.from_dir(path, kernels=k) for k in ("torch", "triton")}
    yield pair
    for engine in pair.values():
        engine.close()


def _same(engines, prompt, **opts):
    got = {k: e.generate(prompt, **opts) for k, e in engines.items()}
    assert got["triton"].token_ids == got["torch"].token_ids
    assert got["triton"].forward_passes == got["torch"].forward_passes
    return got["torch"]


@pytest.mark.parametrize("threshold", [0.4, 0.6])
@pytest.mark.parametrize("prompt", PROMPTS)
def test_triton_decodes_the_same_ids_as_torch(engines, prompt, threshold):
    assert engines["triton"].kernels == "triton" and engines["torch"].kernels == "torch"
    r = _same(engines, prompt, max_new_tokens=12, threshold=threshold)
    assert r.token_ids


def test_fixed_passes_the_factor_rule_and_unfusable_sampling_match_too(engines):
    _same(engines, PROMPTS[0], max_new_tokens=8, passes_per_block=2)
    _same(engines, PROMPTS[1], max_new_tokens=12, factor=1.5)  # selection in torch after the fused argmax
    # top-p sampling has no kernel: both paths run torch's sampler, so a seed gives the same draw.
    _same(engines, PROMPTS[1], max_new_tokens=8, threshold=0.5, temperature=0.8, top_p=0.9, seed=3)


def test_fused_sampling_is_seeded(engines):
    engine = engines["triton"]
    one, two = (engine.generate(PROMPTS[0], max_new_tokens=8, threshold=0.5, temperature=0.9, seed=5)
                for _ in range(2))
    assert one.token_ids == two.token_ids and one.token_ids
    assert engine.model.cfg.mask_token_id not in one.token_ids


def _exact_logits() -> torch.Tensor:
    """Rows whose softmax maxima are exact (1/k for k tied maxima), so threshold ties are ties on both paths."""
    logits = torch.full((6, 320), float("-inf"))
    for row, tied in enumerate([(40, 7), (3, 9, 11, 300), (2,), (8, 9), (1, 2, 3, 4), (250, 17)]):
        logits[row, list(tied)] = 1.5
    return logits  # maxima 0.5, 0.25, 1, 0.5, 0.25, 0.5


@pytest.mark.parametrize(("threshold", "chosen"), [
    (0.5, [2]),  # strictly above: the 0.5 rows stay masked
    (0.25, [0, 2, 3, 5]),
    (1.0, [2]),  # nothing above 1: the most confident row alone
])
def test_fused_selection_is_the_decoders_rule(threshold, chosen):
    logits = _exact_logits()
    tokens, conf = pick_tokens(logits)
    want = above_threshold(conf, torch.ones(6, dtype=torch.bool), threshold)
    fused_tokens, fused = above_threshold_fused(logits, GREEDY, threshold)
    assert want.nonzero()[:, 0].tolist() == chosen
    assert torch.equal(fused, want) and torch.equal(fused_tokens[fused], tokens[want])


def test_fused_fallback_ties_go_to_the_lowest_row():
    logits = _exact_logits()
    logits[2] = logits[0]  # now rows 0, 2, 3, 5 tie at 0.5 and none is above 0.6
    tokens, conf = pick_tokens(logits)
    want = above_threshold(conf, torch.ones(6, dtype=torch.bool), 0.6)
    fused_tokens, fused = above_threshold_fused(logits, GREEDY, 0.6)
    assert want.nonzero()[:, 0].tolist() == [0] and torch.equal(fused, want)
    assert fused_tokens[0] == tokens[0] == 7  # the lowest tied token id


def test_fused_sample_confidence_is_its_tempered_probability():
    logits = torch.randn(5, 320, generator=torch.Generator().manual_seed(0)) * 3
    sampling = Sampling(temperature=0.7)
    tokens, conf = pick_tokens_fused(logits, sampling, torch.Generator().manual_seed(1))
    again, _ = pick_tokens_fused(logits, sampling, torch.Generator().manual_seed(1))
    assert torch.equal(tokens, again)
    want = torch.softmax(logits / 0.7, -1).gather(-1, tokens[:, None])[:, 0]
    torch.testing.assert_close(conf, want)
    with pytest.raises(ValueError, match="top-k / top-p"):
        pick_tokens_fused(logits, Sampling(temperature=0.7, top_k=5))


def test_auto_is_torch_on_this_cpu_and_bad_settings_are_errors(fixtures_dir, monkeypatch):
    monkeypatch.delenv("DLM_KERNELS", raising=False)
    path = fixtures_dir / "sdar" / "checkpoint"
    engine = Engine.from_dir(path)
    try:
        assert not torch.cuda.is_available() and engine.kernels == "torch"
    finally:
        engine.close()
    with pytest.raises(ValueError, match="kernel setting"):
        Engine.from_dir(path, kernels="cuda")
    with pytest.raises(ValueError, match="kernels must be one of"):
        BlockPolicy(block_size=4, kernels="fast")
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(RuntimeError, match="TRITON_INTERPRET=1"):
        Engine.from_dir(path, kernels="triton")


def test_cli_kernels_flag(fixtures_dir, capsys):
    ids = {}
    for kernels in ("torch", "triton"):
        code = main(["generate", "--model", str(fixtures_dir / "sdar" / "checkpoint"), "--raw", "Hello there",
                     "--max-tokens", "6", "--threshold", "0.5", "--kernels", kernels, "--json"])
        assert code == 0
        ids[kernels] = json.loads(capsys.readouterr().out)["token_ids"]
    assert ids["triton"] == ids["torch"] and ids["torch"]
