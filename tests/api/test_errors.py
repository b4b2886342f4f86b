"""Bad requests are answered 4xx with an OpenAI error object whose message says what is wrong."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import openai
import pytest

from dlm.api.errors import APIError
from dlm.api.limits import ApiLimits, ConcurrencyGate
from dlm.api.live_server import LiveServer
from dlm.api.server import create_app
from tests.api.conftest import LIMITS, MODEL_NAME

USER = [{"role": "user", "content": "hi"}]


def _nested_any_of(depth: int, leaf: dict) -> dict:
    """The shape of a reviewer's 417 KB schema (depth 8), which held the server's event loop 4 s in the meta-schema
    check before the sub-schema count refused it; every sub-schema holds the leaf three times more."""
    for _ in range(depth):
        leaf = {"anyOf": [{"type": "object", "properties": {"a": leaf, "b": leaf}}, {"type": "array", "items": leaf}]}
    return leaf


def _request(url: str, body: bytes | None = None, headers: dict | None = None) -> tuple[int, dict]:
    """A raw HTTP call (the openai client refuses to send malformed bodies)."""
    req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def _error(response: tuple[int, dict], status: int) -> dict:
    got, body = response
    assert got == status, body
    error = body["error"]
    assert error["message"] and error["type"]
    return error


def _post_json(url: str, obj) -> tuple[int, dict]:
    return _request(url + "/v1/chat/completions", json.dumps(obj).encode())


def test_malformed_json(server):
    resp = _request(server.url + "/v1/chat/completions", b'{"model": "x", "messages": [')
    assert "not valid JSON" in _error(resp, 400)["message"]


def test_body_not_an_object(server):
    resp = _post_json(server.url, [1, 2])
    assert "JSON object" in _error(resp, 400)["message"]


def test_oversize_body(server):
    big = [{"role": "user", "content": "x" * (LIMITS.max_body_bytes + 10)}]
    resp = _post_json(server.url, {"model": MODEL_NAME, "messages": big})
    assert "too large" in _error(resp, 413)["message"]


def test_unknown_route_has_error_shape(server):
    assert _error(_request(server.url + "/v1/nothing-here"), 404)["code"] == "not_found"


def test_unknown_model(client):
    """As OpenAI answers it: a 404 of type invalid_request_error (it had been not_found_error)."""
    with pytest.raises(openai.NotFoundError, match="does not exist") as info:
        client.chat.completions.create(model="gpt-4o", messages=USER)
    assert info.value.type == "invalid_request_error" and info.value.code == "model_not_found"
    assert info.value.param == "model"


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"messages": [{"role": "robot", "content": "hi"}]}, "role"),
        ({"messages": []}, "non-empty"),
        ({"messages": [{"role": "tool", "content": "42"}]}, "tool_call_id"),
        ({"messages": [*USER, {"role": "assistant", "content": None, "tool_calls": 5}]},  # had been a 500
         "messages[1].tool_calls must be an array"),
        ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
         "only text"),
        ({"n": LIMITS.max_n + 1}, "'n' must be between"),
        ({"max_tokens": LIMITS.max_completion_tokens + 1}, "max_tokens"),
        ({"temperature": 3}, "temperature"),
        ({"top_p": 0}, "top_p"),
        ({"stop": ["a", "b", "c", "d", "e"]}, "stop"),
        ({"reasoning_effort": "extreme"}, "reasoning_effort"),
        ({"response_format": {"type": "xml"}}, "response_format"),
        ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {
            "type": "string", "pattern": "^a+$"}}}}, "unsupported schema keywords: pattern"),
        ({"tool_choice": "required"}, "needs 'tools'"),
        ({"tools": [{"type": "function", "function": {"name": "f"}}],
          "tool_choice": {"type": "function", "function": {"name": "g"}}}, "not in 'tools'"),
        ({"tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "required",
          "response_format": {"type": "json_object"}}, "cannot both"),
        # not JSON schemas at all: these had reached the schema compiler and come back 500
        ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"properties": []}}}]},
         "tools[0].function.parameters: not a valid JSON schema at properties: [] is not of type 'object'"),
        ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {
            "type": "object", "properties": {"a": {"enum": 7}}}}}]}, "at properties/a/enum: 7 is not of type"),
        ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {
            "type": "object", "required": "a"}}}}, "not a valid JSON schema at required"),
        # each of these had been a 500 (found by sending odd requests to a live server)
        ({"tools": [{"type": "function", "function": {"name": "f"}}],
          "tool_choice": {"type": "function", "function": "f"}}, "'tool_choice' must be"),
        ({"seed": 2**64}, "'seed' must be a 64-bit signed integer"),
        ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {
            "$defs": {"A": {"anyOf": [{"$ref": "#/$defs/A"}, {"type": "integer"}]}}, "$ref": "#/$defs/A"}}}},
         "refers back to itself"),
        ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {
            "type": "string", "minLength": 9, "maxLength": 2}}}}, "no JSON value satisfies"),
        ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {
            "type": "object", "properties": {"a": {"type": "array", "minItems": 3, "maxItems": 1}},
            "required": ["a"]}}}]}, "tools[0].function.parameters: no JSON value satisfies"),
        ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {
            "anyOf": [{"type": "string", "maxLength": i} for i in range(300)]}}}}, "too large"),
        # sub-schemas are counted before the meta-schema check, which would have named the bad enum deep inside
        ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": _nested_any_of(
            6, {"enum": 7})}}}, "response_format.json_schema.schema: the schema is too large: over 256 sub-schemas"),
        ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {
            "type": "object", "properties": {"a": _nested_any_of(6, {"enum": 7})}}}}]},
         "tools[0].function.parameters: the schema is too large: over 256 sub-schemas"),
        # found by fuzzing a live server: a MemoryError 500 (minItems 10**9 had the server killed), a TypeError 500
        ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {
            "type": "array", "minItems": 10**9}}}}, "minItems 1000000000 is more than any answer can hold"),
        ({"tools": [{"type": "function", "function": {"name": "f", "strict": True, "parameters": {
            "type": "object", "properties": {"a": {"allOf": [False]}}, "required": ["a"]}}}]},
         "tools[0].function.parameters: a sub-schema admits no value"),
        # and these had been answered, wrongly: a call of a bare string, an enum that decoded to "Infinity"
        ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "string"}}}]},
         "must be a JSON schema of an object"),
        ({"parallel_tool_calls": "no"}, "parallel_tool_calls"),
        ({"tools": [{"type": "function", "function": {"name": "f", "strict": True, "parameters": {
            "type": "object", "properties": {"a": {"type": "string", "format": "email"}}}}}]},
         "unsupported schema keywords: format"),  # had been decoded as any object
        # oneOf is decoded as anyOf: under strict, branches that may overlap are refused, not decoded loosely
        ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "strict": True, "schema": {
            "oneOf": [{"type": "integer"}, {"type": "number"}]}}}},
         "response_format.json_schema.schema: oneOf branches 0 and 1 may both match one value"),
        ({"tools": [{"type": "function", "function": {"name": "f", "strict": True, "parameters": {
            "type": "object", "properties": {"a": {"oneOf": [{"type": "string"}, {"const": "x"}]}}}}}]},
         "tools[0].function.parameters: oneOf branches 0 and 1 may both match one value"),
        # the fixture's <tool_call> is no single token, so a call cannot take the JSON's place: had been the JSON
        # alone, tools silently off
        ({"tools": [{"type": "function", "function": {"name": "f"}}], "response_format": {"type": "json_object"}},
         "response_format with tools that may be called needs a model whose <tool_call> tag is one token"),
        ({"logprobs": True}, "logprobs"),
        ({"presence_penalty": 0.5}, "presence_penalty"),
        ({"stream_options": {"include_usage": True}}, "stream_options"),
    ],
)
def test_bad_parameters(client, kwargs, fragment):
    kwargs = {"messages": USER, **kwargs}
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model=MODEL_NAME, **kwargs)
    assert fragment in info.value.message


def test_a_property_schema_of_true_is_a_tool_parameter_like_any_other(client):
    """`true` is a valid property schema (anything goes): the copy bias's asking words skip it."""
    tool = {"type": "function", "function": {"name": "note", "description": "keep a note",
                                             "parameters": {"type": "object", "properties": {"text": True}}}}
    reply = client.chat.completions.create(model=MODEL_NAME, messages=USER, tools=[tool], max_tokens=4)
    assert reply.choices[0].finish_reason in ("stop", "length", "tool_calls")


