"""Which path runs: the setting argument, the DLM_KERNELS variable, the device."""

import pytest

from kernels.dispatch import kernel_path, triton_available


def test_auto_on_cpu_is_torch(monkeypatch):
    monkeypatch.delenv("DLM_KERNELS", raising=False)
    assert kernel_path("auto", "cpu") == "torch"


def test_environment_forces_a_path(monkeypatch):
    monkeypatch.setenv("DLM_KERNELS", "torch")
    assert kernel_path("auto", "cuda") == "torch"
    if triton_available():
        monkeypatch.setenv("DLM_KERNELS", "triton")
        assert kernel_path("auto", "cpu") == "triton"  # the interpreter is on in this directory


def test_explicit_argument_beats_environment(monkeypatch):
    monkeypatch.setenv("DLM_KERNELS", "triton")
    assert kernel_path("torch", "cpu") == "torch"


def test_triton_on_cpu_without_interpreter_is_an_error(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    if triton_available():
        with pytest.raises(RuntimeError, match="TRITON_INTERPRET"):
            kernel_path("triton", "cpu")


def test_bad_settings_are_rejected(monkeypatch):
    with pytest.raises(ValueError, match="kernel setting"):
        kernel_path("gpu")
    monkeypatch.setenv("DLM_KERNELS", "fast")
    with pytest.raises(ValueError, match="DLM_KERNELS"):
        kernel_path()
