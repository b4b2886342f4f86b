"""Tool calls in the demo model's format, `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, parsed
out of the generated text as it streams.

The parser turns text pieces into content deltas and tool-call deltas: a call's name is announced as soon as
it is decoded and its arguments follow piece by piece, which is what OpenAI clients expect when streaming.
Non-streaming responses run the same parser over the whole text, so both paths agree on every edge case.
"""

from __future__ import annotations

import json
import re
import secrets
from dataclasses import dataclass
from typing import Any

from dlm.api.chat_request import ToolSpec
from dlm.api.stop_strings import partial_prefix_length

OPEN, CLOSE = "<tool_call>", "</tool_call>"
_HEAD = re.compile(r'\s*\{\s*"name"\s*:\s*"((?:[^"\\]|\\.)*)"\s*,\s*"arguments"\s*:\s*')


def call_tag_ids(special_tokens: dict[str, int]) -> tuple[int, int] | None:
    """The ids of the call tags when both are single tokens (a call can then open mid-text and be decoded under
    a schema), else None."""
    open_id, close_id = special_tokens.get(OPEN), special_tokens.get(CLOSE)
    return (open_id, close_id) if open_id is not None and close_id is not None else None


@dataclass
class ContentDelta:
    text: str


@dataclass
class ToolCallDelta:
    index: int
    arguments: str
    id: str | None = None  # set on a call's first delta, with its name
    name: str | None = None


Delta = ContentDelta | ToolCallDelta


def call_schema(tools: tuple[ToolSpec, ...], name: str | None) -> dict[str, Any]:
    """The JSON a call must be: one of the allowed functions (`name`, or any) with the arguments it is decoded
    under (`ToolSpec.call_parameters`: a forced call's are its parameters, which must be enforceable).

    A `$ref` resolves against the root of the schema it is in, so each tool's `$defs` (as Pydantic writes
    them) move to the call schema's root, renamed under the tool's name so that two tools' names cannot meet."""
    variants, defs = [], {}
    for tool in tools:
        if name in (None, tool.name):
            arguments, own = _lift_defs(tool.call_parameters, tool.name)
            defs |= own
            variants.append({"type": "object", "properties": {"name": {"const": tool.name}, "arguments": arguments},
                             "required": ["name", "arguments"], "additionalProperties": False})
    schema = variants[0] if len(variants) == 1 else {"anyOf": variants}
    return {**schema, "$defs": defs} if defs else schema


