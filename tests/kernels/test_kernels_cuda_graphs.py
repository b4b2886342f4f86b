"""The CUDA-graph helper's contract, exercised on its CPU path (a plain call with the same checks)."""

import pytest
import torch

from kernels import capture


def _step(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    mask &= x > 0  # an in-place update of an input, as select_confident does
    return x * 2


def test_cpu_path_calls_the_function_and_updates_inputs_in_place():
    graphed = capture(_step, [torch.zeros(4), torch.ones(4, dtype=torch.bool)], mutated_inputs=[1])
    assert not graphed.graphed
    x, mask = torch.tensor([1.0, -1.0, 2.0, -3.0]), torch.ones(4, dtype=torch.bool)
    out = graphed(x, mask)
    assert out.tolist() == [2.0, -2.0, 4.0, -6.0]
    assert mask.tolist() == [True, False, True, False]


def test_shape_and_dtype_are_fixed_at_capture():
    graphed = capture(_step, [torch.zeros(4), torch.ones(4, dtype=torch.bool)])
    with pytest.raises(ValueError, match="input 0"):
        graphed(torch.zeros(5), torch.ones(5, dtype=torch.bool))
    with pytest.raises(ValueError, match="input 1"):
        graphed(torch.zeros(4), torch.ones(4))
    with pytest.raises(ValueError, match="expected 2 inputs"):
        graphed(torch.zeros(4))


def test_capture_on_cpu_tensors_cannot_be_forced():
    with pytest.raises(ValueError, match="CUDA device"):
        capture(_step, [torch.zeros(4), torch.ones(4, dtype=torch.bool)], enabled=True)
    with pytest.raises(ValueError, match="out of range"):
        capture(_step, [torch.zeros(4)], mutated_inputs=[3])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_replay_reads_new_inputs_on_cuda():
    x, mask = torch.zeros(4, device="cuda"), torch.ones(4, dtype=torch.bool, device="cuda")
    graphed = capture(_step, [x, mask], mutated_inputs=[1])
    assert graphed.graphed
    x2, m2 = torch.tensor([1.0, -1.0, 2.0, -3.0], device="cuda"), torch.ones(4, dtype=torch.bool, device="cuda")
    assert graphed(x2, m2).tolist() == [2.0, -2.0, 4.0, -6.0]
    assert m2.tolist() == [True, False, True, False]
