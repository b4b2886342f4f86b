"""The one place the API meets the decoder: a :class:`GenerationSpec` in, final text pieces out.

Free text is the engine's own stream. Constrained output (a JSON schema or a forced tool call) runs
:mod:`dlm.api.constrained_generation` on an engine session, one step per call on the engine's model worker,
so it interleaves pass by pass with every other generation exactly like the engine's own streams. Each
generation gets a fresh session that is released when the generation ends, is cancelled, or the client
goes away; the live ones are counted in `sessions`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from dlm.api.constrained_generation import constrained_decode
from dlm.constrained import JsonSchemaConstraint
from dlm.decoding.confidence import Sampling
from dlm.effort import Knobs, resolve
from dlm.tokenizer import IncrementalDecoder


@dataclass(frozen=True)
class GenerationSpec:
    prompt_ids: list[int]
    max_tokens: int
    temperature: float | None = None  # None: the engine's default (greedy)
    top_p: float | None = None
    seed: int | None = None
    effort: str | None = None  # low / medium / high
    schema: dict[str, Any] | bool | None = None  # constrain the whole output to this JSON schema


@dataclass
class Outcome:
    """Filled in as the generation runs; final once its stream is closed."""

    finish_reason: str = "length"
    completion_tokens: int = 0


async def engine_stream(engine: Any, spec: GenerationSpec, outcome: Outcome, sessions: set,
                        decode_opts: dict[str, Any]) -> AsyncIterator[str]:
    """Free text from the engine, one piece per committed block (or finer)."""
    opts = {"max_new_tokens": spec.max_tokens, "temperature": spec.temperature, "top_p": spec.top_p,
            "seed": spec.seed, "effort": spec.effort, **decode_opts}
    session = engine.new_session()
    sessions.add(session)
    stream = engine.stream(spec.prompt_ids, session=session, **opts)
    try:
        async for piece in stream:
            yield piece
    finally:
        await stream.aclose()
        result = session.last_result
        if result is not None:
            outcome.finish_reason, outcome.completion_tokens = result.finish_reason, len(result.token_ids)
        engine.worker.submit(session.release)  # after any pass still in flight: the worker is FIFO
        sessions.discard(session)


async def constrained_stream(engine: Any, vocab: list[str], spec: GenerationSpec, outcome: Outcome,
                             sessions: set) -> AsyncIterator[str]:
    """JSON text that the schema accepts, committed left to right (see constrained_generation)."""
    assert spec.schema is not None
    constraint = JsonSchemaConstraint(spec.schema, vocab, engine.stop_ids)
    session = engine.new_session()
    sessions.add(session)
    steps = _constrained_steps(engine, session, spec, constraint)
    decoder = IncrementalDecoder(engine.tokenizer)
    loop = asyncio.get_running_loop()
    try:
        while (ids := await loop.run_in_executor(engine.worker, next, steps, None)) is not None:
            outcome.completion_tokens += len(ids)
            if piece := decoder.push(ids):
                yield piece
        outcome.finish_reason = "stop" if constraint.stopped else "length"
    finally:
        engine.worker.submit(_close, steps, session)
        sessions.discard(session)


def _constrained_steps(engine: Any, session: Any, spec: GenerationSpec,
                       constraint: JsonSchemaConstraint) -> Iterator[list[int]]:
    """Prefill on the session, then the constrained loop; every `next` runs on the model worker."""
    cfg = engine.model.cfg
    policy = resolve(cfg, Knobs(effort=spec.effort), engine.stop_ids)
    threshold = policy.threshold if policy.threshold is not None else float("inf")  # high: 1 token per pass
    generator = torch.Generator(device=engine.device).manual_seed(spec.seed) if spec.seed is not None else None
    sampling = Sampling(temperature=spec.temperature or 0.0, top_p=spec.top_p or 1.0)
    with torch.no_grad():
        session.prefill_now(spec.prompt_ids)
        state = session.state(len(spec.prompt_ids) + spec.max_tokens + 2 * cfg.block_size)
        steps = constrained_decode(cfg, state, list(spec.prompt_ids), constraint, spec.max_tokens, sampling,
                                   threshold, state.last_logits, generator)
        yield from steps


def _close(steps: Iterator[list[int]], session: Any) -> None:
    steps.close()  # type: ignore[attr-defined]
    session.release()
