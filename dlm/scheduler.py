"""Steps every live generation on the model worker, batching their compatible forward passes.

Each generation is a generator of :class:`Commit` events and :class:`Pass` requests. One scheduler tick
(one task on the FIFO worker, so other work queued there interleaves) advances every live generation to
its next pass request, delivering the commits it yields on the way, then runs all requested passes —
compatible ones as one batched forward (:mod:`dlm.batching`). A generation that yields commits without
asking for passes (the bidirectional samplers run their own) gets one commit per tick, so none starves
the others. Once the engine is closed, every live generation's caller gets :data:`ENGINE_CLOSED` as an error, and
so does any later request, rather than wait on a worker that is gone.
"""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Callable, Generator
from dataclasses import dataclass

import torch

from dlm.batching import run_passes
from dlm.decoding import Commit
from dlm.decoding.block_causal import Pass
from dlm.model import Transformer

Delivery = Commit | BaseException | None  # None: the generation ended
ENGINE_CLOSED = "the engine is closed"


@dataclass(eq=False)
class Job:
    steps: Generator[Commit | Pass, torch.Tensor | None, None]
    deliver: Callable[[Delivery], None]
    result: torch.Tensor | None = None
    closed: bool = False
    on_close: Callable[[], None] | None = None


class Scheduler:
    def __init__(self, model: Transformer, worker: concurrent.futures.Executor) -> None:
        self.model, self.worker = model, worker
        self.jobs: list[Job] = []
        self.batched_passes = 0  # passes that ran in a batch of two or more (read by tests and benchmarks)
        self._lock = threading.Lock()
        self._scheduled = False
        self._closed = False

    def add(self, job: Job) -> None:
        """Start stepping ``job``; RuntimeError(:data:`ENGINE_CLOSED`) at once if it never could be."""
        with self._lock:
            if not self._closed:
                self.jobs.append(job)
                if self._kick():
                    return
                self.jobs.remove(job)
        raise RuntimeError(ENGINE_CLOSED)

    def close(self) -> None:
        """Refuse new jobs; the tick in flight or queued (the worker runs it before it stops) then fails the live
        ones, on the worker, so no pass is running when their generators close."""
        with self._lock:
            self._closed = True

    def cancel(self, job: Job, on_close: Callable[[], None] | None = None) -> None:
        """Stop stepping ``job``; ``on_close`` runs on the worker once its generator is closed, before any
        work submitted to the worker after this call. Once the worker is gone, it runs here if the job has
        ended (its last tick ends any job still live)."""
        job.closed, job.on_close = True, on_close
        try:
            self.worker.submit(self._close, job)
        except RuntimeError:  # the worker is shut down
            self._ended(job)

    def _close(self, job: Job) -> None:
        with self._lock:
            live = job in self.jobs
        if live:
            self._drop(job)
        else:
            self._ended(job)

    def _kick(self) -> bool:  # with the lock held
        """Queue a tick if live jobs need one; False once the engine is closed (or its worker gone), as no tick
        will step them again."""
        if self._closed:
            return False
        if self.jobs and not self._scheduled:
            try:
                self.worker.submit(self._tick)
            except RuntimeError:  # the worker was shut down without closing the scheduler
                self._closed = True
                return False
            self._scheduled = True
        return True

    def _drop(self, job: Job) -> None:
        job.steps.close()
        with self._lock:
            self.jobs.remove(job)
        self._ended(job)

    def _ended(self, job: Job) -> None:
        """Run ``job``'s on_close unless it is still live; taken under the lock, so exactly once, whichever of
        the worker and a caller facing a shut-down worker gets here first."""
        with self._lock:
            if job in self.jobs:
                return
            close, job.on_close = job.on_close, None
        if close is not None:
            close()

    def _finish(self, job: Job, outcome: Delivery) -> None:
        job.deliver(outcome)
        self._drop(job)

    def _advance(self, job: Job) -> Pass | None:
        """Run ``job`` to its next pass request; None if it ended or yielded control after a commit."""
        had_result = job.result is not None
        while True:
            try:
                item = job.steps.send(job.result)
            except StopIteration:
                self._finish(job, None)
                return None
            except Exception as exc:  # delivered to the caller, who re-raises it
                self._finish(job, exc)
                return None
            job.result = None
            if isinstance(item, Pass):
                return item
            job.deliver(item)
            if not had_result:
                return None
            had_result = False

    def _tick(self) -> None:
        if not self._closed:
            self._step()
        with self._lock:
            self._scheduled = False
            running = self._kick()
        if not running:
            self._fail_all()

    def _step(self) -> None:
        """Advance every live job to its next pass and run the passes; a pass that fails fails its own job only."""
        with self._lock:
            jobs = list(self.jobs)
        passes: list[Pass] = []
        owners: list[Job] = []
        for job in jobs:
            if job.closed:
                self._drop(job)
                continue
            request = self._advance(job)
            if request is not None:
                passes.append(request)
                owners.append(job)
        if not passes:
            return
        results, batched = run_passes(self.model, passes)
        for job, result in zip(owners, results, strict=True):
            if isinstance(result, Exception):
                self._finish(job, result)
            else:
                job.result = result
        self.batched_passes += batched

    def _fail_all(self) -> None:
        """End every live job with :data:`ENGINE_CLOSED`, each caller getting an error of its own to raise."""
        with self._lock:
            jobs = list(self.jobs)
        for job in jobs:
            self._finish(job, RuntimeError(ENGINE_CLOSED))
