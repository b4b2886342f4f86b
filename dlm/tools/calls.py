"""Tool calls inside generated text: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``.

Shared by everything that runs the assistant's tools on streamed output (the voice pipeline, the terminal
chat): split speakable text from calls as pieces arrive, parse and run a call, write it into the history,
and find the words a tool result offers for speech.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from dlm.tools.registry import TOOLS, ToolSession

TOOL_OPEN = "<tool_call>"
TOOL_CLOSE = "</tool_call>"


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict[str, Any]
    result: str

    def history_messages(self) -> list[dict[str, Any]]:
        """The assistant's call and the tool's result, as the chat template expects them in the history."""
        return [{"role": "assistant", "content": "", "tool_calls": [
                    {"type": "function", "function": {"name": self.name, "arguments": self.arguments}}]},
                {"role": "tool", "name": self.name, "content": self.result}]


def run_tool_call(tools: ToolSession, body: str) -> ToolCall:
    """Parse and run one call; a malformed call becomes an error result the model can read, never a crash."""
    try:
        name, arguments = parse_tool_call(body)
    except ValueError as err:
        return ToolCall("invalid", {}, json.dumps({"error": str(err)}))
    return ToolCall(name, arguments, tools.run_safely(name, arguments))


def changes_state(body: str) -> bool:
    """Whether running this call would change the session: a known tool that does (`Tool.changes_state`). A
    malformed call or an unknown tool only gets an error result back."""
    try:
        name, _ = parse_tool_call(body)
    except ValueError:
        return False
    tool = TOOLS.get(name)
    return tool is not None and tool.changes_state


class ToolCallSplitter:
    """Separates speakable text from tool calls in a stream of text pieces.

    Text that might be the start of ``<tool_call>`` is held back until it is known not to be, so no
    part of a call is ever spoken. A reply that opens with ``{`` is a call whose tags the detokeniser
    dropped (they are special tokens): it is held until its JSON object closes. Spoken replies never
    start with a brace.
    """

    def __init__(self) -> None:
        self._buffer = ""
        self._bare: bool | None = None  # None until the first non-blank character is seen

    def push(self, piece: str) -> tuple[str, str | None]:
        """Return ``(speakable text, body of a completed tool call or None)``."""
        self._buffer += piece
        if self._bare is None and self._buffer.strip():
            self._bare = self._buffer.lstrip().startswith("{")
        if self._bare:
            end = _json_object_end(self._buffer)
            if end is None:
                return "", None
            body, self._buffer, self._bare = self._buffer[:end].strip(), self._buffer[end:], False
            return "", body
        if self._bare is None:
            return "", None
        start = self._buffer.find(TOOL_OPEN)
        if start < 0:
            keep = _partial_tag_len(self._buffer)
            text, self._buffer = self._buffer[: len(self._buffer) - keep], self._buffer[len(self._buffer) - keep :]
            return text, None
        end = self._buffer.find(TOOL_CLOSE, start)
        if end < 0:
            text, self._buffer = self._buffer[:start], self._buffer[start:]
            return text, None
        text, body = self._buffer[:start], self._buffer[start + len(TOOL_OPEN) : end]
        self._buffer = self._buffer[end + len(TOOL_CLOSE) :]
        return text, body

    def flush(self, cut: bool = False) -> tuple[str, str | None]:
        """The end of the stream: ``(held-back text, body of a tool call begun and never closed, or None)``. A
        reply that stops inside its call (``{"country": "pretgaria"}}}`` and the end) still asked for one, and
        grounding settles its JSON or decodes it again; unless the token cap stopped it there (``cut``): then
        it asked for nothing whole, and the begun call is dropped."""
        rest, self._buffer = self._buffer, ""
        if self._bare:
            return "", None if cut else rest.strip()
        start = rest.find(TOOL_OPEN)
        if start < 0:
            return rest, None
        return rest[:start], None if cut else rest[start + len(TOOL_OPEN):]


def _json_object_end(text: str) -> int | None:
    """Index just past the JSON object that ``text`` starts with (after blanks), or None if still open."""
    depth, in_string, escaped = 0, False, False
    for i, ch in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
            continue
        if ch == '"':
            in_string = True
        elif ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return i + 1
    return None


def _partial_tag_len(text: str) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of ``<tool_call>``."""
    for n in range(min(len(text), len(TOOL_OPEN) - 1), 0, -1):
        if TOOL_OPEN.startswith(text[-n:]):
            return n
    return 0


def spoken_result(result: str) -> str | None:
    """The words a tool result offers for speech (its ``spoken`` field), if any."""
    try:
        spoken = json.loads(result).get("spoken")
    except (json.JSONDecodeError, AttributeError):
        return None
    return spoken if isinstance(spoken, str) and spoken.strip() else None


def parse_tool_call(body: str) -> tuple[str, dict[str, Any]]:
    """``{"name": ..., "arguments": {...}}`` -> (name, arguments); a malformed call raises ValueError."""
    try:
        call = json.loads(body)
    except json.JSONDecodeError as err:
        raise ValueError(f"tool call is not JSON: {err.msg}") from None
    if not isinstance(call, dict) or not isinstance(call.get("name"), str):
        raise ValueError("tool call needs a string 'name'")
    arguments = call.get("arguments", {})
    if isinstance(arguments, str):
        arguments = json.loads(arguments or "{}")
    if not isinstance(arguments, dict):
        raise ValueError("tool call 'arguments' must be an object")
    return call["name"], arguments
