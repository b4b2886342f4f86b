"""`POST /v1/chat/completions`: validate, render the prompt, run `n` choices, answer as JSON or as SSE."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from aiohttp import web

from dlm.api.chat_objects import CompletionIds, Usage, delta_choice, delta_json, message_choice
from dlm.api.chat_request import ChatRequest, parse_chat_request
from dlm.api.choice import ChoiceOutcome, run_choice
from dlm.api.constrained_generation import UnsupportedModel, check_supported
from dlm.api.errors import APIError, bad_request
from dlm.api.generation import GenerationSpec, Outcome
from dlm.api.limits import read_json
from dlm.api.prompt import Prompt, build_prompt
from dlm.api.span_generation import SpanPlan, span_budget
from dlm.api.span_plan import plan_spans
from dlm.api.sse import open_stream, send_done, send_event
from dlm.api.state import STATE, ApiState
from dlm.api.tool_calls import Delta
from dlm.tools.registry import asking_words

log = logging.getLogger(__name__)


async def chat_completions(request: web.Request) -> web.StreamResponse:
    state: ApiState = request.app[STATE]
    body = await read_json(request, state.limits.max_body_bytes)
    # off the event loop: checking and compiling a request's schemas can take a while, and streams go on meanwhile
    req = await asyncio.to_thread(parse_chat_request, body, state.limits, state.writable)
    if req.model != state.model_name:
        raise APIError(404, f"The model {req.model!r} does not exist; this server serves {state.model_name!r}",
                       "model", "model_not_found")
    with state.gate.slot():
        prompt = build_prompt(state.tokenizer, req)
        specs = _specs(state, req, prompt)
        if req.stream:
            return await _stream(request, state, req, prompt, specs)
        return await _complete(state, req, prompt, specs)


def _specs(state: ApiState, req: ChatRequest, prompt: Prompt) -> list[GenerationSpec]:
    n_prompt = len(prompt.ids)
    limit = min(state.limits.max_prompt_tokens, state.context_length - 1)  # the context keeps a token for a reply
    if n_prompt > limit:
        raise bad_request(f"the prompt has {n_prompt} tokens; the limit is {limit} (the server's limit "
                          f"{state.limits.max_prompt_tokens}, the model's context length {state.context_length} "
                          "less one token for the reply)", "messages", "context_length_exceeded")
    room = state.context_length - n_prompt
    max_tokens = req.max_tokens or min(state.limits.max_completion_tokens, room)
    if max_tokens > room:
        key = req.max_tokens_param
        raise bad_request(f"the prompt ({n_prompt} tokens) plus {key} ({max_tokens}) exceeds the model's context "
                          f"length ({state.context_length})", key, "context_length_exceeded")
    plan = plan_spans(req, state.tokenizer, state.engine.stop_ids)
    if plan is not None:
        try:
            check_supported(state.engine.model.cfg)
        except UnsupportedModel as exc:
            raise bad_request(str(exc), "response_format" if req.json_schema is not None else "tools") from None
        _refuse_a_budget_no_answer_fits(req, plan, state.engine.vocab, max_tokens)
    # the copy bias as the voice assistant decodes (none for the bidirectional families)
    bias = state.engine.copy_bias(req.messages, state.copy_bias, asking_words(req.tools))
    return [
        GenerationSpec(prompt_ids=prompt.ids, max_tokens=max_tokens, temperature=req.temperature,
                       top_p=req.top_p, seed=None if req.seed is None else req.seed + i, effort=req.effort,
                       plan=plan, bias=bias)
        for i in range(req.n)
    ]


def _refuse_a_budget_no_answer_fits(req: ChatRequest, plan: SpanPlan, vocab: list[str], max_tokens: int) -> None:
    """An answer that starts under a schema (response_format, a forced call) cut off by `max_tokens` is JSON
    that does not parse: refused instead, naming the fewest tokens that surely hold a whole one."""
    if plan.start_schema is None:
        return
    least = span_budget(plan.start_schema, plan.start_end_ids, vocab)
    if max_tokens < least:
        what = "JSON answer" if req.json_schema is not None else "tool call"
        given = "" if req.max_tokens is not None else " (the most this server and prompt allow)"
        key = req.max_tokens_param
        raise bad_request(f"{key} is {max_tokens}{given}, and the shortest {what} this request allows takes {least} "
                          f"tokens with its end: {key} must be at least {least}", key)


async def _run(state: ApiState, req: ChatRequest, prompt: Prompt, spec: GenerationSpec, emit) -> ChoiceOutcome:
    outcome = Outcome()
    return await run_choice(state.generate(spec, outcome), outcome, req.stop, req.tool_choice == "auto",
                            prompt.forced_prefix, emit)


async def _complete(state: ApiState, req: ChatRequest, prompt: Prompt,
                    specs: list[GenerationSpec]) -> web.Response:
    async def one(spec: GenerationSpec) -> tuple[list[Delta], ChoiceOutcome]:
        collected: list[Delta] = []

        async def emit(deltas: list[Delta]) -> None:
            collected.extend(deltas)

        return collected, await _run(state, req, prompt, spec, emit)

    results = await _all(one(s) for s in specs)
    usage = Usage(len(prompt.ids), sum(o.completion_tokens for _, o in results))
    ids = CompletionIds(state.model_name)
    choices = [message_choice(i, deltas, o.finish_reason) for i, (deltas, o) in enumerate(results)]
    return web.json_response(ids.completion(choices, usage))


async def _stream(request: web.Request, state: ApiState, req: ChatRequest, prompt: Prompt,
                  specs: list[GenerationSpec]) -> web.StreamResponse:
    ids = CompletionIds(state.model_name)
    resp = await open_stream(request)

    async def send(choice: dict[str, Any]) -> None:
        await send_event(resp, ids.chunk([choice], include_usage=req.include_usage))

    async def one(index: int, spec: GenerationSpec) -> ChoiceOutcome:
        await send(delta_choice(index, {"role": "assistant", "content": ""}))

        async def emit(deltas: list[Delta]) -> None:
            for d in deltas:
                await send(delta_choice(index, delta_json(d)))

        outcome = await _run(state, req, prompt, spec, emit)
        await send(delta_choice(index, {}, outcome.finish_reason))
        return outcome

    try:
        outcomes = await _all(one(i, s) for i, s in enumerate(specs))
    except (ConnectionError, asyncio.CancelledError):
        raise  # the client went away: nothing left to tell it
    except Exception:  # headers are sent, so the error travels in the stream, as OpenAI's does
        log.exception("chat completion stream failed")
        await send_event(resp, APIError(500, "generation failed; see the server log").body())
        await send_done(resp)
        return resp
    if req.include_usage:
        usage = Usage(len(prompt.ids), sum(o.completion_tokens for o in outcomes))
        await send_event(resp, ids.chunk([], usage, include_usage=True))
    await send_done(resp)
    return resp


async def _all(coros) -> list:
    """Run the choices side by side; if one fails (or the client left), cancel the rest so their sessions end."""
    tasks = [asyncio.ensure_future(c) for c in coros]
    try:
        return await asyncio.gather(*tasks)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
