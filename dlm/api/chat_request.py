"""Validate a /v1/chat/completions body into a :class:`ChatRequest`, or refuse it with a 400 naming the field.

Parameters this server cannot honour (logprobs, penalties, images) are refused, not silently ignored: a client
that asks for them would otherwise get an answer that looks right and is not.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from dlm.api.errors import APIError, bad_request
from dlm.api.json_text import JsonTextError, loads_client_json
from dlm.api.limits import ApiLimits
from dlm.constrained import CompiledSchema, SchemaError, admits_a_value, check_schema
from dlm.decoding.confidence import GREEDY_BELOW

ROLES = ("system", "developer", "user", "assistant", "tool")
EFFORTS = {"minimal": "low", "low": "low", "medium": "medium", "high": "high"}
_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_ACCEPTED_AND_IGNORED = {"user", "metadata", "store", "service_tier", "prediction", "safety_identifier",
                         "prompt_cache_key"}
_SERVICE_TIERS = ("auto", "default", "flex", "priority", "scale")
_MAX_TOKENS = ("max_completion_tokens", "max_tokens")  # OpenAI's name, then the one it deprecated
_DEFS = ("$defs", "definitions")
_KNOWN = {
    "model", "messages", "stream", "stream_options", "max_tokens", "max_completion_tokens", "temperature",
    "top_p", "stop", "seed", "n", "reasoning_effort", "tools", "tool_choice", "parallel_tool_calls",
    "response_format", "logprobs", "top_logprobs", "logit_bias", "frequency_penalty", "presence_penalty",
    "modalities",
} | _ACCEPTED_AND_IGNORED


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    parameters: dict[str, Any]
    call_parameters: dict[str, Any]  # what its calls are decoded under: `parameters`, or what of them is enforceable


@dataclass(frozen=True)
class ChatRequest:
    model: str
    messages: list[dict[str, Any]]  # normalised for the chat template: content is always a string
    stream: bool = False
    include_usage: bool = False
    max_tokens: int | None = None
    max_tokens_param: str = "max_tokens"  # the field the client set it with, which errors about it name
    temperature: float | None = None
    top_p: float | None = None
    stop: tuple[str, ...] = ()
    seed: int | None = None
    n: int = 1
    effort: str | None = None  # the engine's low/medium/high
    tools: tuple[ToolSpec, ...] = ()
    tool_choice: str = "none"  # none, auto, required or function
    forced_tool: str | None = None  # the function a named tool_choice forces
    json_schema: dict[str, Any] | bool | None = None  # response_format, as the schema to enforce


def parse_chat_request(body: dict[str, Any], limits: ApiLimits, writable: frozenset[str] | None = None) -> ChatRequest:
    """`writable`: the characters the model's vocabulary can write (schemas that need others are refused)."""
    unknown = sorted(set(body) - _KNOWN)
    if unknown:
        raise bad_request(f"Unrecognized request argument supplied: {unknown[0]}", unknown[0])
    _refuse_unsupported(body)
    _type_ignored(body)
    _refuse_unkept_promises(body)
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise bad_request("'model' is required and must be a string", "model")
    stream = _bool(body, "stream", False)
    include_usage = False
    options = body.get("stream_options")
    if options is not None:
        if not stream:
            raise bad_request("'stream_options' is only allowed when 'stream' is true", "stream_options")
        if not isinstance(options, dict):
            raise bad_request("'stream_options' must be an object", "stream_options")
        include_usage = _bool(options, "include_usage", False, "stream_options.include_usage")
    tools = _tools(body.get("tools"), writable)
    _bool(body, "parallel_tool_calls", True)  # one call per turn is what the decoder makes either way
    tool_choice, forced = _tool_choice(body.get("tool_choice"), tools)
    json_schema = _response_format(body.get("response_format"), writable)
    stop = _stop(body.get("stop"))
    if stop and json_schema is not None:
        raise bad_request("'stop' cannot be used with a JSON response_format: a JSON answer is never cut by stop "
                          "strings", "stop")
    if json_schema is not None and tool_choice in ("required", "function"):
        raise bad_request("a forced tool call and a JSON response_format cannot both shape the answer",
                          "tool_choice")
    if tool_choice in ("required", "function"):  # forced calls are decoded under their parameter schemas
        for i, spec in enumerate(tools):
            if forced in (None, spec.name):
                enforceable(spec.parameters, f"tools[{i}].function.parameters", writable)
    max_tokens, max_tokens_param = _max_tokens(body, limits)
    n = _n(body, limits)
    temperature, top_p = _sampling(body, n)
    return ChatRequest(
        model=model,
        messages=_messages(body.get("messages")),
        stream=stream,
        include_usage=include_usage,
        max_tokens=max_tokens,
        max_tokens_param=max_tokens_param,
        temperature=temperature,
        top_p=top_p,
        stop=stop,
        seed=_seed(body),
        n=n,
        effort=_effort(body.get("reasoning_effort")),
        tools=tools,
        tool_choice=tool_choice,
        forced_tool=forced,
        json_schema=json_schema,
    )


