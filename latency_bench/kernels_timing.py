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


def time_graphed_ms(fn: Callable[[], object], device: torch.device, calls: int = 20, reps: int = 10) -> float | None:
    """Device time per call with the host's launch cost removed: ``calls`` calls captured in one CUDA graph,
    replayed ``reps`` times (median). This is what a kernel costs inside a graphed denoising pass. None off
    CUDA, where there are no graphs."""
    if device.type != "cuda":
        return None
    from kernels.cuda_graphs import record_graph

    graph, _ = record_graph(lambda: [fn() for _ in range(calls)], warmup_iters=1)
    return time_ms(graph.replay, device, warmup=2, reps=reps) / calls


def kernel_profile(fn: Callable[[], object], device: torch.device, top: int = 10) -> dict[str, object]:
    """Where one call's device time goes: kernel launches, their summed time, and the ``top`` kernels by time.

    The sum against the call's graphed time separates kernel work from the gaps between kernels. Off CUDA
    it attributes the CPU's operator time instead (how the dry run checks this code)."""
    from torch.profiler import ProfilerActivity, profile

    cuda = device.type == "cuda"
    fn()
    synchronize(device)
    with profile(activities=[ProfilerActivity.CUDA if cuda else ProfilerActivity.CPU]) as prof:
        fn()
        synchronize(device)
    rows = []
    for event in prof.key_averages():
        us = float(event.self_device_time_total if cuda else event.self_cpu_time_total)
        if us > 0.0:
            rows.append({"kernel": event.key[:70], "calls": int(event.count), "us": round(us, 1)})
    rows.sort(key=lambda r: -float(r["us"]))
    return {"kernel_launches": sum(int(r["calls"]) for r in rows), "kernel_us": round(sum(float(r["us"]) for r in rows), 1),
            "top": rows[:top]}  # fmt: skip
