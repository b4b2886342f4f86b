"""One conversation's KV cache: prefill while the person is still speaking, roll back when the words change.

The cache holds whole blocks only (a block-causal model's prompt tail is decoded inside the first answer
block, as the families' own samplers do), so ``prefill`` commits the prompt's full blocks and keeps the
tail for the generation. When the transcript changes, the cache rolls back to the last block boundary
inside the longest common prefix — a length change, not a copy. The cache is allocated on first use and
grows (by copying) only if a conversation outgrows it; :meth:`release` frees it.

Every method that touches the model runs on the engine's model worker, so sessions used from several
tasks at once never run two passes concurrently.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dlm.decoding.block_causal import CachedForward
from dlm.graphed_forward import GraphedForward
from dlm.kv_cache import KVCache

if TYPE_CHECKING:
    from dlm.engine import Engine

DEFAULT_CAPACITY = 4096


@dataclass(frozen=True)
class PrefillResult:
    reused: int  # positions kept from the cache (the common prefix, block-aligned)
    computed: int  # positions prefilled now
    pending: int  # prompt tail left for the first answer block


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def on_grid(ends: Sequence[int], block: int, limit: int) -> list[int]:
    """The cached block ends a prompt may reuse: those up to ``limit`` that lie on the block grid a fresh
    prefill of it would build (every multiple of ``block``). A smaller first answer block (``effort=low``) or
    another block size in an earlier turn ends blocks off that grid; their KV saw other blocks than a fresh
    prefill's would, so reusing them would decode other ids than a stateless request does."""
    kept: list[int] = []
    for end in ends:
        if end > limit or end != (len(kept) + 1) * block:
            break
        kept.append(end)
    return kept


class Session:
    def __init__(self, engine: Engine, capacity: int | None = None) -> None:
        cfg = engine.model.cfg
        self.engine = engine
        self.capacity = min(capacity or DEFAULT_CAPACITY, cfg.max_position_embeddings)
        self._state: CachedForward | None = None
        self.last_result = None  # the GenerationResult of the latest generation on this session

    @property
    def tokens(self) -> list[int]:
        """Ids whose KV is in the cache."""
        return list(self._state.tokens) if self._state is not None else []

    @property
    def nbytes(self) -> int:
        return self._state.cache.nbytes() if self._state is not None else 0

    def state(self, needed: int) -> CachedForward:
        """The cache, allocated or grown so that ``needed`` positions fit (model worker only). Never more than
        the context: decoding cuts its last window short there (:func:`dlm.decoding.schedule.window_end`)."""
        ctx = self.engine.model.cfg.max_position_embeddings
        needed = min(needed, ctx)
        if self._state is None or needed > self._state.cache.capacity:
            self.capacity = min(ctx, max(needed, self.capacity, 2 * (self._state.cache.capacity if self._state else 0)))
            old = self._state
            model = self.engine.model
            dtype = model.output_weight().dtype
            if self.engine.graph_pool is not None:
                fresh: CachedForward = self.engine.graph_pool.take(self.capacity, dtype, self.engine.device)
            else:
                fresh = CachedForward(model, KVCache(model.cfg, self.capacity, dtype=dtype, device=self.engine.device))
            if old is not None:
                n = old.cache.length
                cache = fresh.cache
                cache.k[:, :, :, :n], cache.v[:, :, :, :n] = old.cache.k[:, :, :, :n], old.cache.v[:, :, :, :n]
                cache.length = n
                fresh.tokens, fresh.ends, fresh.last_logits = list(old.tokens), list(old.ends), old.last_logits
                self._give_back(old)
            self._state = fresh
        return self._state

    def prefill_now(self, token_ids: Sequence[int], block_size: int | None = None) -> PrefillResult:
        """Make the cache hold the full blocks of ``token_ids`` (model worker only)."""
        ids = list(token_ids)
        cfg = self.engine.model.cfg
        if cfg.bidirectional:  # no exact cache to keep: the bidirectional samplers run their own
            return PrefillResult(0, 0, len(ids))
        block = block_size or cfg.block_size
        state = self.state(len(ids) + 1)
        ends = on_grid(state.ends, block, common_prefix(state.tokens, ids))
        keep = ends[-1] if ends else 0
        if cfg.token_shift and keep == len(ids) and (keep < state.length or state.last_logits is None):
            # the next token is predicted from the last prompt logit, which a rollback does not keep
            keep = ends[-2] if len(ends) > 1 else 0
        state.truncate(keep)
        target = max(keep, len(ids) // block * block)
        state.extend(ids[keep:target], block)
        return PrefillResult(keep, target - keep, len(ids) - target)

    def prefill(self, token_ids: Sequence[int]) -> PrefillResult:
        """Prefill from any thread (blocks until done); use :meth:`aprefill` from async code."""
        return self.engine.run_on_worker(self.prefill_now, list(token_ids))

    async def aprefill(self, token_ids: Sequence[int]) -> PrefillResult:
        """Prefill on the model worker without blocking the event loop."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.engine.worker, self.prefill_now, list(token_ids))

    def release(self) -> None:
        """Free the cache (a graphed one goes back to the engine's pool, its graphs kept for the next
        session); the session stays usable and starts empty. Not while a generation runs on it."""
        if self._state is not None:
            self._give_back(self._state)
        self._state = None

    def _give_back(self, state: CachedForward) -> None:
        """Return a graphed cache to the engine's pool. Off the model worker the give-back is queued there,
        after whatever is queued already (a cancelled generation's close, say), so no pass can still be using
        the cache when another session gets it."""
        pool = self.engine.graph_pool
        if not isinstance(state, GraphedForward) or pool is None:
            return
        if self.engine.on_worker():
            pool.give(state)
        else:
            with contextlib.suppress(RuntimeError):  # the engine is closed: nothing to pool for
                self.engine.worker.submit(pool.give, state)

    close = release
