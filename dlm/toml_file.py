"""Reading a TOML config file, every way it can fail as one line that names the file.

The voice configs and the training runs both read one, and had each grown the same four failures: missing or
a directory, not UTF-8 (a binary file), not TOML.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib


def read_toml(path: str | Path, error: Callable[[str], Exception]) -> dict[str, Any]:
    """The file's table; a file that cannot be read or is no TOML raises ``error(message)``."""
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except OSError as err:  # missing, a directory, unreadable
        raise error(f"{path}: cannot be read ({err.strerror or err})") from None
    except UnicodeDecodeError as err:
        raise error(f"{path}: not UTF-8 text, so not TOML (byte {err.start}: {err.reason})") from None
    except tomllib.TOMLDecodeError as err:
        raise error(f"{path}: not valid TOML ({err})") from None
