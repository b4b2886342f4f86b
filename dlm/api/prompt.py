"""A chat request rendered through the checkpoint's own chat template into prompt token ids."""

from __future__ import annotations

from dataclasses import dataclass

from jinja2.exceptions import TemplateError

from dlm.api.chat_request import ChatRequest
from dlm.api.errors import bad_request
from dlm.api.tool_calls import OPEN
from dlm.config import CheckpointError
from dlm.tokenizer import Tokenizer


@dataclass(frozen=True)
class Prompt:
    ids: list[int]
    forced_prefix: str  # text the assistant turn already starts with (the opening tag of a forced call)


def build_prompt(tokenizer: Tokenizer, req: ChatRequest) -> Prompt:
    tools = None
    if req.tool_choice != "none":
        tools = [{"type": "function", "function": {"name": t.name, "description": t.description,
                                                    "parameters": t.parameters}} for t in req.tools]
    try:
        text = tokenizer.apply_chat_template(req.messages, add_generation_prompt=True, tools=tools)
    except (TemplateError, TypeError) as exc:  # a template that cannot render these messages
        raise bad_request(f"the model's chat template rejected the messages: {exc}", "messages") from None
    except CheckpointError as exc:
        raise bad_request(f"this model cannot chat: {exc}", "model") from None
    prefix = OPEN if req.tool_choice in ("required", "function") else ""
    return Prompt(tokenizer.encode(text + prefix), prefix)
