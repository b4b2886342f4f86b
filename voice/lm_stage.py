"""The thinking stage: the conversation's LM session, its history, prefill while the caller talks, tool calls.

The engine keeps the conversation's KV cache in a session; this stage keeps the messages that cache
stands for. While the caller speaks, the confirmed words are rendered as the start of the next user
message and prefilled, so that when the turn ends the engine only has the tail of the prompt left to
process (it rolls its cache back to the longest common prefix when the final transcript differs).
Tool calls arrive inside the reply text as ``<tool_call>{...}</tool_call>``; they are cut out of what
is spoken, run with :mod:`dlm.tools`, and their results go back to the model for another round. Each round's
reply is copy-biased toward what it answers, the caller's words or the tool's result
(:mod:`dlm.decoding.logit_bias`), so a name it repeats comes out as it was heard. A call
whose names or numbers the caller did not say is decoded again with only heard ones allowed
(:mod:`dlm.tools.grounding`), as the API's spans redo a draft that breaks their schema.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from dlm.effort import Knobs
from dlm.grounded_call import heard_and_results, redo_steps, settle_redone
from dlm.history import fit_history
from dlm.tools import ToolSession
from dlm.tools.calls import ToolCall, ToolCallSplitter, changes_state, run_tool_call, spoken_result
from dlm.tools.grounding import settle_call
from dlm.tools.registry import ASKING_WORDS
from voice.config import LmConfig
from voice.events import SESSION_DEFAULTS, ResponseOptions, TokenUsage

_CUT_MARK = "\u2063\u2063cut-here\u2063\u2063"
"""Placed at the end of a partial user message so the rendered prompt can be cut right after its words."""


class LmStage:
    """One conversation with the engine: history, session cache, prefill and streamed replies."""

    def __init__(self, engine: Any, config: LmConfig) -> None:
        self.engine = engine
        self.config = config
        self._configured_cap = config.max_new_tokens  # a client may lower ``config``'s for its session
        self.session = engine.new_session()
        self.history: list[dict[str, Any]] = []
        self._forgotten = 0  # messages trimmed from the history's start, so that marks outlive trimming
        self._instructions = ""  # the session's system message (a reply may have its own)
        self.instruct(config.system_prompt)
        self.tools = ToolSession()
        self._lock = asyncio.Lock()  # one engine call on the session at a time
        self._prefill_wanted: str | None = None
        self._prefilled: str | None = None
        self._reply_message: dict[str, Any] | None = None  # what the last record_reply added, for amend_last_reply
        self.calls_redone = 0  # calls decoded again because they carried something the caller did not say
        self.stopped_at_cap = False  # the last reply ran into its token cap rather than ending itself

    def instruct(self, instructions: str) -> None:
        """The system message from now on (none when empty); the session cache keeps what still matches.
        Raises ``ValueError``, changing nothing, for instructions that leave no room for a reply."""
        self.check_instructions(instructions)
        self._instructions = instructions
        self._set_system_message(instructions)

    def check_instructions(self, instructions: str) -> None:
        """Raise ``ValueError`` for instructions that leave no room for a reply: the history is trimmed to fit
        the context, but the system message is kept, so every reply under them would fail."""
        if instructions:
            alone = self._prompt_len([{"role": "system", "content": instructions}, {"role": "user", "content": ""}])
            room = self.engine.context_room() - self.config.max_new_tokens
            if alone > room:
                raise ValueError(f"the instructions take {alone} tokens with a question, and the model's context "
                                 f"leaves {room} before a reply")

    def _set_system_message(self, instructions: str) -> None:
        if self._system_messages():
            del self.history[0]
        if instructions:
            self.history.insert(0, {"role": "system", "content": instructions})

    def _stream_options(self, max_new_tokens: int) -> dict[str, Any]:
        cfg = self.config
        options = {"max_new_tokens": max_new_tokens, "temperature": cfg.temperature, "block_size": cfg.block_size,
                   "first_block_size": cfg.first_block_size, "effort": cfg.effort}
        if cfg.passes_per_block is not None:
            options["passes_per_block"] = cfg.passes_per_block
        else:
            options["threshold"] = cfg.threshold
        options = {k: v for k, v in options.items() if v is not None}
        return {**options, "tools": True} if cfg.tools else options

    def _prompt_len(self, messages: list[dict[str, Any]]) -> int:
        return len(self.engine.prompt_ids(messages, True if self.config.tools else None))

    def _fit_history(self, max_new_tokens: int) -> None:
        """Leave room in the model's context for a whole reply (``dlm.history.fit_history``)."""
        budget = self.engine.context_room() - max_new_tokens
        self._forgotten += fit_history(self.history, self._prompt_len, budget)

    def partial_prompt_ids(self, user_text: str) -> list[int]:
        """Token ids of the history plus the start of a user message holding ``user_text`` (no end marker)."""
        messages = [*self.history, {"role": "user", "content": user_text + _CUT_MARK}]
        rendered = self.engine.render_prompt(
            messages, add_generation_prompt=False, tools=True if self.config.tools else None
        )
        return self.engine.tokenizer.encode(rendered[: rendered.index(_CUT_MARK)])

    async def prefill_partial(self, user_text: str) -> bool:
        """Best effort: prefill the confirmed words so far; skipped while a reply holds the session.

        Calls that arrive while one prefill runs coalesce: only the newest text is prefilled next.
        """
        self._prefill_wanted = user_text
        if self._lock.locked():
            return False
        async with self._lock:
            while self._prefill_wanted is not None and self._prefill_wanted != self._prefilled:
                text, self._prefill_wanted = self._prefill_wanted, None
                await self.session.aprefill(self.partial_prompt_ids(text))
                self._prefilled = text
        return True

    async def reply(
        self, user_text: str | None, before_tool: Callable[[], Awaitable[Any]] | None = None,
        options: ResponseOptions = SESSION_DEFAULTS, usage: TokenUsage | None = None,
    ) -> AsyncIterator[str | ToolCall]:
        """Stream the answer to ``user_text`` (None: to the history as it is): speakable text and tool calls.

        The user message joins the history at once, tool calls and results as they happen; the
        assistant's spoken message is added by :meth:`record_reply` with what was actually said.
        ``before_tool`` is awaited before a tool that changes state runs (a speculative reply must not set
        timers); one that only reads runs at once, so a reply held during the hangover is ready when it ends.
        ``options`` hold for this reply alone: its token cap (each decoding round's, instead of the config's;
        afterwards :attr:`stopped_at_cap` says whether the reply ran into it) and its instructions, the system
        message while it is decoded (checked with :meth:`check_instructions` beforehand). ``usage`` counts the
        tokens each decoding round reads and writes.
        """
        cap = self.config.max_new_tokens if options.max_tokens is None else options.max_tokens
        self.stopped_at_cap = False
        if user_text is not None:
            self.history.append({"role": "user", "content": user_text})
        async with self._lock:
            self._prefilled = None
            self._set_system_message(self._instructions if options.instructions is None else options.instructions)
            try:
                async for out in self._rounds(cap, before_tool, usage or TokenUsage()):
                    yield out
            finally:  # the session's instructions again, whatever became of the reply
                self._set_system_message(self._instructions)

    async def _rounds(self, cap: int, before_tool: Callable[[], Awaitable[Any]] | None,
                      usage: TokenUsage) -> AsyncIterator[str | ToolCall]:
        """The reply's decoding rounds: text, then a tool call and its result, then text again, at most
        ``max_tool_rounds`` calls; a reply that said nothing says the fallback (or the last result), unless a
        cap the client set below the configured one stopped it."""
        spoke, fallback = False, self.config.fallback_reply
        for round_no in range(self.config.max_tool_rounds + 1):
            self._fit_history(cap)
            splitter = ToolCallSplitter()
            call_body: str | None = None
            # closed on leaving, so the engine is done with the session before the next round starts
            bias = self.engine.copy_bias(self.history, self.config.copy_bias, ASKING_WORDS)
            async with contextlib.aclosing(self.engine.stream(self.history, session=self.session, bias=bias,
                                                              **self._stream_options(cap))) as stream:
                async for piece in stream:
                    text, call_body = splitter.push(piece)
                    if text.strip():
                        spoke = True
                    if text:
                        yield text
                    if call_body is not None:
                        break
            result = self.session.last_result
            if result is not None:
                usage.add(result.prompt_tokens, len(result.token_ids))
            cut = call_body is None and result is not None and result.finish_reason == "length"
            tail, unfinished = splitter.flush(cut)
            if call_body is None:
                call_body = unfinished  # a call the reply ended inside ("pretgaria"}}}): grounding mends it
            if call_body is None or round_no == self.config.max_tool_rounds:
                self.stopped_at_cap = cut
                # never leave the caller in silence, unless their own token cap cut the reply before it said
                # anything (a tool call it had begun): "sorry, I did not get that" would be untrue, and over the cap
                clients_cap = self.stopped_at_cap and cap < self._configured_cap
                if tail.strip() or not (spoke or clients_cap):
                    yield tail if tail.strip() else fallback
                return
            call_body = await self._grounded(call_body, cap, usage)
            if before_tool is not None and changes_state(call_body):
                await before_tool()
            call = run_tool_call(self.tools, call_body)
            fallback = spoken_result(call.result) or fallback
            self.history += call.history_messages()
            yield call

    async def _grounded(self, body: str, max_new_tokens: int, usage: TokenUsage | None = None) -> str:
        """The call as the caller's last words (and, for a follow-up's expression, the tools' earlier results)
        allow it (`dlm.grounded_call`): kept when it fits, else decoded again on the session under the grounded
        schema, pass by pass on the model worker, and settled once more."""
        heard, results = heard_and_results(self.history)
        settled, schema = settle_call(body, heard, results)
        if settled is not None:
            return settled
        prompt = self.engine.prompt_ids(self.history, True)
        steps = redo_steps(self.engine, self.session, prompt, schema, Knobs(effort=self.config.effort),
                           max_new_tokens)
        if steps is None:
            return body
        self.calls_redone += 1
        loop, ids = asyncio.get_running_loop(), []
        try:
            while (step := await loop.run_in_executor(self.engine.worker, next, steps, None)) is not None:
                ids += step
        finally:
            self.engine.worker.submit(steps.close)
        if usage is not None:
            usage.add(len(prompt) + 1, len(ids))  # + the opening tag redo_steps adds
        return settle_redone(self.engine, ids, heard, results)

    def mark(self) -> int:
        """Where the conversation stands, for :meth:`rollback`: a count of its messages since it began, the
        system message aside, so neither trimming old exchanges nor new instructions move it."""
        return self._forgotten + len(self.history) - self._system_messages()

    def rollback(self, mark: int) -> None:
        """Forget the messages added since :meth:`mark` gave ``mark`` (a speculative reply that was discarded)."""
        del self.history[self._system_messages() + max(0, mark - self._forgotten):]

    def _system_messages(self) -> int:
        return 1 if self.history and self.history[0]["role"] == "system" else 0

    def add_user_message(self, text: str) -> None:
        """A typed message, answered by a later reply; the oldest exchanges go when the context cannot hold
        them, so that messages typed without a response never pile up."""
        self.history.append({"role": "user", "content": text})
        self._fit_history(self.config.max_new_tokens)

    def record_reply(self, text: str) -> None:
        """The assistant's final message of this turn: the words the caller heard."""
        self._reply_message = {"role": "assistant", "content": text.strip()} if text.strip() else None
        if self._reply_message is not None:
            self.history.append(self._reply_message)

    def amend_last_reply(self, text: str) -> None:
        """A barge-in or truncation after the reply was recorded: keep only ``text`` of it (nothing: forget it).

        Only the message the last :meth:`record_reply` added is touched, so a reply that said nothing, or one
        already forgotten, never amends the reply before it.
        """
        at = next((i for i, m in enumerate(self.history) if m is self._reply_message), None)
        if at is None:
            return
        if text.strip():
            self.history[at]["content"] = text.strip()
        else:
            del self.history[at]

    def close(self) -> None:
        self.session.release()
