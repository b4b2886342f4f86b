"""``python -m dlm chat [--model DIR]``: talk to a checkpoint in the terminal, with its tools.

Each reply is printed as its blocks commit, tool calls run for real (clock, calculator, units, timers,
capitals, spelling), grounded in the words typed as the voice assistant grounds them in the words heard
(:mod:`dlm.grounded_call`), and go back to the model, replies are copy-biased toward the words or the result
they answer (:mod:`dlm.decoding.logit_bias`), and every turn ends with its first-block and total time, the
two figures a voice caller feels. An empty line or end of input ends the chat.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from dlm.cli_args import add_placement
from dlm.config import CheckpointError
from dlm.engine import Engine, PromptTooLong
from dlm.grounded_call import grounded_call
from dlm.history import fit_history
from dlm.tools import ToolSession
from dlm.tools.calls import ToolCallSplitter, run_tool_call
from dlm.tools.registry import ASKING_WORDS

MAX_TOOL_ROUNDS = 2
SYSTEM_PROMPT = "you are a helpful voice assistant. keep answers short."


@dataclass
class TurnTiming:
    first_block_ms: float | None = None
    total_ms: float = 0.0


class TerminalChat:
    """One conversation: the history, a tool session and the engine session that caches it."""

    def __init__(self, engine: Engine, out: TextIO, effort: str | None = None, max_tokens: int = 96) -> None:
        self.engine, self.out = engine, out
        self.options: dict[str, Any] = {"effort": effort, "max_new_tokens": max_tokens, "tools": True}
        self.session = engine.new_session()
        self.tools = ToolSession()
        self.history: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM_PROMPT}]

    def turn(self, user_text: str) -> TurnTiming:
        """Answer one user message, running up to MAX_TOOL_ROUNDS tool calls on the way. A message the
        context cannot hold raises PromptTooLong and leaves the history as it was."""
        mark = len(self.history)
        self.history.append({"role": "user", "content": user_text})
        timing, started = TurnTiming(), time.monotonic()
        reply = ""
        for _ in range(MAX_TOOL_ROUNDS + 1):
            self._fit_history()
            round_ = _Round(self._show, timing, started)
            bias = self.engine.copy_bias(self.history, asking_words=ASKING_WORDS)
            try:
                result = self.engine.generate(self.history, session=self.session, on_piece=round_.take, bias=bias,
                                              **self.options)
            except PromptTooLong:
                del self.history[mark:]
                raise
            reply += round_.finish(cut=result.finish_reason == "length")
            if round_.call_body is None:
                break
            call = run_tool_call(self.tools, self._grounded(round_.call_body))
            self._show(f"\n  [tool {call.name}({call.arguments}) -> {call.result}]\n")
            self.history += call.history_messages()
        self.history.append({"role": "assistant", "content": reply.strip()})
        timing.total_ms = 1000 * (time.monotonic() - started)
        return timing

    def _grounded(self, body: str) -> str:
        """The call as the voice assistant would run it for the same words (`dlm.grounded_call`)."""
        knobs, _ = self.engine.knobs(**self.options)
        prompt = self.engine.prompt_ids(self.history, True)
        return grounded_call(self.engine, self.session, prompt, body, self.history, knobs,
                             self.options["max_new_tokens"])[0]

    def _fit_history(self) -> None:
        """Forget the oldest exchanges while the prompt leaves no room for a whole reply in the context."""
        budget = self.engine.context_room() - self.options["max_new_tokens"]
        fit_history(self.history, lambda messages: len(self.engine.prompt_ids(messages, True)), budget)

    def _show(self, text: str) -> None:
        if text:
            self.out.write(text)
            self.out.flush()


class _Round:
    """One generation of a turn: shows speakable text as it commits and keeps a tool call for running."""

    def __init__(self, show: Callable[[str], None], timing: TurnTiming, started: float) -> None:
        self.show, self.timing, self.started = show, timing, started
        self.splitter = ToolCallSplitter()
        self.text = ""
        self.call_body: str | None = None

    def take(self, piece: str) -> None:
        if self.timing.first_block_ms is None:
            self.timing.first_block_ms = 1000 * (time.monotonic() - self.started)
        if self.call_body is not None:
            return  # what the model writes after its call is not part of the answer
        text, self.call_body = self.splitter.push(piece)
        self.show(text)
        self.text += text

    def finish(self, cut: bool) -> str:
        """The round's last text; a call the reply ended inside is run, unless the token cap cut it (``cut``)."""
        if self.call_body is not None:
            return self.text
        tail, self.call_body = self.splitter.flush(cut)
        self.show(tail)
        return self.text + tail


def run_chat(engine: Engine, lines: Iterable[str], out: TextIO, effort: str | None = None,
             prompt: Callable[[], None] | None = None) -> list[TurnTiming]:
    """Chat over ``lines`` (stdin by default) until an empty line; returns each turn's timing."""
    chat, timings = TerminalChat(engine, out, effort), []
    for line in lines:
        text = line.strip()
        if not text:
            break
        out.write("assistant> ")
        try:
            timing = chat.turn(text)
        except PromptTooLong as err:  # one message too long for the model: say so and go on chatting
            out.write(f"(error: {err}; say it in fewer words)\n")
            if prompt is not None:
                prompt()
            continue
        first = "-" if timing.first_block_ms is None else f"{timing.first_block_ms:.0f} ms"
        out.write(f"\n  (first block {first}, total {timing.total_ms:.0f} ms)\n")
        timings.append(timing)
        if prompt is not None:
            prompt()
    return timings


def add_arguments(p: argparse.ArgumentParser, default_model: str | None) -> None:
    p.add_argument("--model", default=default_model, help="checkpoint directory (default: the embedded demo)")
    p.add_argument("--effort", choices=("low", "medium", "high"), default=None)
    add_placement(p)


def _engine(args: argparse.Namespace) -> Engine:
    """The checkpoint's engine, refused before the first turn if it has no chat template to render turns with."""
    engine = Engine.from_dir(args.model, args.dtype, args.device)
    if engine.tokenizer.template is None:
        engine.close()
        raise CheckpointError(f"{Path(args.model) / 'tokenizer_config.json'}: no chat_template; the chat needs one")
    return engine


def run(args: argparse.Namespace) -> int:
    if args.model is None:
        print("error: no --model given and the demo checkpoint dlm/assets/demo is not there", file=sys.stderr)
        return 2
    try:
        engine = _engine(args)
    except (CheckpointError, OSError, ValueError) as exc:  # ValueError: a GPU that is not there
        print(f"error: {exc}", file=sys.stderr)
        return 2
    interactive = sys.stdin.isatty()

    def ask() -> None:
        if interactive:
            sys.stdout.write("you> ")
            sys.stdout.flush()

    print("chat with the model; an empty line ends it")
    ask()
    try:
        run_chat(engine, sys.stdin, sys.stdout, args.effort, ask)
    except KeyboardInterrupt:
        print()
    finally:
        engine.close()
    return 0
