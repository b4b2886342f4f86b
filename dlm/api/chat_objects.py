"""The JSON objects of a chat completion: the whole response, its stream chunks, and usage."""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field
from typing import Any

from dlm.api.tool_calls import ContentDelta, Delta, ToolCallDelta


@dataclass
class Usage:
    prompt_tokens: int
    completion_tokens: int = 0

    def as_dict(self) -> dict[str, int]:
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                "total_tokens": self.prompt_tokens + self.completion_tokens}


@dataclass
class CompletionIds:
    """What every object of one completion repeats."""

    model: str
    id: str = field(default_factory=lambda: "chatcmpl-" + secrets.token_hex(12))
    created: int = field(default_factory=lambda: int(time.time()))

    def chunk(self, choices: list[dict[str, Any]], usage: Usage | None = None,
              include_usage: bool = False) -> dict[str, Any]:
        out = {"id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
               "system_fingerprint": None, "choices": choices}
        if include_usage:
            out["usage"] = usage.as_dict() if usage is not None else None
        return out

    def completion(self, choices: list[dict[str, Any]], usage: Usage) -> dict[str, Any]:
        return {"id": self.id, "object": "chat.completion", "created": self.created, "model": self.model,
                "system_fingerprint": None, "choices": choices, "usage": usage.as_dict()}


def delta_choice(index: int, delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
    return {"index": index, "delta": delta, "logprobs": None, "finish_reason": finish_reason}


def delta_json(delta: Delta) -> dict[str, Any]:
    """A parser delta as the `delta` of a stream chunk."""
    if isinstance(delta, ContentDelta):
        return {"content": delta.text}
    call: dict[str, Any] = {"index": delta.index, "function": {"arguments": delta.arguments}}
    if delta.id is not None:
        call.update(id=delta.id, type="function")
        call["function"]["name"] = delta.name
    return {"tool_calls": [call]}


def message_choice(index: int, deltas: list[Delta], finish_reason: str) -> dict[str, Any]:
    """Fold a choice's deltas into the `message` of a non-streaming response."""
    content = "".join(d.text for d in deltas if isinstance(d, ContentDelta))
    calls: list[dict[str, Any]] = []
    for d in deltas:
        if not isinstance(d, ToolCallDelta):
            continue
        if d.id is not None:
            calls.append({"id": d.id, "type": "function", "function": {"name": d.name, "arguments": ""}})
        calls[-1]["function"]["arguments"] += d.arguments
    message: dict[str, Any] = {"role": "assistant", "content": content if content or not calls else None,
                               "refusal": None}
    if calls:
        message["tool_calls"] = calls
    return {"index": index, "message": message, "logprobs": None, "finish_reason": finish_reason}
