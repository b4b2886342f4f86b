"""Argparse types that check a value when the arguments are read, not when it is first used.

An eval or a voice run takes minutes; a --json, --out or --trace path in a missing directory had failed with a
traceback only after all of that work, losing it, and `--limit 0` had evaluated nothing and written NaN.
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


def output_path(text: str) -> Path:
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a directory, not a file to write")
    folder = path.parent
    if not folder.is_dir():
        raise argparse.ArgumentTypeError(f"{text}: there is no directory {folder}")
    if not os.access(folder, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise argparse.ArgumentTypeError(f"{text} cannot be written")
    return path


def _checked(text: str, convert: Callable[[str], T], ok: Callable[[T], bool], wanted: str) -> T:
    """`text` converted, if it converts and the value is `ok`; else argparse's error saying what was wanted."""
    try:
        value = convert(text)
    except ValueError:
        value = None
    if value is None or not ok(value):
        raise argparse.ArgumentTypeError(f"must be {wanted}, got {text!r}")
    return value


def at_least_one(text: str) -> int:
    return _checked(text, int, lambda value: value >= 1, "at least 1")


def port(text: str) -> int:
    return _checked(text, int, lambda value: 1 <= value <= 65535, "a port, 1 to 65535")


def finite_float(text: str) -> float:
    return _checked(text, float, math.isfinite, "a finite number")


def cannot_listen(host: str, port_number: int, err: OSError) -> SystemExit:
    """The one-line exit for a server whose address is taken or not this machine's, instead of a traceback."""
    return SystemExit(f"error: cannot listen on {host}:{port_number}: {err.strerror or err}")
