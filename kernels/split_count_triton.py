"""Split counts: how a kernel whose work is split across programs finishes in the same launch.

Each program of a split tile leaves its partial result in memory and counts itself in with an atomic add;
the program that counts last reads every partial (from L2: other SMs wrote them), finishes the tile and
zeroes the count for the next launch. So a split product or a split attention is one launch, with no
second kernel to merge the partials. The counts live in one buffer per device for the process's lifetime,
so a CUDA graph may hold its address; launches on one stream share it, since each leaves its counts at zero
before the next may touch them (under PDL too: a kernel waits for the one before before it counts).
Imported only on the Triton path.
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

COUNTERS = 1 << 16  # split tiles one launch may count


@triton.jit
def count_in(count_ptr, tile, splits):
    """After this program's partial for ``tile`` is stored: count it in, True in the program that counts last
    (of ``splits``), which may then read every split's partial and must call :func:`reset_count`."""
    tl.debug_barrier()  # every thread's partial is written before the count says so
    return tl.atomic_add(count_ptr + tile, 1, sem="acq_rel") == splits - 1


@triton.jit
def reset_count(count_ptr, tile):
    tl.atomic_xchg(count_ptr + tile, 0)  # zero again for the next launch


def split_counts(device: torch.device, tiles: int, name: str) -> torch.Tensor:
    """The device's count buffer, for a launch of ``tiles`` split tiles (``name``: the kernel, for the error)."""
    if tiles > COUNTERS:
        raise ValueError(f"{name}: {tiles} split tiles in one launch; at most {COUNTERS}")
    return device_counts(device)


@functools.cache
def device_counts(device: torch.device) -> torch.Tensor:
    """Per split tile, how many splits have finished: zero between launches (the last split zeroes it)."""
    return torch.zeros(COUNTERS, dtype=torch.int32, device=device)
