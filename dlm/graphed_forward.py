"""Denoising passes with static shapes, replayed as CUDA graphs.

On a GPU a denoising pass over a 16-token block is a few hundred small kernels whose launch cost exceeds
their work. A CUDA graph replays them in one launch, but only for fixed shapes and device-side inputs, so
this forward never slices the cache by its host-side length: the cache length, the positions and the KV
write offset are device tensors. One graph is captured per (queries, stored rows) shape on first use (a
plain window, and a finished block committed in the same pass as the next window's first denoising), and
one per padded prompt-chunk length.

The passes run the fused layers (:mod:`dlm.fused_layers`): each writes its window's K/V into the cache past
the committed length, as scratch the next pass overwrites, and its attention reads the cache in place up to
the window's end, so the logits equal :class:`CachedForward`'s up to the summation order, on either kernel
path. Off CUDA the same static-shape code runs eagerly (``kernels.capture`` is a pass-through there), which is
how the CPU tests check it against the eager forward.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from functools import partial

import torch
import torch.nn.functional as F

from dlm.decoding.block_causal import CachedForward
from dlm.decoding.prefill import ChunkForward
from dlm.fused_layers import LayerSteps, fused_layers, fused_prefill_chunk, fused_window_logits
from dlm.kv_cache import KVCache
from dlm.model import Transformer
from kernels.cuda_graphs import GraphedCallable, capture
from kernels.pdl import programmatic_launch

GRAPH_SETTINGS = ("auto", "on", "off")
MIN_PREFILL_GRAPH = 64  # the shortest padded prefill chunk a graph is captured for (few graphs, little padding)


def graphs_enabled(setting: str, device: torch.device) -> bool:
    """"auto": on for CUDA devices; "on" forces the static-shape path anywhere (graphs only on CUDA)."""
    if setting not in GRAPH_SETTINGS:
        raise ValueError(f"cuda_graphs must be one of {GRAPH_SETTINGS}, got {setting!r}")
    return setting == "on" or (setting == "auto" and device.type == "cuda")


class GraphedForward(CachedForward):
    """:class:`CachedForward` whose denoising passes and whole-block prompt chunks run captured CUDA graphs (the
    token-shift families' separate commit passes stay eager: they happen once per block)."""

    def __init__(self, model: Transformer, cache: KVCache, steps: LayerSteps | None = None) -> None:
        """``steps``: how the fused layers' steps launch (default: the torch path)."""
        super().__init__(model, cache)
        self.steps = steps or LayerSteps()
        self._graphs: dict[tuple[object, ...], GraphedCallable] = {}  # (queries, stored rows) or a prefill's
        self._length = torch.zeros(1, dtype=torch.long, device=self.device)
        self._fused = fused_layers(model)  # before any capture binds the weights

    def _static_pass(self, store: int) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
        """(ids [1, n], length [1]) -> logits [n, V], the first ``store`` rows' K/V kept: what a graph captures."""
        return partial(fused_window_logits, self.model, self._fused, self.cache, store=store, steps=self.steps)

    def prefill_chunk(self, block_size: int) -> ChunkForward:
        """The fused layers, graphed per padded chunk length (see :meth:`_prefill_graphed`)."""
        return partial(self._prefill_graphed, block_size)

    def _prefill_graphed(self, block_size: int, ids: torch.Tensor) -> torch.Tensor:
        """Hidden states of a prompt chunk after the cache, from a graph captured for its length rounded up to
        a power of two (at least 64): whole blocks of padding after whole blocks of prompt change nothing
        before them, and their K/V lands past the cache's length. A chunk that is not whole blocks from a
        block boundary, or whose padding would not fit the cache, runs eagerly."""
        start, n = self.cache.length, ids.shape[1]
        padded_n = max(MIN_PREFILL_GRAPH, 1 << (n - 1).bit_length())
        if start % block_size or n % block_size or padded_n % block_size or start + padded_n > self.cache.capacity:
            return fused_prefill_chunk(self.model, self._fused, self.cache, ids, start, block_size, self.steps)
        run = partial(fused_prefill_chunk, self.model, self._fused, self.cache, block_size=block_size,
                      steps=self.steps)  # fmt: skip
        padded = F.pad(ids, (0, padded_n - n))  # padded with token 0: any id would do
        hidden = self._run_graph(("prefill", padded_n, block_size), run, padded)
        return hidden[:, :n].clone()  # the graph's output buffer is overwritten by its next replay

    def _run_graph(self, key: tuple[object, ...], run: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
                   ids: torch.Tensor) -> torch.Tensor:  # fmt: skip
        """``run(ids, length)`` after the cache's length, replayed from the graph captured for ``key`` (captured
        on first use: capture warms up by running the pass, and the KV it writes is rewritten by the replay; with
        ``steps.pdl`` the graph keeps the launches' programmatic dependencies)."""
        self._length.fill_(self.cache.length)
        inputs = (ids, self._length)
        graph = self._graphs.get(key)
        with programmatic_launch(self.steps.pdl):
            if graph is None:
                graph = self._graphs[key] = capture(run, inputs)
            return graph(*inputs)

    def _replay(self, ids: torch.Tensor, store: int) -> torch.Tensor:
        """Logits [n, V] for ``ids`` after the cache, storing the KV of the first ``store`` of them."""
        n = ids.shape[0]
        self.cache.check_room(n)
        return self._run_graph((n, store), self._static_pass(store), ids[None])

    def denoise(self, window: torch.Tensor, rows: torch.Tensor, pending: torch.Tensor | None = None
                ) -> torch.Tensor:
        if pending is None:
            return self._replay(window, 0)[rows]
        logits = self._replay(torch.cat((pending, window)), pending.shape[0])
        self.record_commit(pending, None)
        return logits[pending.shape[0] + rows]


class GraphedStatePool:
    """Released graphed caches, kept for the next conversation of the same capacity.

    A captured graph is bound to the memory of the cache it was captured with, so a session that got a
    fresh cache would capture its graphs again (tens of ms, on its first block). Handing a released cache
    and its graphs to the next session makes every conversation after the first replay graphs at once.
    At most ``keep`` free caches per capacity are held; more are freed.
    """

    def __init__(self, model: Transformer, steps: LayerSteps, keep: int = 4) -> None:
        self.model, self.steps, self.keep = model, steps, keep
        self._free: dict[int, list[GraphedForward]] = {}
        self._lock = threading.Lock()  # sessions may be released from any thread

    def take(self, capacity: int, dtype: torch.dtype, device: torch.device) -> GraphedForward:
        """An empty state of ``capacity`` positions: a released one (graphs kept) or a new one."""
        with self._lock:
            free = self._free.get(capacity)
            state = free.pop() if free else None
        if state is None:
            return GraphedForward(self.model, KVCache(self.model.cfg, capacity, dtype=dtype, device=device), self.steps)
        state.reset()
        return state

    def give(self, state: GraphedForward) -> None:
        """Take back a state no session uses any more (its contents are dropped on the next ``take``)."""
        with self._lock:
            free = self._free.setdefault(state.cache.capacity, [])
            if len(free) < self.keep and all(s is not state for s in free):
                free.append(state)

    def free_count(self, capacity: int) -> int:
        with self._lock:
            return len(self._free.get(capacity, ()))
