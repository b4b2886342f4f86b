"""Keeping a conversation inside a short context window: the oldest exchanges are forgotten first."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def fit_history(history: list[dict[str, Any]], prompt_length: Callable[[list[dict[str, Any]]], int],
                budget: int) -> int:
    """Drop the oldest exchanges (a user message and what answered it) from ``history`` in place until
    ``prompt_length(history)`` is at most ``budget`` tokens. The system message and the newest message stay.
    Returns how many messages were dropped (a caller that marks places in the history counts them).

    The demo model's context is 320 tokens, a few tool exchanges; a long conversation forgets its beginning
    rather than failing.
    """
    first = 1 if history and history[0]["role"] == "system" else 0
    before = len(history)
    while len(history) - first > 1 and prompt_length(history) > budget:
        del history[first]
        while len(history) - first > 1 and history[first]["role"] != "user":
            del history[first]
    return before - len(history)