def test_unrecognized_argument(client):
    with pytest.raises(openai.BadRequestError, match="Unrecognized request argument supplied: frobnicate"):
        client.chat.completions.create(model=MODEL_NAME, messages=USER, extra_body={"frobnicate": 1})


@pytest.mark.parametrize(("raw", "fragment"), [
    (b'{"model": "m", "messages": [{"role": "user", "content": "hi"}], "temperature": NaN}', "NaN is not a JSON number"),
    (b'{"model": "m", "messages": [{"role": "user", "content": "hi \\ud800 there"}]}', "lone UTF-16 surrogate"),
    (b"[" * 25_000 + b"]" * 25_000, "nested too deeply"),
])
def test_bodies_python_reads_but_json_forbids(server, raw, fragment):
    """Python's json module takes NaN, lone surrogates and any depth (to a RecursionError): each had been a 500."""
    assert fragment in _error(_request(server.url + "/v1/chat/completions", raw), 400)["message"]


def test_a_body_its_content_encoding_does_not_decode(server):
    """Had been a 500 with aiohttp's traceback logged."""
    resp = _request(server.url + "/v1/chat/completions", b"xxxx", {"Content-Encoding": "deflate"})
    assert _error(resp, 400)["message"] == "the request body cannot be read: Can not decode content-encoding: deflate"


