"""The names of a training run's phases, a saved run state (state.pt) and where it says each phase began.

A run trains on the copying curriculum (if it has one), then the full mix, then the finish (if it has one),
each from its own corpus (dlm.train.train.BatchSource). Its state saves the step each began at by name;
states saved before the finish existed hold a list in that order instead, read here the same way.
"""

from __future__ import annotations

import os
import pickle
from pathlib import Path
from typing import Any

import torch

from dlm.train.config import RunConfigError

CURRICULUM, FULL, FINISH = "curriculum", "full", "finish"


def saved_phase_starts(state: dict[str, Any]) -> dict[str, int | None]:
    """The step each phase of a saved run state began at, by name (None: not begun)."""
    starts = state["phase_starts"]
    if isinstance(starts, dict):
        return starts
    return dict(zip([CURRICULUM, FULL][-len(starts):], starts, strict=True))


def save_state(state: dict[str, Any], path: Path) -> None:
    """Write a run state whole or not at all: one killed mid-write had left a truncated state.pt, the only copy
    of the run, that no resume could read."""
    partial = path.with_name(f"{path.name}.partial")
    torch.save(state, partial)
    os.replace(partial, path)


def load_state(path: Path) -> dict[str, Any]:
    """A saved run state; a file that is not one (truncated, corrupt) is refused in one line."""
    try:
        return torch.load(path, weights_only=False)
    except (RuntimeError, EOFError, pickle.UnpicklingError) as err:
        reason = str(err).split(". ")[0].strip()
        raise RunConfigError(f"{path}: not a readable run state, truncated or corrupt ({reason})") from None
