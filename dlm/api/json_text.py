"""JSON text from a client, read strictly.

Python's json module takes more than JSON: NaN and Infinity, lone UTF-16 surrogates ("\\ud800", which no
tokenizer or UTF-8 encoder takes later), integers of thousands of digits (it refuses them with a plain
ValueError), and nesting as deep as the stack (a RecursionError). Each of those had reached a server as a
500, or been kept in a session's history where it broke every later turn; here each is a `JsonTextError`
whose message says which.
"""

from __future__ import annotations

import json
from typing import Any


class JsonTextError(ValueError):
    """The text is not JSON a server can use; the message says why."""


def _refuse_constant(name: str) -> Any:
    raise JsonTextError(f"{name} is not a JSON number")


def loads_client_json(raw: str | bytes) -> Any:
    try:
        value = json.loads(raw, parse_constant=_refuse_constant)
        json.dumps(value, ensure_ascii=False).encode()
    except JsonTextError:
        raise
    except UnicodeEncodeError:
        raise JsonTextError("it holds a lone UTF-16 surrogate escape, which is not text") from None
    except RecursionError:
        raise JsonTextError("it is nested too deeply") from None
    except (ValueError, UnicodeDecodeError) as exc:  # JSONDecodeError, bad UTF-8, integers past Python's limit
        raise JsonTextError(str(exc)) from None
    return value