def _with_past_call(arguments: str) -> list[dict]:
    return [{"role": "assistant", "content": None,
             "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": arguments}}]},
            *USER]


@pytest.mark.parametrize(("kwargs", "fragment"), [
    ({"reasoning_effort": []}, "'reasoning_effort' must be one of"),  # unhashable: a TypeError 500
])
def test_odd_values_a_live_server_had_answered_500(client, kwargs, fragment):
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model=MODEL_NAME, **{"messages": USER, **kwargs})
    assert fragment in info.value.message


@pytest.mark.parametrize("arguments", [
    '{"expression": "12 *', "1" * 5000, "[" * 20_000 + "]" * 20_000, '{"a": "\\ud800"}', '{"a": NaN}',
])
def test_a_past_calls_arguments_may_be_any_string(client, arguments):
    """OpenAI's API takes a past call's arguments as an opaque string. Read as JSON, this server's own call cut
    off by max_tokens had been refused on replay (400: not valid JSON), which stopped a client's tool loop;
    what does not parse by the client JSON rules (these had been 500s once) is now rendered as written."""
    reply = client.chat.completions.create(model=MODEL_NAME, messages=_with_past_call(arguments), max_tokens=4)
    assert reply.choices[0].finish_reason == "length"


@pytest.mark.parametrize(("kwargs", "param", "fragment"), [
    # fields accepted and ignored are typed as OpenAI types them; two would be promises not kept
    ({"user": 5}, "user", "'user' must be a string"),
    ({"safety_identifier": ["a"]}, "safety_identifier", "'safety_identifier' must be a string"),
    ({"prompt_cache_key": {}}, "prompt_cache_key", "'prompt_cache_key' must be a string"),
    ({"metadata": "x"}, "metadata", "'metadata' must be an object of strings"),
    ({"metadata": {"k": 1}}, "metadata", "'metadata' must be an object of strings"),
    ({"prediction": 5}, "prediction", "'prediction' must be an object"),
    ({"store": "yes"}, "store", "'store' must be a boolean"),
    ({"store": True}, "store", "this server stores no completions"),
    ({"service_tier": "bogus"}, "service_tier", "'service_tier' must be one of auto, default, flex, priority"),
    ({"service_tier": "priority"}, "service_tier", "one tier: 'auto' or 'default'"),
    # samples asked for, and a temperature that decodes greedily: n identical choices, a top_p that filters nothing
    ({"n": 2, "temperature": 0}, "n", "temperature 0 decodes greedily"),
    ({"top_p": 0.5, "temperature": 0}, "top_p", "temperature 0 decodes greedily"),
    # the field the client used is the one named: errors had said max_tokens, and a bad max_tokens went unchecked
    ({"max_completion_tokens": 1000}, "max_completion_tokens", "'max_completion_tokens' must be between 1 and"),
    ({"max_completion_tokens": 200, "messages": [{"role": "user", "content": "y" * 350}]}, "max_completion_tokens",
     "plus max_completion_tokens (200) exceeds"),
    ({"max_completion_tokens": 4, "tool_choice": "required", "tools": [{"type": "function", "function": {
        "name": "f"}}]}, "max_completion_tokens", "max_completion_tokens must be at least"),
    ({"max_tokens": "abc", "max_completion_tokens": 9}, "max_tokens", "'max_tokens' must be an integer"),
    ({"max_tokens": 5, "max_completion_tokens": 9}, "max_tokens", "differ"),
])
def test_refusals_name_the_param(client, kwargs, param, fragment):
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model=MODEL_NAME, **{"messages": USER, **kwargs})
    assert info.value.param == param
    assert fragment in info.value.message


