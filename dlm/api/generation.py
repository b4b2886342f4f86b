"""The one place the API meets the decoder: a :class:`GenerationSpec` in, :class:`TextPiece` s out.

Free text goes through the engine's streaming generator. Constrained output (a JSON schema or a forced tool
call) runs :mod:`dlm.api.constrained_generation` pass by pass on the model worker thread, yielding between
passes so concurrent requests interleave.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import torch

from dlm.api.constrained_generation import constrained_decode
from dlm.constrained import JsonSchemaConstraint
from dlm.decoding.confidence import Sampling
from dlm.model import Transformer
from dlm.tokenizer import IncrementalDecoder, Tokenizer

# Parallel-commit confidence per effort inside constrained spans: more effort, fewer tokens per pass.
CONSTRAINED_THRESHOLDS = {"low": 0.6, "medium": 0.8, "high": 0.95}


@dataclass(frozen=True)
class GenerationSpec:
    prompt_ids: list[int]
    max_tokens: int
    temperature: float | None = None  # None: the engine's default
    top_p: float | None = None
    seed: int | None = None
    effort: str | None = None  # low / medium / high
    schema: dict[str, Any] | bool | None = None  # constrain the whole output to this JSON schema


@dataclass
class TextPiece:
    text: str
    tokens: int
    finish_reason: str | None = None  # set on the last piece: stop or length


@dataclass
class ConstrainedDecoder:
    """What constrained decoding needs besides the spec: the model, its vocabulary as text, a worker."""

    model: Transformer
    tokenizer: Tokenizer
    vocab: list[str]
    stop_ids: frozenset[int]
    worker: concurrent.futures.Executor

    async def stream(self, spec: GenerationSpec) -> AsyncIterator[TextPiece]:
        assert spec.schema is not None
        constraint = JsonSchemaConstraint(spec.schema, self.vocab, self.stop_ids)
        generator = torch.Generator().manual_seed(spec.seed) if spec.seed is not None else None
        sampling = Sampling(temperature=spec.temperature or 0.0, top_p=spec.top_p or 1.0)
        threshold = CONSTRAINED_THRESHOLDS[spec.effort or "medium"]
        passes = constrained_decode(self.model, constraint, spec.prompt_ids, spec.max_tokens, sampling,
                                    threshold, generator)
        decoder = IncrementalDecoder(self.tokenizer)
        loop = asyncio.get_running_loop()
        try:
            while (ids := await loop.run_in_executor(self.worker, next, passes, None)) is not None:
                yield TextPiece(decoder.push(ids), len(ids))
        finally:
            await loop.run_in_executor(self.worker, passes.close)
        yield TextPiece("", 0, "stop" if constraint.stopped else "length")


async def engine_stream(engine: Any, spec: GenerationSpec) -> AsyncIterator[TextPiece]:
    """Free text from the engine, one piece per committed block."""
    opts: dict[str, Any] = {"max_new_tokens": spec.max_tokens}
    for key in ("temperature", "top_p", "seed", "effort"):
        if getattr(spec, key) is not None:
            opts[key] = getattr(spec, key)
    tokens = 0
    finish = "length"
    stream = engine.stream(spec.prompt_ids, **opts)
    try:
        async for piece in stream:
            n = len(engine.tokenizer.encode(piece))
            tokens += n
            yield TextPiece(piece, n)
    finally:
        await stream.aclose()
    if tokens < spec.max_tokens:
        finish = "stop"
    yield TextPiece("", 0, finish)