def _refuse_unsupported(body: dict[str, Any]) -> None:
    if body.get("logprobs") or body.get("top_logprobs"):
        raise bad_request("logprobs are not supported by this server", "logprobs")
    if body.get("logit_bias"):
        raise bad_request("logit_bias is not supported by this server", "logit_bias")
    for key in ("frequency_penalty", "presence_penalty"):
        if body.get(key) not in (None, 0, 0.0):
            raise bad_request(f"{key} is not supported by this server (only 0)", key)
    modalities = body.get("modalities")
    if modalities is not None and modalities != ["text"]:
        raise bad_request("only the 'text' output modality is supported on this endpoint", "modalities")


def _type_ignored(body: dict[str, Any]) -> None:
    """Fields that change nothing here are still typed as OpenAI types them: a client's mistake in one is
    reported, not passed over."""
    for key in ("user", "safety_identifier", "prompt_cache_key"):
        if body.get(key) is not None and not isinstance(body[key], str):
            raise bad_request(f"'{key}' must be a string", key)
    metadata = body.get("metadata")
    if metadata is not None and not (isinstance(metadata, dict) and all(isinstance(v, str) for v in metadata.values())):
        raise bad_request("'metadata' must be an object of strings (string keys to string values)", "metadata")
    if body.get("prediction") is not None and not isinstance(body["prediction"], dict):
        raise bad_request("'prediction' must be an object", "prediction")


def _refuse_unkept_promises(body: dict[str, Any]) -> None:
    """`store: true` asks for a completion kept for later, and a `service_tier` other than auto/default for a
    processing tier: this server has neither, and a client told yes would rely on them."""
    if _bool(body, "store", False):
        raise bad_request("'store' must be false or unset: this server stores no completions", "store")
    tier = body.get("service_tier")
    if tier is not None and tier not in _SERVICE_TIERS:
        raise bad_request(f"'service_tier' must be one of {', '.join(_SERVICE_TIERS)}, got {tier!r}", "service_tier")
    if tier not in (None, "auto", "default"):
        raise bad_request(f"service_tier {tier!r} is not offered: this server has one tier: 'auto' or 'default'",
                          "service_tier")


