"""Free text with constrained spans: the decode loop behind JSON output and tool calls.

A generation alternates two modes on one engine session. Free mode is the engine's own block decoder
(:func:`dlm.decoding.block_causal.decode`). When the model commits the span's opening token (the demo
tokenizer's special `<tool_call>`), the free decoder first drafts the span on: a draft that closes with the
closing token and holds JSON the schema accepts is emitted as it is. Otherwise the cache is rewound to the
opening token and the span is decoded again under the schema with :func:`constrained_decode`, until the
schema is complete and the model commits the closing token; then decoding goes back to free mode. Drafting
first matters: the constrained decoder commits left to right, and a diffusion model's calls are exact less
often in that order than in its own (`python -m dlm.eval` measures both: `tool_call_exact_constrained`
and `tool_call_exact_api`). A span can also be open from the first token (response_format, or a forced
tool call whose opening tag ends the prompt). Nothing past what was emitted stays in the cache.

An answer under response_format that may also call a tool (`SpanPlan.call_or_json`) is one or the other: its
first token is the model's pick among the JSON's possible first tokens and the opening tag. The tag makes it
a call, drafted and checked as a call opened in free text is, and the call ends the answer (anything after it
would be content, which the format would hold to JSON again); any other first token starts the JSON.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from dlm.api.constrained_generation import constrained_decode
from dlm.constrained import CompiledSchema, JsonSchemaConstraint, check
from dlm.decoding import block_causal as bc
from dlm.decoding.confidence import Sampling
from dlm.decoding.logit_bias import LogitBias
from dlm.effort import Knobs, resolve


@dataclass(frozen=True)
class SpanPlan:
    """Where constrained spans are: open at the start, and/or opened by a token in free text."""

    start_schema: dict[str, Any] | bool | None = None
    start_end_ids: frozenset[int] = frozenset()  # what may close the initial span (EOS, or a closing tag)
    open_id: int | None = None  # in free text, this token opens a span...
    span_schema: dict[str, Any] | None = None  # ...that must match this schema...
    close_id: int | None = None  # ...and ends with this token
    call_or_json: bool = False  # the initial span's first token may be `open_id`: then one call is the answer


@dataclass
class SpanRun:
    """The state one generation's steps share with the caller (read after the steps end)."""

    finished_by_stop: bool = False
    drafts_kept: int = 0  # spans the free decoder wrote valid and closed
    drafts_redone: int = 0  # spans decoded again under the schema


def span_budget(schema: dict[str, Any] | bool, end_ids: frozenset[int], vocab: list[str]) -> int:
    """The fewest tokens in which the decoder surely writes a whole value of `schema` and the id that ends it:
    under a smaller budget it may run out inside the value (:meth:`TokenGrammar.allowed_within`)."""
    span = JsonSchemaConstraint(schema, vocab, end_ids)
    return 1 + span.grammar.tokens_to_finish(span.state)


def _shortest_call(plan: SpanPlan, vocab: list[str]) -> int:
    """Tokens a whole call takes at least (its tags and its shortest JSON): an answer that may be a call or JSON
    offers the call only within a budget that holds one, or a small `max_tokens` would end every answer inside
    a call."""
    return 1 + span_budget(plan.span_schema, frozenset({plan.close_id}), vocab)


