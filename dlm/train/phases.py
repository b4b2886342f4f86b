"""The names of a training run's phases and where a saved run state says each began.

A run trains on the copying curriculum (if it has one), then the full mix, then the finish (if it has one),
each from its own corpus (dlm.train.train.BatchSource). Its state saves the step each began at by name;
states saved before the finish existed hold a list in that order instead, read here the same way.
"""

from __future__ import annotations

from typing import Any

CURRICULUM, FULL, FINISH = "curriculum", "full", "finish"


def saved_phase_starts(state: dict[str, Any]) -> dict[str, int | None]:
    """The step each phase of a saved run state began at, by name (None: not begun)."""
    starts = state["phase_starts"]
    if isinstance(starts, dict):
        return starts
    return dict(zip([CURRICULUM, FULL][-len(starts):], starts, strict=True))
