"""What the chat routes share: the engine, the model's limits, the request gate and the live sessions."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from aiohttp import web

from dlm.api.generation import GenerationSpec, Outcome, engine_stream, span_stream
from dlm.api.limits import ApiLimits, ConcurrencyGate
from dlm.constrained import writable_characters
from dlm.decoding.logit_bias import COPY_FOLLOW


@dataclass
class ApiState:
    engine: Any  # dlm.engine.Engine (not imported: tests and the voice server hand one over)
    model_name: str
    limits: ApiLimits = field(default_factory=ApiLimits)
    decode_opts: dict[str, Any] = field(default_factory=dict)  # raw engine knobs for free text
    copy_bias: float = COPY_FOLLOW  # a reply's pull toward the caller's words or the tool's result; 0: off

    def __post_init__(self) -> None:
        self.gate = ConcurrencyGate(self.limits.max_concurrent)
        self.sessions: set = set()  # engine sessions of generations in flight

    @property
    def tokenizer(self):
        return self.engine.tokenizer

    @cached_property
    def writable(self) -> frozenset[str]:
        """The characters the model's vocabulary can write, which every schema a request sends must keep to."""
        return writable_characters(self.engine.vocab)

    @property
    def context_length(self) -> int:
        """Room for prompt + completion (:meth:`dlm.engine.Engine.context_room`)."""
        return self.engine.context_room()

    def generate(self, spec: GenerationSpec, outcome: Outcome) -> AsyncIterator[str]:
        if spec.plan is not None:
            return span_stream(self.engine, self.engine.vocab, spec, outcome, self.sessions)
        return engine_stream(self.engine, spec, outcome, self.sessions, self.decode_opts)


STATE = web.AppKey("openai_api", ApiState)
