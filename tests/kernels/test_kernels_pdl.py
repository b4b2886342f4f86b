"""Programmatic dependent launch: opt-in per stretch of launches, plain where the device has none, and a
chain of a pass's kernels under it computes what the torch steps do (interpreted here; the GPU check runs
the same chain with real PDL)."""

import pytest
import torch

from kernels import pdl, selfcheck

pytest.importorskip("triton")


def test_launches_are_plain_outside_the_context_and_on_the_cpu():
    cpu = torch.device("cpu")
    assert pdl.launch_options(cpu) == {"GDC": False}
    with pdl.programmatic_launch():
        assert pdl.launch_options(cpu) == {"GDC": False}  # the interpreter has no grid dependency control
        assert pdl._ACTIVE.get()
        with pdl.programmatic_launch(False):
            assert not pdl._ACTIVE.get()
        assert pdl._ACTIVE.get()
    assert not pdl._ACTIVE.get()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_pass_s_kernel_chain_under_pdl_matches_the_torch_steps(dtype):
    selfcheck.check_pdl_chain(64, 2304, dtype, repeats=2)  # inner 2304: the down product splits K


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_pass_s_attention_half_under_pdl_matches_the_torch_steps(dtype):
    selfcheck.check_pdl_attention_chain(64, 4, 2, 16, 70, dtype, repeats=2)  # a prefix that is no multiple of a tile
