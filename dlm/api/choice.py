"""One choice of a chat completion: engine text pieces -> stop strings -> tool-call parsing -> deltas.

Streaming and non-streaming responses both run this; they differ only in what `emit` does with the deltas.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from dataclasses import dataclass

from dlm.api.generation import Outcome
from dlm.api.stop_strings import FreeTextStops
from dlm.api.tool_calls import CLOSE, OPEN, ContentDelta, Delta, ToolCallStream

Emit = Callable[[list[Delta]], Awaitable[None]]


@dataclass
class ChoiceOutcome:
    finish_reason: str  # stop, length or tool_calls
    completion_tokens: int


async def run_choice(pieces: AsyncIterator[str], outcome: Outcome, stops: tuple[str, ...], parse_tools: bool,
                     forced_prefix: str, emit: Emit) -> ChoiceOutcome:
    """Drain `pieces` into `emit`; closing the generator on the way out frees the engine session.

    `outcome` is the generation's own record, final once `pieces` is closed. The completion's tokens are all
    it generated unless a stop string cut it; then, as OpenAI counts the completion it returns, only those that
    wrote the text before the stop (:meth:`Outcome.tokens_for`): the decoder commits whole blocks, so tokens
    past the stop were decoded but are never returned. A stop string never cuts a tool call (:class:`FreeTextStops`).
    """
    parser = ToolCallStream() if parse_tools or forced_prefix else None
    matcher = FreeTextStops(stops, (OPEN, CLOSE) if parser else ())

    def deltas(text: str) -> list[Delta]:
        if parser is None:
            return [ContentDelta(text)] if text else []
        return _merge(parser.feed(text)) if text else []

    if forced_prefix:  # the opening tag: the matcher, too, is inside the call
        await emit(deltas(matcher.feed(forced_prefix)))
    kept = 0  # characters of the generated text let through before any stop string
    async with aclosing(pieces):
        async for piece in pieces:
            text = matcher.feed(piece)
            kept += len(text)
            out = deltas(text)
            if out:
                await emit(out)
            if matcher.stopped:
                break
    held = matcher.flush()  # may hold a stop yet: text it had held as the start of a tag
    kept += len(held)
    finish = "stop" if matcher.stopped else outcome.finish_reason
    tail = deltas(held) + (_merge(parser.finish()) if parser else [])
    if tail:
        await emit(tail)
    if parser is not None and parser.calls:
        finish = "tool_calls"
    tokens = outcome.tokens_for(kept) if matcher.stopped else outcome.completion_tokens
    return ChoiceOutcome(finish, tokens)


def _merge(deltas: list[Delta]) -> list[Delta]:
    """Adjacent content deltas as one, so a block of text becomes one chunk."""
    out: list[Delta] = []
    for d in deltas:
        if out and isinstance(d, ContentDelta) and isinstance(out[-1], ContentDelta):
            out[-1] = ContentDelta(out[-1].text + d.text)
        else:
            out.append(d)
    return out
