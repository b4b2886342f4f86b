"""Timing primitives for the GPU check: a median-of-reps timer and the copy-bandwidth floor."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_ms(fn: Callable[[], object], device: torch.device, warmup: int = 3, reps: int = 20) -> float:
    """Median wall time of ``fn()`` in ms; CUDA events on a GPU so host overhead is included only
    as far as it delays the launches (which is what a latency-bound decode pays)."""
    for _ in range(warmup):
        fn()
    synchronize(device)
    samples = []
    for _ in range(reps):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            fn()
            samples.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(samples)


def copy_bandwidth_gbs(device: torch.device, nbytes: int, reps: int = 10) -> float:
    """Device-memory bandwidth measured by a large tensor copy (read + write counted), in GB/s."""
    src = torch.empty(nbytes // 2, dtype=torch.bfloat16, device=device).normal_()
    dst = torch.empty_like(src)
    ms = time_ms(lambda: dst.copy_(src), device, warmup=2, reps=reps)
    return 2 * src.numel() * src.element_size() / (ms * 1e-3) / 1e9
