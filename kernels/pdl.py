"""Programmatic dependent launch (PDL): a pass's next kernel starts while the one before it finishes.

Inside a graphed pass every kernel still pays its ramp: its programs are scheduled, then its first reads
go out to memory. At a 16-token block that ramp, times 323 kernels, is most of what separates a pass from
its weight-read floor (``latency_bench/results/gpu_check_h200_2026-12-04_run7.md``). On compute capability
9 and later, a kernel launched with PDL may start once every program of the kernel before it has begun.
Each kernel that takes part waits for the one before it (``gdc_wait``) before it touches memory that kernel
may write or read, and only then lets the next one start (``gdc_launch_dependents``), so at most one kernel
waits ahead. What it does before its wait must not depend on the kernel before: the thin matrix product
asks L2 for its first weight tiles there, the block attention for its share of the cached keys and values
(:func:`prefetch_count` sizes both).

Opt-in, for a stretch of launches: ``with programmatic_launch(): ...``. The GPU check times it; the CPU
interpreter has no grid dependency control, so there every launch is plain.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager

import torch

from kernels.dispatch import sm_count

MIN_CAPABILITY = 9  # Hopper: the first with griddepcontrol
# The bytes a launch's programs ask L2 for before they wait, all together: a sixth of an H100's or H200's 50 MB
# L2 (a guess until the GPU check's sweep times 0 to 32 MB). For a 1.7B layer that is all of the o product's
# weight, half of q/k/v's, the first 2 of 16 K tiles of each gate/up strip, and the attention's whole cache
# at 512 keys or a quarter of it at 4K.
PREFETCH_BYTES = 8 << 20

_ACTIVE: contextvars.ContextVar[bool] = contextvars.ContextVar("programmatic_launch", default=False)


@contextmanager
def programmatic_launch(enabled: bool = True) -> Iterator[None]:
    """Launch the Triton kernels inside with PDL where the device supports it (``enabled=False``: plainly)."""
    token = _ACTIVE.set(enabled)
    try:
        yield
    finally:
        _ACTIVE.reset(token)


def launch_options(device: torch.device) -> dict[str, bool]:
    """Keyword arguments for a Triton launch on ``device``: the kernel's ``GDC`` flag and, when it is on, the
    ``launch_pdl`` launch option. On only inside ``programmatic_launch`` on a CUDA device that supports it."""
    on = _ACTIVE.get() and device.type == "cuda" and torch.cuda.get_device_capability(device)[0] >= MIN_CAPABILITY
    return {"GDC": True, "launch_pdl": True} if on else {"GDC": False}


def prefetch_count(budget: int, programs: int, item_bytes: int, items: int, device: torch.device) -> int:
    """How many of its ``items`` (``item_bytes`` each) a program asks L2 for before it waits: its share of
    ``budget`` bytes among the programs that run at once (about two per SM), at most all of them, rounded down to
    a power of two (it sizes a tile)."""
    at_once = min(programs, 2 * sm_count(device)) if device.type == "cuda" else programs
    count = min(budget // (at_once * item_bytes), items)
    return 1 << (count.bit_length() - 1) if count > 0 else 0