def span_decode(engine: Any, session: Any, prompt: list[int], max_tokens: int, plan: SpanPlan, vocab: list[str],
                knobs: Knobs, seed: int | None, run: SpanRun, bias: LogitBias | None = None) -> Iterator[list[int]]:
    """Yield newly final ids (span tags included, stop ids not); every `next` is one pass, on the worker.
    `bias` steers free text and spans alike toward the phrases a reply copies (:mod:`dlm.decoding.logit_bias`)."""
    cfg = engine.model.cfg
    max_tokens = min(max_tokens, engine.context_room() - len(prompt))  # no position past the context
    policy = dataclasses.replace(resolve(cfg, knobs, engine.stop_ids), first_blocks=())
    # inside spans the same effort's rule sets how confident a token must be to commit beside the leftmost one
    sampling = Sampling(temperature=knobs.temperature, top_p=knobs.top_p)
    span_check = CompiledSchema(plan.span_schema) if plan.span_schema is not None else None
    generator = torch.Generator(device=engine.device).manual_seed(seed) if seed is not None else None
    shortest_call = _shortest_call(plan, vocab) if plan.call_or_json else max_tokens + 1
    with torch.no_grad():
        session.prefill_now(prompt)
        state = session.state(len(prompt) + max_tokens + 2 * cfg.block_size)
        generated: list[int] = []
        schema, end_ids = plan.start_schema, plan.start_end_ids
        while len(generated) < max_tokens:
            if plan.call_or_json and generated[-1:] == [plan.close_id]:
                run.finished_by_stop = True  # the call was the answer
                break
            tokens = prompt + generated
            _commit_full_blocks(state, tokens, cfg.block_size)
            budget = max_tokens - len(generated)
            if schema is not None:  # a constrained span
                instead = (plan.open_id,) if not generated and shortest_call <= budget else ()
                constraint = JsonSchemaConstraint(schema, vocab, end_ids, instead_ids=instead)
                for ids in constrained_decode(cfg, state, tokens, constraint, budget, sampling, policy.bar,
                                              state.last_logits, generator, bias):
                    generated += ids
                    yield ids
                if not constraint.stopped:
                    break  # out of tokens inside the span
                if constraint.stopped_by in instead:  # a call instead of the JSON: drafted in free mode
                    generated.append(plan.open_id)
                    yield [plan.open_id]
                    schema = None
                    continue
                if end_ids != {plan.close_id}:
                    run.finished_by_stop = True  # the span ran to the end of the answer
                    break
                generated.append(plan.close_id)
                yield [plan.close_id]
                schema = None
                continue
            # what the free decoder wrote after an opening token (from the start, if one was just committed)
            draft: list[int] | None = [] if generated[-1:] == [plan.open_id] else None
            finished = False
            steps = bc.decode(cfg, state, tokens, dataclasses.replace(policy, max_new_tokens=budget),
                              state.last_logits, generator, bias)
            for commit in steps:
                ids, finished = commit.token_ids, commit.finished
                if draft is None and plan.open_id is not None and plan.open_id in ids:
                    cut = ids.index(plan.open_id) + 1
                    ids, draft = ids[:cut], ids[cut:]
                elif draft is not None:
                    draft, ids = draft + ids, []
                generated += ids
                yield ids  # possibly empty: one pass, so the caller can stop or interleave here
                if finished or (draft is not None and plan.close_id in draft):
                    break
            steps.close()
            if draft is None:
                run.finished_by_stop = finished and len(generated) < max_tokens
                break
            span = _closed_span(draft, plan.close_id, span_check, vocab)
            if span is not None:
                run.drafts_kept += 1
                generated += span
                yield span
            else:
                run.drafts_redone += 1
                schema, end_ids = plan.span_schema, frozenset({plan.close_id})
            _rewind(state, len(prompt) + len(generated), cfg.token_shift)


def one_span(engine: Any, session: Any, prompt: list[int], schema: dict[str, Any], close_id: int, vocab: list[str],
             knobs: Knobs, max_tokens: int) -> Iterator[list[int]]:
    """The ids of one span decoded under `schema` right after `prompt` (which ends with the span's opening
    token), its closing token left out; every `next` is one pass, on the worker."""
    plan = SpanPlan(start_schema=schema, start_end_ids=frozenset({close_id}), close_id=close_id)
    steps = span_decode(engine, session, prompt, max_tokens, plan, vocab, knobs, None, SpanRun())
    try:
        for ids in steps:
            if close_id in ids:
                yield ids[: ids.index(close_id)]
                return
            yield ids
    finally:
        steps.close()


def _closed_span(draft: list[int], close_id: int | None, schema: CompiledSchema | None,
                 vocab: list[str]) -> list[int] | None:
    """The draft up to its closing token if what it encloses is JSON the span's schema accepts, else None."""
    if close_id not in draft:
        return None
    body = draft[: draft.index(close_id)]
    try:
        value = json.loads("".join(vocab[token] for token in body))
    except json.JSONDecodeError:
        return None
    if schema is not None and check(value, schema):
        return None
    return [*body, close_id]


def _rewind(state: bc.CachedForward, keep: int, token_shift: bool) -> None:
    """Drop what the cache holds past the first `keep` tokens, back to a block boundary it can resume from.

    A token-shift model predicts a block's first token from the position before it, whose logits only a
    commit pass gives back, so it goes one block further back when `keep` is itself a boundary."""
    ends = [0, *(end for end in state.ends if end <= keep)]
    target = ends[-1]
    if token_shift and target == keep and len(ends) > 1:
        target = ends[-2]
    if target < state.length:
        state.truncate(target)


def _commit_full_blocks(state: bc.CachedForward, tokens: list[int], size: int) -> None:
    """Commit whole blocks of `tokens` the cache does not hold yet (a span can end exactly on a boundary)."""
    while len(tokens) - state.length >= size:
        state.commit(torch.tensor(tokens[state.length:state.length + size], dtype=torch.long, device=state.device))
