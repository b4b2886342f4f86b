"""What the chat routes share: the engine, the model's tokenizer and limits, and the request gate."""

from __future__ import annotations

import concurrent.futures
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from aiohttp import web

from dlm.api.generation import ConstrainedDecoder, GenerationSpec, TextPiece, engine_stream
from dlm.api.limits import ApiLimits, ConcurrencyGate
from dlm.constrained import vocab_strings
from dlm.model import Transformer
from dlm.tokenizer import Tokenizer


@dataclass
class ApiState:
    engine: Any
    model: Transformer
    tokenizer: Tokenizer
    model_name: str
    limits: ApiLimits = field(default_factory=ApiLimits)

    def __post_init__(self) -> None:
        self.gate = ConcurrencyGate(self.limits.max_concurrent)

    @property
    def context_length(self) -> int:
        """Room for prompt + completion, less one block so the last block never runs past the positions."""
        cfg = self.model.cfg
        return cfg.max_position_embeddings - cfg.block_size

    @cached_property
    def constrained(self) -> ConstrainedDecoder:
        """Built on first use: the vocabulary-as-text table costs one decode per token id."""
        return ConstrainedDecoder(
            self.model, self.tokenizer, vocab_strings(self.tokenizer.backend),
            frozenset(self.tokenizer.stop_ids(self.model.cfg)),
            concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="constrained"),
        )

    def generate(self, spec: GenerationSpec) -> AsyncIterator[TextPiece]:
        if spec.schema is not None:
            return self.constrained.stream(spec)
        return engine_stream(self.engine, spec)


STATE = web.AppKey("openai_api", ApiState)
