"""Capture a fixed-shape callable into a CUDA graph and replay it with in-place input copies.

A denoising pass is dozens of small kernels; replaying them as one graph removes the per-launch
CPU cost that otherwise dominates at a 16-token block. The helper is generic: it knows tensors,
not models. Off CUDA (or when disabled) it calls the function directly, with the same shape
checks, so the engine's graphed code path runs unchanged in CPU tests.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch


def _spec(t: torch.Tensor) -> tuple[tuple[int, ...], torch.dtype, torch.device]:
    return tuple(t.shape), t.dtype, t.device


def record_graph(fn: Callable[[], Any], warmup_iters: int = 2, pool: Any = None) -> tuple[torch.cuda.CUDAGraph, Any]:
    """``fn()`` captured into a new CUDA graph, and what the captured call returned. It is first run
    ``warmup_iters`` times on a side stream, so lazy initialisation, Triton JIT and cuBLAS workspaces happen
    outside the capture."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup_iters):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, pool=pool):
        outputs = fn()
    return graph, outputs


class GraphedCallable:
    """``fn`` captured for the shapes of ``example_inputs``; call it like ``fn``.

    Each call copies its tensors into the static input buffers (skipped for a tensor that *is*
    the static buffer: write into ``static_inputs`` directly to avoid the copy), replays the
    graph and returns the static outputs, which the next call overwrites. Inputs that ``fn``
    updates in place are listed in ``mutated_inputs`` and copied back to the caller's tensors.
    Everything ``fn`` computes must depend only on its tensor inputs: Python values, host syncs
    (``.item()``) and data-dependent shapes are frozen or forbidden at capture.
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        example_inputs: Sequence[torch.Tensor],
        mutated_inputs: Sequence[int] = (),
        warmup_iters: int = 2,
        enabled: bool | None = None,
        pool: Any = None,
    ) -> None:
        if not all(isinstance(t, torch.Tensor) for t in example_inputs):
            raise TypeError("GraphedCallable: example_inputs must all be tensors")
        bad = [i for i in mutated_inputs if not 0 <= i < len(example_inputs)]
        if bad:
            raise ValueError(f"GraphedCallable: mutated_inputs {bad} out of range for {len(example_inputs)} inputs")
        self.fn = fn
        self.mutated_inputs = tuple(mutated_inputs)
        self._specs = [_spec(t) for t in example_inputs]
        on_cuda = bool(example_inputs) and all(t.device.type == "cuda" for t in example_inputs)
        self.graphed = (on_cuda and torch.cuda.is_available()) if enabled is None else enabled
        if self.graphed and not on_cuda:
            raise ValueError("GraphedCallable: CUDA-graph capture needs every input on a CUDA device")
        self.static_inputs: tuple[torch.Tensor, ...] = ()
        self.static_outputs: Any = None
        self.graph: torch.cuda.CUDAGraph | None = None
        if self.graphed:
            self._capture(example_inputs, warmup_iters, pool)

    def _capture(self, example_inputs: Sequence[torch.Tensor], warmup_iters: int, pool: Any) -> None:
        self.static_inputs = tuple(t.clone() for t in example_inputs)
        self.graph, self.static_outputs = record_graph(lambda: self.fn(*self.static_inputs), warmup_iters, pool)

    def _check(self, inputs: Sequence[torch.Tensor]) -> None:
        if len(inputs) != len(self._specs):
            raise ValueError(f"GraphedCallable: expected {len(self._specs)} inputs, got {len(inputs)}")
        for i, (t, spec) in enumerate(zip(inputs, self._specs, strict=True)):
            if not isinstance(t, torch.Tensor) or _spec(t) != spec:
                got = _spec(t) if isinstance(t, torch.Tensor) else type(t).__name__
                raise ValueError(f"GraphedCallable: input {i} is {got}, captured for {spec}")

    def __call__(self, *inputs: torch.Tensor) -> Any:
        self._check(inputs)
        if not self.graphed:
            return self.fn(*inputs)
        for static, given in zip(self.static_inputs, inputs, strict=True):
            if given is not static:
                static.copy_(given)
        self.graph.replay()
        for i in self.mutated_inputs:
            if inputs[i] is not self.static_inputs[i]:
                inputs[i].copy_(self.static_inputs[i])
        return self.static_outputs


def capture(
    fn: Callable[..., Any],
    example_inputs: Sequence[torch.Tensor],
    mutated_inputs: Sequence[int] = (),
    warmup_iters: int = 2,
    enabled: bool | None = None,
) -> GraphedCallable:
    """Capture ``fn`` for these input shapes (see ``GraphedCallable``); a no-op wrapper off CUDA."""
    return GraphedCallable(fn, example_inputs, mutated_inputs, warmup_iters, enabled)