def _bool(obj: dict[str, Any], key: str, default: bool, param: str | None = None) -> bool:
    value = obj.get(key, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise bad_request(f"'{param or key}' must be a boolean", param or key)
    return value


def _int(obj: dict[str, Any], key: str) -> int | None:
    value = obj.get(key)
    if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
        raise bad_request(f"'{key}' must be an integer", key)
    return value


def _number(obj: dict[str, Any], key: str, low: float, high: float, low_open: bool = False) -> float | None:
    value = obj.get(key)
    if value is None:
        return None
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise bad_request(f"'{key}' must be a number", key)
    if value > high or value < low or (low_open and value == low):
        bracket = "(" if low_open else "["
        raise bad_request(f"'{key}' must be in {bracket}{low:g}, {high:g}], got {value}", key)
    return float(value)


def _seed(body: dict[str, Any]) -> int | None:
    """A 64-bit signed seed, as OpenAI's; choice i of n draws from seed + i."""
    value = _int(body, "seed")
    if value is not None and not -(2**63) <= value < 2**63:
        raise bad_request(f"'seed' must be a 64-bit signed integer, got {value}", "seed")
    return value


def _max_tokens(body: dict[str, Any], limits: ApiLimits) -> tuple[int | None, str]:
    """The completion budget and the field that set it, for errors to name the one the client sent. Both fields
    are checked; both may come (OpenAI deprecates max_tokens for max_completion_tokens), saying the same."""
    given = {key: value for key in _MAX_TOKENS if (value := _int(body, key)) is not None}
    if len(set(given.values())) > 1:
        raise bad_request("'max_tokens' and 'max_completion_tokens' differ: send max_completion_tokens alone "
                          "(max_tokens is its deprecated name)", "max_tokens")
    key = next(iter(given), "max_tokens")
    value = given.get(key)
    if value is not None and not 1 <= value <= limits.max_completion_tokens:
        raise bad_request(f"'{key}' must be between 1 and {limits.max_completion_tokens}, got {value}", key)
    return value, key


def _sampling(body: dict[str, Any], n: int) -> tuple[float | None, float | None]:
    """temperature and top_p. Unset, the temperature decodes greedily, unless the request asks for samples (n > 1
    or top_p < 1): then it is OpenAI's default, 1.0. A greedy one given with them is refused: it would answer n
    identical choices, or a top_p that filters nothing out of the one likeliest token."""
    temperature = _number(body, "temperature", 0.0, 2.0)
    top_p = _number(body, "top_p", 0.0, 1.0, low_open=True)
    sampled = "n" if n > 1 else "top_p" if top_p is not None and top_p < 1 else None
    if sampled is None:
        return temperature, top_p
    if temperature is None:
        return 1.0, top_p
    if temperature < GREEDY_BELOW:
        raise bad_request(f"'{sampled}' asks for samples, but temperature {temperature:g} decodes greedily: give a "
                          "temperature above 0, or none for OpenAI's default of 1", sampled)
    return temperature, top_p


def _n(body: dict[str, Any], limits: ApiLimits) -> int:
    value = _int(body, "n")
    if value is None:
        return 1
    if not 1 <= value <= limits.max_n:
        raise bad_request(f"'n' must be between 1 and {limits.max_n}, got {value}", "n")
    return value


def _stop(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    stops = [value] if isinstance(value, str) else value
    if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops) or len(stops) > 4:
        raise bad_request("'stop' must be a non-empty string or a list of up to 4 non-empty strings", "stop")
    return tuple(stops)


def _effort(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or value not in EFFORTS:
        raise bad_request(f"'reasoning_effort' must be one of {', '.join(EFFORTS)}, got {value!r}",
                          "reasoning_effort")
    return EFFORTS[value]


def _messages(value: Any) -> list[dict[str, Any]]:
    if not isinstance(value, list) or not value:
        raise bad_request("'messages' must be a non-empty array", "messages")
    return [_message(m, f"messages[{i}]") for i, m in enumerate(value)]


def _message(msg: Any, where: str) -> dict[str, Any]:
    if not isinstance(msg, dict):
        raise bad_request(f"{where} must be an object", where)
    role = msg.get("role")
    if role not in ROLES:
        raise bad_request(f"{where}.role must be one of {', '.join(ROLES)}, got {role!r}", f"{where}.role")
    out: dict[str, Any] = {"role": "system" if role == "developer" else role,
                           "content": _content(msg.get("content"), role, f"{where}.content")}
    if role == "assistant" and msg.get("tool_calls"):
        if not isinstance(msg["tool_calls"], list):
            raise bad_request(f"{where}.tool_calls must be an array", f"{where}.tool_calls")
        out["tool_calls"] = [_history_tool_call(c, f"{where}.tool_calls[{i}]")
                             for i, c in enumerate(msg["tool_calls"])]
        out["content"] = out["content"] or ""  # templates concatenate content; not every one checks for None
    elif out["content"] is None:
        raise bad_request(f"{where}.content is required for role {role!r}", f"{where}.content")
    if role == "tool":
        call_id = msg.get("tool_call_id")
        if not isinstance(call_id, str) or not call_id:
            raise bad_request(f"{where}.tool_call_id is required for role 'tool'", f"{where}.tool_call_id")
        out["tool_call_id"] = call_id
    if isinstance(msg.get("name"), str):
        out["name"] = msg["name"]
    return out


def _content(value: Any, role: str, where: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, list):
        texts = []
        for i, part in enumerate(value):
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise bad_request(f"{where}[{i}]: only text content parts are supported", f"{where}[{i}]")
            texts.append(part["text"])
        return "\n".join(texts)
    raise bad_request(f"{where} must be a string or an array of text parts", where)


def _history_tool_call(call: Any, where: str) -> dict[str, Any]:
    """A past tool call as chat templates render it: arguments as an object where they are JSON."""
    fn = call.get("function") if isinstance(call, dict) else None
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
        raise bad_request(f"{where} must be {{'type': 'function', 'function': {{'name': ...}}}}", where)
    arguments = fn.get("arguments", "{}")
    return {"id": call.get("id"), "type": "function",
            "function": {"name": fn["name"], "arguments": _history_arguments(arguments)}}


def _history_arguments(arguments: Any) -> Any:
    """The object a JSON string holds (read by the client JSON rules: no NaN, no lone surrogate, bounded nesting
    and digits); any other string as written, for the template to render raw. OpenAI's API takes any string here,
    and a call cut off by max_tokens (this server's own, finish `length`) comes back in a client's tool loop."""
    if not isinstance(arguments, str):
        return arguments
    try:
        return loads_client_json(arguments or "{}")
    except JsonTextError:
        return arguments


def _tools(value: Any, writable: frozenset[str] | None) -> tuple[ToolSpec, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise bad_request("'tools' must be an array", "tools")
    specs = []
    for i, tool in enumerate(value):
        where = f"tools[{i}]"
        fn = tool.get("function") if isinstance(tool, dict) and tool.get("type") == "function" else None
        if not isinstance(fn, dict):
            raise bad_request(f"{where} must be {{'type': 'function', 'function': {{...}}}}", where)
        name = fn.get("name")
        if not isinstance(name, str) or not _TOOL_NAME.match(name):
            raise bad_request(f"{where}.function.name must match [A-Za-z0-9_-]{{1,64}}", f"{where}.function.name")
        params = fn.get("parameters", {"type": "object", "properties": {}})
        if not isinstance(params, dict) or params.get("type", "object") != "object":
            raise bad_request(f"{where}.function.parameters must be a JSON schema of an object (a call's "
                              "arguments are one)", f"{where}.function.parameters")
        a_json_schema(params, f"{where}.function.parameters")
        call_params = _auto_call_schema(params, f"{where}.function.parameters", fn.get("strict") is True, writable)
        specs.append(ToolSpec(name, str(fn.get("description") or ""), params, call_params))
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise bad_request("tool names must be unique", "tools")
    return tuple(specs)


def _tool_choice(value: Any, tools: tuple[ToolSpec, ...]) -> tuple[str, str | None]:
    if value is None:
        return ("auto" if tools else "none"), None
    if value in ("none", "auto", "required"):
        if value != "none" and not tools:
            raise bad_request(f"tool_choice {value!r} needs 'tools'", "tool_choice")
        return value, None
    fn = value.get("function") if isinstance(value, dict) and value.get("type") == "function" else None
    name = fn.get("name") if isinstance(fn, dict) else None
    if not isinstance(name, str):
        raise bad_request("'tool_choice' must be none, auto, required or {'type': 'function', 'function': "
                          "{'name': ...}}", "tool_choice")
    if name not in {t.name for t in tools}:
        raise bad_request(f"tool_choice names function {name!r}, which is not in 'tools'", "tool_choice")
    return "function", name


def a_json_schema(schema: dict[str, Any] | bool, param: str) -> None:
    """Refuse what is no JSON schema at all (`check_schema`), whatever the request does with it."""
    try:
        check_schema(schema)
    except SchemaError as exc:
        raise bad_request(f"{param}: {exc}", param) from None


def enforceable(schema: dict[str, Any] | bool, param: str, writable: frozenset[str] | None = None,
                strict: bool = False) -> None:
    """Refuse a schema the constrained decoder cannot enforce, or one no value it can write satisfies, before
    any decoding starts. `strict` (the caller's `strict: true`) also refuses a oneOf the decoder would follow
    only as anyOf (:mod:`dlm.constrained.schema`); without it that oneOf is decoded as anyOf."""
    try:
        compiled = CompiledSchema(schema, writable, strict)
    except SchemaError as exc:
        raise bad_request(f"{param}: {exc}", param) from None
    _satisfiable(compiled, param)


def _auto_call_schema(params: dict[str, Any], param: str, strict: bool,
                      writable: frozenset[str] | None) -> dict[str, Any]:
    """The arguments an auto call of this tool is decoded under: `params`, or where the decoder cannot enforce
    them, as much of them as it can (:func:`_enforceable_part`), unless the caller asked for `strict` (which also
    refuses a oneOf decoded as anyOf, as :func:`enforceable` does). An auto call should not turn a request away
    over one exotic keyword, nor loosen the other tools' calls. What is enforced must admit a value."""
    try:
        compiled = CompiledSchema(params, writable, strict)
    except SchemaError as exc:
        if strict:
            raise bad_request(f"{param}: {exc}", param) from None
        params = _enforceable_part(params, writable)
        compiled = CompiledSchema(params, writable)
    _satisfiable(compiled, param)
    return params


def _enforceable_part(params: dict[str, Any], writable: frozenset[str] | None) -> dict[str, Any]:
    """`params` loosened (:func:`_loosened`) until the decoder can enforce it, with its definitions for the refs
    kept; any object where even that does not compile (a required key the vocabulary cannot write) or leaves no
    object at the root."""
    defs = {key: params[key] for key in _DEFS if key in params}
    loose = {**defs, **_loosened(params, defs, writable)}
    # a call's arguments are an object: a root loosened to its type alone or to any value (a $ref, an anyOf) is not
    return loose if loose.get("type") == "object" and _compiles(loose, writable) else {"type": "object"}


def _loosened(schema: Any, defs: dict[str, Any], writable: frozenset[str] | None) -> Any:
    """`schema` where the decoder can enforce it; else an object with its required keys and its properties, each
    loosened alike; else its type alone, or any value. Each step only widens what it admits, so no argument the
    caller's schema takes is ruled out. additionalProperties is open, and said so (the decoder writes only the
    listed keys of an object that says nothing of it): a keyword dropped beside it (patternProperties,
    minProperties) may have allowed or needed other keys."""
    if _compiles({**defs, **schema} if isinstance(schema, dict) else schema, writable):
        return schema
    if not isinstance(schema, dict):
        return {}
    props = schema.get("properties")
    if isinstance(props, dict) and schema.get("type", "object") == "object":
        required = schema.get("required", [])
        return {"type": "object", "required": required, "additionalProperties": True,  # said: unsaid is closed
                "properties": {key: _loosened(sub, defs, writable) for key, sub in props.items()}}
    typed = {"type": schema["type"]} if "type" in schema else {}
    return typed if _compiles(typed, writable) else {}


def _compiles(schema: Any, writable: frozenset[str] | None) -> bool:
    """Whether the decoder can enforce `schema` (with this vocabulary)."""
    try:
        CompiledSchema(schema, writable)
    except SchemaError:
        return False
    return True


def _satisfiable(compiled: CompiledSchema, param: str) -> None:
    """A decoder under a schema no value satisfies would find no token to commit, midway through."""
    if not admits_a_value(compiled):
        raise bad_request(f"{param}: no JSON value satisfies this schema", param)


def _response_format(value: Any, writable: frozenset[str] | None) -> dict[str, Any] | bool | None:
    if value is None:
        return None
    kind = value.get("type") if isinstance(value, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "object"}
    if kind == "json_schema":
        spec = value.get("json_schema")
        if not isinstance(spec, dict) or not isinstance(spec.get("name"), str):
            raise bad_request("response_format.json_schema must be an object with a 'name'",
                              "response_format.json_schema")
        schema = spec.get("schema", {})
        if not isinstance(schema, (dict, bool)):
            raise bad_request("response_format.json_schema.schema must be a JSON schema object",
                              "response_format.json_schema.schema")
        a_json_schema(schema, "response_format.json_schema.schema")
        enforceable(schema, "response_format.json_schema.schema", writable, spec.get("strict") is True)
        return schema
    raise APIError(400, "response_format.type must be text, json_object or json_schema", "response_format.type")
