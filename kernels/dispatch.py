"""Choose between the Triton kernels and the plain-torch references.

The engine asks once per call site; the answer depends on the setting (argument or the
``DLM_KERNELS`` environment variable), on whether Triton imports, and on the tensors' device.
Triton on CPU tensors only works in interpreter mode (``TRITON_INTERPRET=1`` set before triton is
first imported), which is how the test suite exercises the kernels without a GPU.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import sys
from typing import Literal

import torch

KernelPath = Literal["triton", "torch"]
SETTINGS = ("auto", "triton", "torch")
ENV_VAR = "DLM_KERNELS"


@functools.lru_cache(maxsize=1)
def triton_available() -> bool:
    """True when the ``triton`` package can be imported (it is an optional dependency)."""
    return importlib.util.find_spec("triton") is not None


@functools.lru_cache(maxsize=8)
def sm_count(device: torch.device) -> int:
    """Streaming multiprocessors of a CUDA device: kernels size their grids to fill them."""
    return torch.cuda.get_device_properties(device).multi_processor_count


def _interpreter_problem() -> str | None:
    """Why Triton cannot run CPU tensors now, or None when its interpreter is active.

    Triton fixes interpreter vs compiled mode when a function is decorated, including its own
    ``triton.language`` library (``tl.sum``, ``tl.max``), so the variable must be set before
    anything imports triton (``torch._dynamo`` does, e.g. for ``torch.compile``).
    """
    if os.environ.get("TRITON_INTERPRET", "0") != "1":
        return "Triton on CPU tensors needs TRITON_INTERPRET=1 (set before triton is imported)"
    standard = sys.modules.get("triton.language.standard")
    if standard is not None and type(standard.sum).__name__ != "InterpretedFunction":
        return (
            "TRITON_INTERPRET=1 was set after triton was imported, so its interpreter is not active; "
            "set it before the first import of triton or torch._dynamo (e.g. at the top of tests/conftest.py)"
        )
    return None


def _setting(setting: str) -> str:
    if setting not in SETTINGS:
        raise ValueError(f"kernel setting must be one of {SETTINGS}, got {setting!r}")
    if setting != "auto":
        return setting
    env = os.environ.get(ENV_VAR, "auto").strip().lower() or "auto"
    if env not in SETTINGS:
        raise ValueError(f"{ENV_VAR} must be one of {SETTINGS}, got {env!r}")
    return env


def kernel_path(setting: str = "auto", device: torch.device | str | None = None) -> KernelPath:
    """Resolve a setting to the path that will actually run.

    An explicit ``"triton"``/``"torch"`` argument wins; ``"auto"`` defers to ``DLM_KERNELS``, and
    if that is also auto, Triton is chosen when it is installed and the device (default: whether
    CUDA is available at all) is a CUDA device. Forcing Triton without it installed, or on CPU
    tensors without the interpreter, is an error rather than a silent fallback.
    """
    choice = _setting(setting)
    on_cuda = torch.cuda.is_available() if device is None else torch.device(device).type == "cuda"
    if choice == "auto":
        return "triton" if on_cuda and triton_available() else "torch"
    if choice == "triton":
        if not triton_available():
            raise RuntimeError("kernel path 'triton' was forced but the triton package is not installed")
        problem = None if on_cuda else _interpreter_problem()
        if problem:
            raise RuntimeError(f"kernel path 'triton' was forced: {problem}")
    return choice
