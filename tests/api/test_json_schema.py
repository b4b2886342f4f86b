"""response_format is enforced by constrained decoding: every answer parses and validates, whatever the
sampling — even from a model with random weights, which left to itself would never write JSON."""

from __future__ import annotations

import json

import jsonschema
import openai
import pytest

from tests.api.conftest import MODEL_NAME

# Finite by construction (bounded strings and arrays, enums), so every try can finish within max_tokens.
PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 8},
        "mood": {"enum": ["happy", "sad", 3, None]},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 3}, "maxItems": 2},
        "pet": {"anyOf": [{"type": "boolean"}, {"type": "object", "properties": {"kind": {"const": "cat"}},
                                                 "required": ["kind"], "additionalProperties": False}]},
    },
    "required": ["name", "mood", "tags", "pet"],
    "additionalProperties": False,
}
MESSAGES = [{"role": "user", "content": "Describe a person as JSON."}]


def _schema_format(schema: dict) -> dict:
    return {"type": "json_schema", "json_schema": {"name": "person", "schema": schema, "strict": True}}


@pytest.mark.parametrize("attempt", range(20))
def test_every_try_validates(client, attempt):
    resp = client.chat.completions.create(
        model=MODEL_NAME, messages=MESSAGES, response_format=_schema_format(PERSON), max_tokens=200,
        seed=attempt, temperature=[0.0, 0.7, 1.3][attempt % 3], top_p=[1.0, 0.9][attempt % 2] if attempt % 3 else 1.0,
        reasoning_effort=["low", "medium", "high"][attempt % 3],
    )
    choice = resp.choices[0]
    assert choice.finish_reason == "stop"
    jsonschema.validate(json.loads(choice.message.content), PERSON)
    assert resp.usage.completion_tokens > 0


def test_streamed_json_validates(client):
    stream = client.chat.completions.create(
        model=MODEL_NAME, messages=MESSAGES, response_format=_schema_format(PERSON), max_tokens=200,
        stream=True, temperature=0.9, seed=7,
    )
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    jsonschema.validate(json.loads(text), PERSON)


def test_json_object_mode_gives_an_object(client):
    resp = client.chat.completions.create(
        model=MODEL_NAME, messages=MESSAGES, response_format={"type": "json_object"}, max_tokens=200,
    )
    choice = resp.choices[0]
    assert choice.finish_reason == "stop"  # closed within max_tokens, however freely the object grew
    assert isinstance(json.loads(choice.message.content), dict)


@pytest.mark.parametrize("seed", range(6))
def test_an_open_ended_schema_closes_within_a_small_max_tokens(client, seed):
    """A free string would run on to max_tokens; the decoder closes it in time instead (the shortest
    instance is 11 characters, so 16 tokens leave a little room to write)."""
    schema = {"type": "object", "properties": {"note": {"type": "string"}}, "required": ["note"],
              "additionalProperties": False}
    resp = client.chat.completions.create(
        model=MODEL_NAME, messages=MESSAGES, response_format=_schema_format(schema), max_tokens=16,
        seed=seed, temperature=1.3,
    )
    choice = resp.choices[0]
    assert choice.finish_reason == "stop"
    jsonschema.validate(json.loads(choice.message.content), schema)
    assert resp.usage.completion_tokens <= 16


def _shape(kind: str, size: str) -> dict:
    return {"type": "object", "properties": {"kind": {"const": kind}, size: {"type": "integer"}},
            "required": ["kind", size], "additionalProperties": False}


@pytest.mark.parametrize("seed", range(4))
def test_a_strict_oneof_of_exclusive_branches_decodes_to_exactly_one(client, seed):
    """Branches told apart by a required const are disjoint, so decoding them as anyOf is exact."""
    schema = {"oneOf": [_shape("circle", "radius"), _shape("square", "side")]}
    resp = client.chat.completions.create(
        model=MODEL_NAME, messages=MESSAGES, response_format=_schema_format(schema), max_tokens=60, seed=seed,
        temperature=1.0)
    jsonschema.validate(json.loads(resp.choices[0].message.content), schema)


def test_a_lax_oneof_whose_branches_overlap_decodes_as_anyof(client):
    """Without strict, a oneOf the decoder cannot make exclusive is decoded as anyOf, not refused."""
    schema = {"oneOf": [{"type": "integer"}, {"type": "number"}]}
    format_ = {"type": "json_schema", "json_schema": {"name": "n", "schema": schema}}
    resp = client.chat.completions.create(model=MODEL_NAME, messages=MESSAGES, response_format=format_,
                                          max_tokens=12)
    jsonschema.validate(json.loads(resp.choices[0].message.content), {"anyOf": schema["oneOf"]})


def _answer(client, stream: bool, **kwargs) -> tuple[str, str, int]:
    """The reply's content, finish reason and completion tokens, streamed or not."""
    kwargs = {"model": MODEL_NAME, "messages": MESSAGES, **kwargs}
    if not stream:
        resp = client.chat.completions.create(**kwargs)
        return resp.choices[0].message.content, resp.choices[0].finish_reason, resp.usage.completion_tokens
    chunks = list(client.chat.completions.create(**kwargs, stream=True, stream_options={"include_usage": True}))
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finish = [c.choices[0].finish_reason for c in chunks if c.choices][-1]
    return content, finish, chunks[-1].usage.completion_tokens


@pytest.mark.parametrize("stream", [False, True])
def test_a_stop_string_beside_a_json_answer_is_refused(client, stream):
    """A response_format answer is JSON throughout, so no stop string applies to it: `","` had cut PERSON after
    its first member (invalid JSON, finish_reason stop), and since then stop was ignored beside it."""
    with pytest.raises(openai.BadRequestError) as info:
        _answer(client, stream, response_format=_schema_format(PERSON), max_tokens=200, stop=[",", '"tags"'])
    assert info.value.param == "stop"
    assert "a JSON answer is never cut by stop strings" in info.value.message


COUNT = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"], "additionalProperties": False}


@pytest.mark.parametrize(("response_format", "least"), [
    (_schema_format(COUNT), len('{"n":0}') + 1),  # the fixture's tokens are characters; then the end token
    ({"type": "json_object"}, len("{}") + 1),
])
@pytest.mark.parametrize("stream", [False, True])
def test_a_max_tokens_no_json_answer_fits_is_refused_naming_the_least_that_does(client, response_format, least,
                                                                                 stream):
    """It had been a 200 with the JSON cut off (`{"n` at max_tokens 3), finish_reason length."""
    with pytest.raises(openai.BadRequestError) as info:
        _answer(client, stream, response_format=response_format, max_tokens=least - 1)
    assert info.value.param == "max_tokens"
    assert f"max_tokens must be at least {least}" in info.value.message
    for seed in range(4):
        content, finish, _ = _answer(client, stream, response_format=response_format, max_tokens=least, seed=seed,
                                     temperature=1.3)
        assert finish == "stop"
        json.loads(content)


def test_a_default_max_tokens_no_json_answer_fits_is_refused_too(client):
    """Without max_tokens the answer may take the server's max completion tokens (the fixture server's 200)."""
    long = {"type": "json_schema", "json_schema": {"name": "s", "schema": {"type": "string", "minLength": 250}}}
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model=MODEL_NAME, messages=MESSAGES, response_format=long)
    assert info.value.param == "max_tokens"
    assert "max_tokens is 200 (the most this server and prompt allow)" in info.value.message
    assert f"max_tokens must be at least {250 + 3}" in info.value.message
