"""Which parts of an answer are decoded under a schema, decided from the request and the tokenizer."""

from __future__ import annotations

from typing import Any

from dlm.api.chat_request import ChatRequest, ToolSpec
from dlm.api.errors import bad_request
from dlm.api.span_generation import SpanPlan
from dlm.api.tool_calls import call_schema, call_tag_ids
from dlm.constrained import CompiledSchema, SchemaError
from dlm.tokenizer import Tokenizer


def plan_spans(req: ChatRequest, tokenizer: Tokenizer, stop_ids: frozenset[int]) -> SpanPlan | None:
    """None when the answer is plain text (the engine's own stream decodes it).

    response_format beside callable tools (tool_choice auto: a forced call is refused with it) makes an answer
    that is either a tool call or the JSON, as OpenAI's is. The call can only take the JSON's place where its
    opening tag is one token; otherwise the request is refused rather than one of the two quietly dropped."""
    tags = call_tag_ids(tokenizer.special_tokens)
    open_id, close_id = tags or (None, None)
    calls: dict[str, Any] = {}
    if tags is not None and req.tool_choice != "none":
        calls = {"open_id": open_id, "span_schema": _call_schema(req.tools), "close_id": close_id}
    if req.json_schema is not None:
        if req.tool_choice == "none":
            return SpanPlan(start_schema=req.json_schema, start_end_ids=stop_ids)
        if tags is None:
            raise bad_request("response_format with tools that may be called needs a model whose <tool_call> tag "
                              "is one token, so that a call can take the JSON's place; this one's is not: send "
                              "tool_choice 'none' for the JSON, or no response_format to let it call tools",
                              "response_format")
        return SpanPlan(start_schema=req.json_schema, start_end_ids=stop_ids, call_or_json=True, **calls)
    if req.tool_choice in ("required", "function"):
        ends = frozenset({close_id}) if tags is not None else stop_ids
        return SpanPlan(start_schema=call_schema(req.tools, req.forced_tool), start_end_ids=ends, **calls)
    return SpanPlan(**calls) if calls else None


def _call_schema(tools: tuple[ToolSpec, ...]) -> dict[str, Any]:
    """Any of the tools with the arguments it is decoded under (each tool's own: `ToolSpec.call_parameters`), or,
    where all of them together are more than one schema may hold (`dlm.constrained.schema.MAX_NODES`), a known
    name with an object of arguments: an auto call should not turn a request away over the length of its tools."""
    schema = call_schema(tools, None)
    try:
        CompiledSchema(schema)
    except SchemaError:
        return {"type": "object", "properties": {"name": {"enum": [t.name for t in tools]},
                                                 "arguments": {"type": "object"}},
                "required": ["name", "arguments"], "additionalProperties": False}
    return schema
