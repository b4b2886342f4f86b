"""Choose between the Triton kernels and the plain-torch references.

The engine asks once per call site; the answer depends on the setting (argument or the
``DLM_KERNELS`` environment variable), on whether Triton imports, and on the tensors' device.
Triton on CPU tensors only works in interpreter mode (``TRITON_INTERPRET=1``), which is how the
test suite exercises the kernels without a GPU.
"""

from __future__ import annotations

import functools
import importlib.util
import os
from typing import Literal

import torch

KernelPath = Literal["triton", "torch"]
SETTINGS = ("auto", "triton", "torch")
ENV_VAR = "DLM_KERNELS"


@functools.lru_cache(maxsize=1)
def triton_available() -> bool:
    """True when the ``triton`` package can be imported (it is an optional dependency)."""
    return importlib.util.find_spec("triton") is not None


def interpreter_enabled() -> bool:
    """True when Triton kernels run in the CPU interpreter (read at kernel-definition time)."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


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
        if not on_cuda and not interpreter_enabled():
            raise RuntimeError(
                "kernel path 'triton' on CPU tensors needs TRITON_INTERPRET=1 set before kernels are imported"
            )
    return choice