@pytest.mark.parametrize("kwargs", [
    {"user": "abc", "safety_identifier": "s", "prompt_cache_key": "k", "metadata": {"k": "v"},
     "prediction": {"type": "content", "content": "hi"}, "store": False, "service_tier": "auto"},
    {"service_tier": "default", "store": None, "metadata": None},
    {"max_tokens": 4, "max_completion_tokens": 4},
])
def test_accepted_fields(client, kwargs):
    reply = client.chat.completions.create(model=MODEL_NAME, messages=USER, **{"max_tokens": 4, **kwargs})
    assert reply.usage.completion_tokens == 4


@pytest.mark.parametrize("stream", [False, True])
def test_a_vanishing_temperature_decodes_greedily(client, stream):
    """1e-39 divided float32 logits into infinities: a 500, or a server_error event in the stream."""
    greedy = client.chat.completions.create(model=MODEL_NAME, messages=USER, max_tokens=8, temperature=0)
    tiny = client.chat.completions.create(model=MODEL_NAME, messages=USER, max_tokens=8, temperature=1e-39,
                                          stream=stream)
    text = "".join(c.choices[0].delta.content or "" for c in tiny) if stream else tiny.choices[0].message.content
    assert text == greedy.choices[0].message.content


def test_prompt_token_limit(client):
    long = [{"role": "user", "content": "y" * (LIMITS.max_prompt_tokens + 1)}]
    with pytest.raises(openai.BadRequestError, match="the prompt has"):
        client.chat.completions.create(model=MODEL_NAME, messages=long)


def test_concurrency_gate_counts_and_refuses():
    gate = ConcurrencyGate(2)
    with gate.slot(), gate.slot():
        assert gate.active == 2
        with pytest.raises(APIError) as info, gate.slot():
            pass
        assert info.value.status == 429
    assert gate.active == 0


def test_full_server_answers_429_with_retry_after(engine):
    """Retry-After tells a client (the openai one honours it) when to try again; it had been missing."""
    with LiveServer(create_app(engine, MODEL_NAME, ApiLimits(max_concurrent=0))) as live:
        req = urllib.request.Request(live.url + "/v1/chat/completions", json.dumps(
            {"model": MODEL_NAME, "messages": USER}).encode(), {"Content-Type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(req, timeout=60)
    assert info.value.code == 429 and info.value.headers["Retry-After"] == "1"
    assert json.loads(info.value.read())["error"]["type"] == "rate_limit_error"


def test_api_key_required_when_configured(engine):
    with LiveServer(create_app(engine, MODEL_NAME, LIMITS, api_key="s3cret")) as live:
        assert _error(_request(live.url + "/v1/models"), 401)["code"] == "invalid_api_key"
        wrong = openai.OpenAI(base_url=live.url + "/v1", api_key="guess", max_retries=0)
        with pytest.raises(openai.AuthenticationError):
            wrong.models.list()
        right = openai.OpenAI(base_url=live.url + "/v1", api_key="s3cret", max_retries=0)
        assert [m.id for m in right.models.list()] == [MODEL_NAME]


def test_non_loopback_bind_needs_a_key():
    from dlm.api.limits import check_bind

    check_bind("127.0.0.1", None)
    check_bind("0.0.0.0", "key")
    with pytest.raises(SystemExit, match="requires an API key"):
        check_bind("0.0.0.0", None)