def _lift_defs(parameters: dict[str, Any], tool: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """`parameters` without its `$defs`/`definitions`, its local refs renamed `#/$defs/<tool>.<name>`; and
    those definitions under their new names."""
    prefixes = ("#/$defs/", "#/definitions/")

    def renamed(node: Any) -> Any:
        if isinstance(node, list):
            return [renamed(item) for item in node]
        if not isinstance(node, dict):
            return node
        out = {key: renamed(value) for key, value in node.items()}
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith(prefixes):
            out["$ref"] = f"#/$defs/{tool}.{ref.split('/', 2)[2]}"
        return out

    defs = {f"{tool}.{key}": renamed(value) for group in ("$defs", "definitions")
            for key, value in (parameters.get(group) or {}).items()}
    return renamed({k: v for k, v in parameters.items() if k not in ("$defs", "definitions")}), defs


def new_call_id() -> str:
    return "call_" + secrets.token_hex(12)


class _ValueScanner:
    """Finds where one JSON value ends in a stream of characters (strings and nesting aware)."""

    def __init__(self) -> None:
        self.depth = 0
        self.in_string = False
        self.escaped = False
        self.started = False
        self.done = False

    def take(self, text: str) -> int:
        """How many characters of `text` belong to the value; sets `done` when it ended inside them."""
        for i, ch in enumerate(text):
            if not self.started:
                if ch.isspace():
                    continue
                self.started = True
            if self.in_string:
                if self.escaped:
                    self.escaped = False
                elif ch == "\\":
                    self.escaped = True
                elif ch == '"':
                    self.in_string = False
                continue
            if ch == '"':
                self.in_string = True
            elif ch in "{[":
                self.depth += 1
            elif ch in "}]":
                self.depth -= 1
                if self.depth == 0:
                    self.done = True
                    return i + 1
        return len(text)


class ToolCallStream:
    """Incremental parser: `feed` text pieces, then `finish`; each returns the deltas now certain."""

    def __init__(self) -> None:
        self.buffer = ""
        self.in_call = False
        self.calls = 0
        self._named = False
        self._args: _ValueScanner | None = None

    def feed(self, text: str) -> list[Delta]:
        self.buffer += text
        out: list[Delta] = []
        while True:
            step = self._call_step() if self.in_call else self._text_step()
            if step is None:
                return out
            out.extend(step)

    def finish(self) -> list[Delta]:
        """Flush: held-back text is content; an unterminated call counts if its JSON is whole (a forced call
        ends with its JSON: the stop comes before any closing tag). One cut off by `max_tokens` or a stop
        string does not, so the finish reason stays `length` or `stop`; and one cut before its name is
        dropped, not shown to the caller as the markup it is."""
        rest, self.buffer = self.buffer, ""
        if not self.in_call:
            return [ContentDelta(rest)] if rest else []
        self.in_call = False
        if self._named:
            assert self._args is not None
            self.calls += self._args.done
            return []
        return self._close_unnamed(rest, give_back=False)

    def _text_step(self) -> list[Delta] | None:
        stray = self.buffer.find(CLOSE)
        start = self.buffer.find(OPEN)
        if stray >= 0 and (start < 0 or stray < start):  # a closing tag with no call open: model noise
            before, self.buffer = self.buffer[:stray], self.buffer[stray + len(CLOSE):]
            return [ContentDelta(before)] if before else []
        if start >= 0:
            before, self.buffer = self.buffer[:start], self.buffer[start + len(OPEN):]
            self.in_call, self._named, self._args = True, False, None
            return [ContentDelta(before)] if before else []
        keep = max(partial_prefix_length(self.buffer, OPEN), partial_prefix_length(self.buffer, CLOSE))
        emit = self.buffer[: len(self.buffer) - keep]
        if not emit:
            return None
        self.buffer = self.buffer[len(emit):]
        return [ContentDelta(emit)]

    def _call_step(self) -> list[Delta] | None:
        if not self._named:
            head = _HEAD.match(self.buffer)
            if head:
                self._named, self._args = True, _ValueScanner()
                self.buffer = self.buffer[head.end():]
                name = json.loads(f'"{head.group(1)}"')
                return [ToolCallDelta(self.calls, "", new_call_id(), name)]
            end = self.buffer.find(CLOSE)
            if end < 0:
                return None
            body, self.buffer = self.buffer[:end], self.buffer[end + len(CLOSE):]
            return self._close_unnamed(body)
        assert self._args is not None
        end = self.buffer.find(CLOSE)
        if not self._args.done:
            scope = self.buffer if end < 0 else self.buffer[:end]
            n = self._args.take(scope)
            piece, self.buffer = self.buffer[:n], self.buffer[n:]
            if end >= 0 and not self._args.done:  # the model closed the call inside its arguments
                self._args.done = True
            if piece:
                return [ToolCallDelta(self.calls, piece)]
            return None if end < 0 else []
        if end < 0:
            return None
        self.buffer = self.buffer[end + len(CLOSE):]
        self.in_call = False
        self.calls += 1
        return []

    def _close_unnamed(self, body: str, give_back: bool = True) -> list[Delta]:
        """A call whose JSON did not start with its name: emit it whole, or (`give_back`) return the text as
        content."""
        self.in_call = False
        try:
            call = json.loads(body)
        except json.JSONDecodeError:
            call = None
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            return [ContentDelta(OPEN + body)] if give_back else []
        args = call.get("arguments", {})
        delta = ToolCallDelta(self.calls, args if isinstance(args, str) else json.dumps(args), new_call_id(),
                              call["name"])
        self.calls += 1
        return [delta]

