"""Keeping a conversation inside a short context window: the oldest exchanges are forgotten first."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def fit_history(history: list[dict[str, Any]], prompt_length: Callable[[list[dict[str, Any]]], int],
                budget: int) -> int:
    """Drop the oldest exchanges (a user message and what answered it) from ``history`` in place until
    ``prompt_length(history)`` is at most ``budget`` tokens. The system message and the newest message stay, and
    the current turn (the newest user message and what followed it) goes only once nothing older is left: a turn
    whose tool round ran over the budget had lost its question and call while older exchanges stayed. Returns how
    many messages were dropped (a caller that marks places in the history counts them).

    The demo model's context is 320 tokens, a few tool exchanges; a long conversation forgets its beginning
    rather than failing.
    """
    first = 1 if history and history[0]["role"] == "system" else 0
    before = len(history)
    _drop_oldest(history, first, prompt_length, budget, keep=lambda: _current_turn(history))
    _drop_oldest(history, first, prompt_length, budget, keep=lambda: len(history) - 1)  # the turn alone is over
    return before - len(history)


def _drop_oldest(history: list[dict[str, Any]], first: int, prompt_length: Callable[[list[dict[str, Any]]], int],
                 budget: int, keep: Callable[[], int]) -> None:
    """Drop from ``first`` on, a user message and what answered it at a time, while the prompt is over ``budget``
    and the message at ``keep()`` lies beyond."""
    while keep() > first and prompt_length(history) > budget:
        del history[first]
        while keep() > first and history[first]["role"] != "user":
            del history[first]


def _current_turn(history: list[dict[str, Any]]) -> int:
    """Where the current turn begins: its user message, else the newest message."""
    return max((i for i, m in enumerate(history) if m["role"] == "user"), default=len(history) - 1)
