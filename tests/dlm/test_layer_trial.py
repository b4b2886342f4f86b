"""The engine's choice of layer steps: every candidate runs the same graphed pass (eagerly here, the thin layer in
Triton's interpreter), checked against the fused layer's logits; the fastest that agrees is kept."""

import pytest

from dlm.checkpoint import load_checkpoint
from dlm.fused_layers import LayerSteps
from dlm.layer_trial import CANDIDATES, Trial, fastest, resolve_layer_steps, run_trials
from kernels.dispatch import triton_available


@pytest.mark.skipif(not triton_available(), reason="needs the triton package")
@pytest.mark.parametrize("family", ["sdar", "fast_dllm_v2"])  # Qwen3-style layers, and Qwen2-style (biases)
def test_every_candidate_runs_the_pass_and_agrees_with_the_fused_layer(fixtures_dir, family):
    model, _ = load_checkpoint(fixtures_dir / family / "checkpoint")
    trials = run_trials(model, passes=2, prefix=600, block=8)  # past the 512-position context: 504 fit
    assert [t.steps for t in trials] == list(CANDIDATES)
    assert all(t.dropped is None and t.argmax_agree == 1.0 and t.ms_per_pass > 0 for t in trials), trials
    assert fastest(trials) == min(trials, key=lambda t: t.ms_per_pass).steps


def test_the_fastest_candidate_that_agrees_is_kept():
    fused, thin, _ = CANDIDATES
    assert fastest([Trial(fused, 2.0, 1.0, None), Trial(thin, 1.0, 1.0, None)]) == thin
    disagrees = Trial(thin, 1.0, 0.5, "argmax agrees with triton on 50% of the rows")
    assert fastest([Trial(fused, 2.0, 1.0, None), disagrees]) == fused
    failed = [Trial(steps, None, None, "RuntimeError: no kernel image") for steps in CANDIDATES]
    assert fastest(failed) == fused  # the reference stands when nothing ran
    assert "dropped (argmax agrees" in str(disagrees)


def test_settings_resolve_without_a_trial_off_cuda(fixtures_dir):
    model, _ = load_checkpoint(fixtures_dir / "sdar" / "checkpoint")
    assert resolve_layer_steps("auto", model, "triton", graphed=True) == (LayerSteps("triton"), [])
    assert resolve_layer_steps("fused", model, "torch", graphed=False) == (LayerSteps("torch"), [])
    assert resolve_layer_steps("thin", model, "triton", graphed=True)[0] == LayerSteps("triton", thin=True, pdl=True)
    with pytest.raises(ValueError, match="Triton path"):
        resolve_layer_steps("thin", model, "torch", graphed=True)
    with pytest.raises(ValueError, match="layer_steps must be one of"):
        resolve_layer_steps("fastest", model, "triton", graphed=True)
