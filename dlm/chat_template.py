"""Render a checkpoint's Jinja chat template the way HF tokenizers do (sandboxed, same helpers)."""

from __future__ import annotations

import json
from typing import Any

from jinja2.exceptions import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment


def _raise(message: str) -> None:
    raise TemplateError(message)


class ChatTemplate:
    def __init__(self, source: str) -> None:
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
        env.filters["tojson"] = lambda value, indent=None, ensure_ascii=False: json.dumps(
            value, indent=indent, ensure_ascii=ensure_ascii
        )
        env.globals["raise_exception"] = _raise
        self.source = source
        self._template = env.from_string(source)

    def render(self, messages: list[dict[str, Any]], **kwargs: Any) -> str:
        return self._template.render(messages=messages, **kwargs)
