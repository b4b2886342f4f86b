"""Steps every live generation on the model worker, batching their compatible forward passes.

Each generation is a generator of :class:`Commit` events and :class:`Pass` requests. One scheduler tick
(one task on the FIFO worker, so other work queued there interleaves) advances every live generation to
its next pass request, delivering the commits it yields on the way, then runs all requested passes —
compatible ones as one batched forward (:mod:`dlm.batching`). A generation that yields commits without
asking for passes (the bidirectional samplers run their own) gets one commit per tick, so none starves
the others.
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

    def add(self, job: Job) -> None:
        with self._lock:
            self.jobs.append(job)
            self._kick()

    def cancel(self, job: Job, on_close: Callable[[], None] | None = None) -> None:
        """Stop stepping ``job``; ``on_close`` runs on the worker once its generator is closed, before any
        work submitted to the worker after this call."""
        job.closed, job.on_close = True, on_close
        self.worker.submit(self._close, job)

    def _close(self, job: Job) -> None:
        with self._lock:
            live = job in self.jobs
        if live:
            self._drop(job)
        elif job.on_close is not None:  # it had already ended
            job.on_close, close = None, job.on_close
            close()

    def _kick(self) -> None:  # with the lock held
        if self.jobs and not self._scheduled:
            self._scheduled = True
            self.worker.submit(self._tick)

    def _drop(self, job: Job) -> None:
        with self._lock:
            self.jobs.remove(job)
        job.steps.close()
        if job.on_close is not None:
            job.on_close, close = None, job.on_close
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
        if passes:
            try:
                results, batched = run_passes(self.model, passes)
            except Exception as exc:
                for job in owners:
                    self._finish(job, exc)
            else:
                for job, result in zip(owners, results, strict=True):
                    job.result = result
                self.batched_passes += batched
        with self._lock:
            self._scheduled = False
            self._kick()
