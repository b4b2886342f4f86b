"""The one place the API meets the decoder: a :class:`GenerationSpec` in, final text pieces out.

Plain free text is the engine's own stream. Anything with a constrained span (JSON output, tool calls on a
tokenizer whose `<tool_call>` is one token) runs :func:`dlm.api.span_generation.span_decode` on an engine
session, one step per call on the engine's model worker, so it interleaves pass by pass with every other
generation exactly like the engine's own streams. Each generation gets a fresh session, released when it
ends, is cancelled, or the client goes away; the live ones are kept in `sessions`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from dlm.api.span_generation import SpanPlan, SpanRun, span_decode
from dlm.api.tool_calls import CLOSE, OPEN
from dlm.decoding.logit_bias import LogitBias
from dlm.effort import Knobs
from dlm.tokenizer import IncrementalDecoder, Tokenizer


@dataclass(frozen=True)
class GenerationSpec:
    prompt_ids: list[int]
    max_tokens: int
    temperature: float | None = None  # None: the engine's default (greedy)
    top_p: float | None = None
    seed: int | None = None
    effort: str | None = None  # low / medium / high
    plan: SpanPlan | None = None  # constrained spans; None = plain engine stream
    bias: LogitBias | None = None  # the copy bias toward the caller's words or the tool's result


@dataclass
class Outcome:
    """Filled in as the generation runs; final once its stream is closed."""

    finish_reason: str = "length"
    ids: list[int] = field(default_factory=list)  # the generated ids (stop ids left out), in the stream's order
    new_text: Callable[[], TaggedText] | None = None  # a fresh decoder that writes `ids` as the stream did

    @property
    def completion_tokens(self) -> int:
        return len(self.ids)

    def tokens_for(self, chars: int) -> int:
        """How many tokens wrote the first `chars` characters of the text: the fewest leading ids whose text,
        decoded as the stream decoded it, holds them all. Where a stop string cut the answer, a token partly
        before the stop counts (some of its text is returned) and one that begins at or after it does not. It
        decodes the whole prefix once per token: about 50 ms for 1024 tokens, and only for a cut answer."""
        if chars <= 0 or self.new_text is None:
            return 0
        text, written = self.new_text(), 0
        for count, token in enumerate(self.ids, start=1):
            written += len(text.push([token]))
            if written >= chars:
                return count
        return len(self.ids)


async def engine_stream(engine: Any, spec: GenerationSpec, outcome: Outcome, sessions: set,
                        decode_opts: dict[str, Any]) -> AsyncIterator[str]:
    """Free text from the engine, one piece per committed block (or finer)."""
    opts = {"max_new_tokens": spec.max_tokens, "temperature": spec.temperature, "top_p": spec.top_p,
            "seed": spec.seed, "effort": spec.effort, "bias": spec.bias, **decode_opts}
    session = engine.new_session()
    sessions.add(session)
    outcome.new_text = partial(TaggedText, engine.tokenizer, {})
    stream = engine.stream(spec.prompt_ids, session=session, **opts)
    try:
        async for piece in stream:
            yield piece
    finally:
        await stream.aclose()
        result = session.last_result
        if result is not None:
            outcome.finish_reason, outcome.ids = result.finish_reason, result.token_ids
        engine.worker.submit(session.release)  # after any pass still in flight: the worker is FIFO
        sessions.discard(session)


async def span_stream(engine: Any, vocab: list[str], spec: GenerationSpec, outcome: Outcome,
                      sessions: set) -> AsyncIterator[str]:
    """Text with constrained spans (see span_generation); span tags appear in the text as `<tool_call>`."""
    assert spec.plan is not None
    session = engine.new_session()
    sessions.add(session)
    run = SpanRun()
    knobs = Knobs(effort=spec.effort, temperature=spec.temperature or 0.0, top_p=spec.top_p or 1.0,
                  max_new_tokens=spec.max_tokens)
    steps = span_decode(engine, session, spec.prompt_ids, spec.max_tokens, spec.plan, vocab, knobs, spec.seed, run,
                        spec.bias)
    outcome.new_text = partial(TaggedText, engine.tokenizer, {spec.plan.open_id: OPEN, spec.plan.close_id: CLOSE})
    text = outcome.new_text()
    loop = asyncio.get_running_loop()
    try:
        while (ids := await loop.run_in_executor(engine.worker, next, steps, None)) is not None:
            outcome.ids += ids
            if piece := text.push(ids):
                yield piece
        outcome.finish_reason = "stop" if run.finished_by_stop else "length"
    finally:
        engine.worker.submit(_close, steps, session)
        sessions.discard(session)


class TaggedText:
    """Incremental text that keeps the span tags: the tokenizer would drop them as special tokens."""

    def __init__(self, tokenizer: Tokenizer, tags: dict[int | None, str]) -> None:
        self.decoder = IncrementalDecoder(tokenizer)
        self.tags = {k: v for k, v in tags.items() if k is not None}

    def push(self, ids: list[int]) -> str:
        out, run = "", []
        for token in ids:
            if token in self.tags:
                out += self.decoder.push(run) + self.tags[token]
                run = []
            else:
                run.append(token)
        return out + self.decoder.push(run)


def _close(steps: Iterator[list[int]], session: Any) -> None:
    steps.close()  # type: ignore[attr-defined]
    session.release()
