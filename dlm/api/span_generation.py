"""Free text with constrained spans: the decode loop behind JSON output and tool calls.

A generation alternates two modes on one engine session. Free mode is the engine's own block decoder
(:func:`dlm.decoding.block_causal.decode`). When the model commits the span's opening token (the demo
tokenizer's special `<tool_call>`), decoding switches to :func:`constrained_decode` under the tools' call
schema until the schema is complete and the model commits the closing token, then goes back to free mode.
A span can also be open from the first token (response_format, or a forced tool call whose opening tag
ends the prompt). Tokens the free decoder had already guessed past the opening token are dropped, never
committed: the cache only ever holds what was emitted.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from dlm.api.constrained_generation import constrained_decode
from dlm.constrained import JsonSchemaConstraint
from dlm.decoding import block_causal as bc
from dlm.decoding.confidence import Sampling
from dlm.effort import Knobs, resolve


@dataclass(frozen=True)
class SpanPlan:
    """Where constrained spans are: open at the start, and/or opened by a token in free text."""

    start_schema: dict[str, Any] | bool | None = None
    start_end_ids: frozenset[int] = frozenset()  # what may close the initial span (EOS, or a closing tag)
    open_id: int | None = None  # in free text, this token opens a span...
    span_schema: dict[str, Any] | None = None  # ...that must match this schema...
    close_id: int | None = None  # ...and ends with this token


@dataclass
class SpanRun:
    """The state one generation's steps share with the caller (read after the steps end)."""

    finished_by_stop: bool = False


def span_decode(engine: Any, session: Any, prompt: list[int], max_tokens: int, plan: SpanPlan, vocab: list[str],
                knobs: Knobs, seed: int | None, run: SpanRun) -> Iterator[list[int]]:
    """Yield newly final ids (span tags included, stop ids not); every `next` is one pass, on the worker."""
    cfg = engine.model.cfg
    policy = dataclasses.replace(resolve(cfg, knobs, engine.stop_ids), first_blocks=())
    # inside spans the same effort sets how confident a token must be to commit beside the leftmost one
    threshold = policy.threshold if policy.threshold is not None else float("inf")
    sampling = Sampling(temperature=knobs.temperature, top_p=knobs.top_p)
    generator = torch.Generator(device=engine.device).manual_seed(seed) if seed is not None else None
    with torch.no_grad():
        session.prefill_now(prompt)
        state = session.state(len(prompt) + max_tokens + 2 * cfg.block_size)
        generated: list[int] = []
        schema, end_ids = plan.start_schema, plan.start_end_ids
        while len(generated) < max_tokens:
            tokens = prompt + generated
            _commit_full_blocks(state, tokens, cfg.block_size)
            budget = max_tokens - len(generated)
            if schema is not None:  # a constrained span
                constraint = JsonSchemaConstraint(schema, vocab, end_ids)
                for ids in constrained_decode(cfg, state, tokens, constraint, budget, sampling, threshold,
                                              state.last_logits, generator):
                    generated += ids
                    yield ids
                if not constraint.stopped:
                    break  # out of tokens inside the span
                if end_ids != {plan.close_id}:
                    run.finished_by_stop = True  # the span ran to the end of the answer
                    break
                generated.append(plan.close_id)
                yield [plan.close_id]
                schema = None
                continue
            opened = False
            steps = bc.decode(cfg, state, tokens, dataclasses.replace(policy, max_new_tokens=budget),
                              state.last_logits, generator)
            for commit in steps:
                ids = commit.token_ids
                if plan.open_id is not None and plan.open_id in ids:
                    ids, opened = ids[: ids.index(plan.open_id) + 1], True
                generated += ids
                yield ids  # possibly empty: one pass, so the caller can stop or interleave here
                if opened:
                    break
                if commit.finished:
                    run.finished_by_stop = len(generated) < max_tokens
                    break
            steps.close()
            if not opened:
                break
            schema, end_ids = plan.span_schema, frozenset({plan.close_id})


def _commit_full_blocks(state: bc.CachedForward, tokens: list[int], size: int) -> None:
    """Commit whole blocks of `tokens` the cache does not hold yet (a span can end exactly on a boundary)."""
    while len(tokens) - state.length >= size:
        state.commit(torch.tensor(tokens[state.length:state.length + size], dtype=torch.long, device=state.device))
