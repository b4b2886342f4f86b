"""A tool call as the assistant runs it: grounded in the caller's last words, decoded again when it must be.

The model copies a heard value into a call imperfectly ("teachteaer" for "teacher"); `dlm.tools.grounding`
settles the call it wrote against what the caller said, and a call that cannot be settled is decoded again
under the grounded schema. The voice stage (`voice.lm_stage`) steps that decoding pass by pass on the model
worker with :func:`redo_steps`; the terminal chat and the evaluation run it in one go with
:func:`grounded_call`, so all three run the same call for the same words.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from dlm.api.span_generation import one_span
from dlm.api.tool_calls import call_tag_ids
from dlm.effort import Knobs
from dlm.tools.grounding import results_text, settle_call


def heard_and_results(messages: list[dict[str, Any]]) -> tuple[str, str]:
    """What grounding reads of a conversation: the caller's last words and the tools' results so far (where a
    follow-up's "it" comes from)."""
    heard = next((m["content"] for m in reversed(messages) if m.get("role") == "user"), "")
    return heard if isinstance(heard, str) else "", results_text(messages)


def redo_steps(engine: Any, session: Any, prompt: list[int], schema: dict[str, Any], knobs: Knobs,
               max_new_tokens: int) -> Iterator[list[int]] | None:
    """The call decoded again under ``schema`` right after ``prompt`` (the conversation up to the reply that
    wrote it), one pass per ``next``; None where a call cannot be decoded under a schema (a bidirectional model,
    call tags that are not single tokens)."""
    tags = None if engine.model.cfg.bidirectional else call_tag_ids(engine.tokenizer.special_tokens)
    if tags is None:
        return None
    open_id, close_id = tags
    return one_span(engine, session, [*prompt, open_id], schema, close_id, engine.vocab, knobs, max_new_tokens)


def settle_redone(engine: Any, ids: list[int], heard: str, results: str) -> str:
    """A call decoded again, settled once more: its schema leaves an expression free, which gets the caller's
    numbers then."""
    redo = engine.tokenizer.decode(ids, skip_special=False)
    return settle_call(redo, heard, results)[0] or redo


def grounded_call(engine: Any, session: Any, prompt: list[int], body: str, messages: list[dict[str, Any]],
                  knobs: Knobs, max_new_tokens: int) -> tuple[str, bool]:
    """(the call to run for ``body``, the JSON the model wrote after ``messages``; whether it was decoded again)."""
    heard, results = heard_and_results(messages)
    settled, schema = settle_call(body, heard, results)
    steps = None if settled is not None else redo_steps(engine, session, prompt, schema, knobs, max_new_tokens)
    if steps is None:
        return settled or body, False
    return settle_redone(engine, [token for step in steps for token in step], heard, results), True
