"""Tool calls: forced calls decode under the function's parameter schema and come back as OpenAI
`tool_calls` (with argument deltas when streaming); a tool result can be sent back for the next turn."""

from __future__ import annotations

import json
import re

import jsonschema
import openai
import pytest

from dlm.api.chat_request import parse_chat_request
from dlm.api.limits import ApiLimits
from dlm.api.stop_strings import FreeTextStops
from dlm.api.tool_calls import CLOSE, OPEN, ContentDelta, ToolCallDelta, ToolCallStream
from dlm.constrained import CompiledSchema, JsonPrefixAutomaton
from tests.api.conftest import MODEL_NAME

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 10},
                           "unit": {"enum": ["celsius", "fahrenheit"]}},
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {
    "type": "object", "properties": {}, "additionalProperties": False}}}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


def test_named_tool_choice_returns_a_valid_call(client):
    resp = client.chat.completions.create(
        model=MODEL_NAME, messages=ASK, tools=[WEATHER, TIME], max_tokens=150,
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
    )
    choice = resp.choices[0]
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls
    assert call.type == "function" and call.id.startswith("call_")
    assert call.function.name == "get_weather"
    jsonschema.validate(json.loads(call.function.arguments), WEATHER["function"]["parameters"])


def test_required_streams_name_then_argument_deltas(client):
    stream = client.chat.completions.create(
        model=MODEL_NAME, messages=ASK, tools=[WEATHER], tool_choice="required", max_tokens=150, stream=True,
    )
    deltas, finish = [], None
    for chunk in stream:
        for choice in chunk.choices:
            deltas.extend(choice.delta.tool_calls or [])
            finish = choice.finish_reason or finish
    assert finish == "tool_calls"
    assert deltas[0].id and deltas[0].function.name == "get_weather"
    assert all(d.id is None and d.function.name is None for d in deltas[1:])
    assert len(deltas) > 2, "arguments should arrive in several pieces"
    arguments = "".join(d.function.arguments or "" for d in deltas)
    jsonschema.validate(json.loads(arguments), WEATHER["function"]["parameters"])


def test_tool_result_round_trip(client):
    first = client.chat.completions.create(
        model=MODEL_NAME, messages=ASK, tools=[WEATHER], tool_choice="required", max_tokens=150,
    )
    call = first.choices[0].message.tool_calls[0]
    history = ASK + [
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"temperature": 21})},
    ]
    second = client.chat.completions.create(model=MODEL_NAME, messages=history, tools=[WEATHER],
                                            tool_choice="none", max_tokens=16)
    assert second.choices[0].message.tool_calls is None
    assert isinstance(second.choices[0].message.content, str)


def _parse(pieces: list[str]) -> list:
    parser = ToolCallStream()
    out = [d for p in pieces for d in parser.feed(p)]
    return out + parser.finish()


def test_parser_splits_text_and_calls_at_any_piece_boundary():
    text = 'Let me check. <tool_call>{"name": "get_weather", "arguments": {"city": "Pa}r\\"is"}}</tool_call>'
    for size in (1, 2, 5, len(text)):
        deltas = _parse([text[i:i + size] for i in range(0, len(text), size)])
        content = "".join(d.text for d in deltas if isinstance(d, ContentDelta))
        calls = [d for d in deltas if isinstance(d, ToolCallDelta)]
        assert content == "Let me check. "
        assert calls[0].name == "get_weather"
        assert json.loads("".join(d.arguments for d in calls)) == {"city": 'Pa}r"is'}


def test_parser_drops_stray_closing_tags():
    deltas = _parse(['<tool_call>{"name": "f", "arguments": {}}</tool_call></tool_call>ok</tool_', "call>"])
    assert "".join(d.text for d in deltas if isinstance(d, ContentDelta)) == "ok"


def test_parser_gives_back_text_that_is_not_a_call():
    deltas = _parse(["a < b and <tool_call>not json</tool_call>"])
    assert "".join(d.text for d in deltas) == "a < b and <tool_call>not json"
    assert not [d for d in deltas if isinstance(d, ToolCallDelta)]


def test_parser_accepts_arguments_before_name():
    (delta,) = _parse(['<tool_call>{"arguments": {"x": 1}, "name": "f"}</tool_call>'])
    assert delta.name == "f" and json.loads(delta.arguments) == {"x": 1}


def test_stop_strings_cut_the_text_around_calls_but_never_a_call():
    """OpenAI applies no stop sequence to a call's arguments: `"stop": ["*"]` had cut `12 * 4` to `12 `. A stop
    that runs into a tag is none either; one after the call cuts as ever."""
    text = 'ab <tool_call>{"name": "f", "arguments": {"x": "1 * 2"}}</tool_call> then * more'
    for size in (1, 2, 5, len(text)):
        matcher = FreeTextStops(("*", "b <tool"), (OPEN, CLOSE))
        out = "".join(matcher.feed(text[i:i + size]) for i in range(0, len(text), size))
        assert matcher.stopped and out == text[: text.index("* more")]
    cut = '<tool_call>{"name": "f", "arguments": {"x": "*'  # a call ended by max_tokens, or a forced one by EOS
    matcher = FreeTextStops(("*",), (OPEN, CLOSE))
    assert matcher.feed(cut) + matcher.flush() == cut and not matcher.stopped
    matcher = FreeTextStops(("<t",), (OPEN, CLOSE))  # held as a tag's beginning, the reply's end makes it text
    assert matcher.feed("ab <t") + matcher.flush() == "ab " and matcher.stopped


def _forced_call(client, stream: bool, **kwargs) -> tuple[str, str, str]:
    """A forced get_weather call's name and arguments, and the finish reason, streamed or not."""
    kwargs = {"model": MODEL_NAME, "messages": ASK, "tools": [WEATHER], "tool_choice": "required", **kwargs}
    if not stream:
        choice = client.chat.completions.create(**kwargs).choices[0]
        (call,) = choice.message.tool_calls
        return call.function.name, call.function.arguments, choice.finish_reason
    chunks = [c for c in client.chat.completions.create(**kwargs, stream=True) if c.choices]
    deltas = [d for c in chunks for d in c.choices[0].delta.tool_calls or []]
    arguments = "".join(d.function.arguments or "" for d in deltas)
    return deltas[0].function.name, arguments, chunks[-1].choices[0].finish_reason


@pytest.mark.parametrize("stream", [False, True])
def test_a_stop_string_never_cuts_a_forced_call(client, stream):
    """Every get_weather call holds commas and `"unit"`: the call had been cut there, and dropped as no call."""
    whole = _forced_call(client, False, max_tokens=150)
    assert _forced_call(client, stream, max_tokens=150, stop=[",", '"unit"']) == whole
    _, arguments, finish = whole
    assert finish == "tool_calls"
    jsonschema.validate(json.loads(arguments), WEATHER["function"]["parameters"])


def test_a_max_tokens_no_forced_call_fits_is_refused_naming_the_least_that_does(client):
    """It had been a 200 whose call was cut off or empty, finish_reason length. The fixture's tokens are
    characters, so the least is the shortest call's characters and the end token."""
    shortest = '{"arguments":{"city":"","unit":"celsius"},"name":"get_weather"}'
    for max_tokens in (4, len(shortest)):
        with pytest.raises(openai.BadRequestError) as info:
            _forced_call(client, False, max_tokens=max_tokens)
        assert info.value.param == "max_tokens"
        assert re.search(r"max_tokens must be at least (\d+)", info.value.message).group(1) == str(len(shortest) + 1)
    for seed in range(3):
        _, arguments, finish = _forced_call(client, False, max_tokens=len(shortest) + 1, seed=seed, temperature=1.3)
        assert finish == "tool_calls"
        jsonschema.validate(json.loads(arguments), WEATHER["function"]["parameters"])


def _calls(resp) -> list:
    return resp.choices[0].message.tool_calls or []


def test_auto_calls_open_constrained_spans_mid_text(tagged_client):
    """Left to itself the random model emits the `<tool_call>` token; each call it opens is then decoded
    under the tools' schemas, so every call is a real function with valid arguments."""
    resp = tagged_client.chat.completions.create(model=MODEL_NAME, messages=ASK, tools=[WEATHER, TIME],
                                                 max_tokens=180)
    calls = _calls(resp)
    assert calls, resp.choices[0].message.content
    assert resp.choices[0].finish_reason == "tool_calls"
    for call in calls:
        spec = {"get_weather": WEATHER, "get_time": TIME}[call.function.name]
        jsonschema.validate(json.loads(call.function.arguments), spec["function"]["parameters"])
    assert "<tool_call>" not in (resp.choices[0].message.content or "")


def test_forced_call_with_tag_tokens(tagged_client):
    resp = tagged_client.chat.completions.create(
        model=MODEL_NAME, messages=ASK, tools=[WEATHER, TIME], max_tokens=120,
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
    )
    first = _calls(resp)[0]
    assert first.function.name == "get_weather"
    jsonschema.validate(json.loads(first.function.arguments), WEATHER["function"]["parameters"])


def test_tool_choice_none_never_calls(tagged_client):
    resp = tagged_client.chat.completions.create(model=MODEL_NAME, messages=ASK, tools=[WEATHER],
                                                 tool_choice="none", max_tokens=60)
    assert not _calls(resp)


def _call_or_json(choice, schema: dict) -> str:
    """Which of the two the answer is, checked: a valid call and no content, or JSON content under `schema`."""
    if choice.message.tool_calls:
        (call,) = choice.message.tool_calls
        spec = {"get_weather": WEATHER, "get_time": TIME}[call.function.name]
        jsonschema.validate(json.loads(call.function.arguments), spec["function"]["parameters"])
        assert choice.finish_reason == "tool_calls" and not choice.message.content
        return "call"
    assert choice.finish_reason == "stop"
    jsonschema.validate(json.loads(choice.message.content), schema)
    return "json"


def test_response_format_beside_auto_tools_gives_a_call_or_the_json(tagged_client):
    """Both apply, as in OpenAI's API: the model may call a tool, and what it writes instead follows the format
    (response_format had turned tool calling off). The random model takes either, depending on the sampling."""
    schema = {"type": "object", "properties": {"mood": {"enum": ["happy", "sad"]}}, "required": ["mood"],
              "additionalProperties": False}
    response_format = {"type": "json_schema", "json_schema": {"name": "mood", "schema": schema, "strict": True}}
    kinds = set()
    for seed, temperature in enumerate([0.0, 1.0, 1.5, 2.0]):
        resp = tagged_client.chat.completions.create(
            model=MODEL_NAME, messages=[{"role": "user", "content": "hi"}], tools=[WEATHER, TIME], max_tokens=120,
            response_format=response_format, seed=seed, temperature=temperature)
        kinds.add(_call_or_json(resp.choices[0], schema))
    assert kinds == {"call", "json"}


def test_response_format_beside_auto_tools_streams_the_call(tagged_client):
    stream = tagged_client.chat.completions.create(
        model=MODEL_NAME, messages=ASK, tools=[WEATHER], response_format={"type": "json_object"}, max_tokens=120,
        stream=True)
    deltas, content, finish = [], "", None
    for chunk in stream:
        for choice in chunk.choices:
            deltas.extend(choice.delta.tool_calls or [])
            content += choice.delta.content or ""
            finish = choice.finish_reason or finish
    assert finish == "tool_calls" and not content
    assert deltas[0].function.name == "get_weather"
    arguments = "".join(d.function.arguments or "" for d in deltas)
    jsonschema.validate(json.loads(arguments), WEATHER["function"]["parameters"])


def test_response_format_beside_tools_under_a_budget_no_call_fits_is_the_json(tagged_client):
    """The call was offered whatever the budget, so at a max_tokens below any whole call every answer that took
    it ended empty, finish length; now only the JSON is offered there, and it closes."""
    schema = {"type": "object", "properties": {"mood": {"enum": ["happy", "sad"]}}, "required": ["mood"],
              "additionalProperties": False}
    response_format = {"type": "json_schema", "json_schema": {"name": "mood", "schema": schema, "strict": True}}
    for seed, temperature in enumerate([0.0, 1.0, 1.5, 2.0]):
        resp = tagged_client.chat.completions.create(
            model=MODEL_NAME, messages=[{"role": "user", "content": "hi"}], tools=[WEATHER], max_tokens=20,
            response_format=response_format, seed=seed, temperature=temperature)
        assert _call_or_json(resp.choices[0], schema) == "json"  # half the seeds had ended empty


DATE = {"type": "function", "function": {"name": "get_date", "parameters": {
    "type": "object", "properties": {"day": {"type": "string", "format": "date"}, "days": {"type": "integer"}},
    "required": ["day", "days"]}}}


@pytest.mark.parametrize(("extra", "arguments"), [
    ({"patternProperties": {"^x_": {"type": "integer"}}}, '{"a": "hi", "x_n": 3}'),
    ({"minProperties": 2}, '{"a": "hi", "b": 1}'),
])
def test_a_loosened_object_still_takes_the_keys_its_dropped_keyword_allowed(extra, arguments):
    """The decoder writes only the listed keys of an object that says nothing of additionalProperties; a loosened
    one had said nothing, so a minProperties 2 tool could only be called invalidly."""
    params = {"type": "object", "properties": {"a": {"type": "string"}}, **extra}
    tool = {"type": "function", "function": {"name": "lookup", "parameters": params}}
    req = parse_chat_request({"model": MODEL_NAME, "messages": ASK, "tools": [tool]}, ApiLimits())
    automaton = JsonPrefixAutomaton(CompiledSchema(req.tools[0].call_parameters))
    assert automaton.feed(automaton.initial(), arguments)


@pytest.mark.parametrize("parameters", [
    {"$defs": {"Q": {"type": "object", "properties": {"q": {"type": "string", "pattern": "^a"}}}},
     "$ref": "#/$defs/Q"},
    {"anyOf": [{"type": "object", "properties": {"q": {"type": "string", "pattern": "^a"}}},
               {"type": "object", "properties": {"n": {"type": "integer"}}}]},
])
def test_a_loosened_tool_still_calls_with_an_object(parameters):
    """Loosened at a root with no type of its own (Pydantic's $ref, an anyOf), the arguments had become any
    value: a string or a number came out as a call's arguments."""
    tool = {"type": "function", "function": {"name": "lookup", "parameters": parameters}}
    req = parse_chat_request({"model": MODEL_NAME, "messages": ASK, "tools": [tool]}, ApiLimits())
    assert req.tools[0].call_parameters == {"type": "object"}


def test_an_auto_tool_the_decoder_cannot_enforce_loosens_its_own_calls_only(tagged_client):
    """`format` is no keyword the decoder enforces: get_date's parameters had made every tool's arguments any
    object, so calls came back as `{}` without their required keys. Now get_date alone loses the keyword (its
    required keys and its other properties hold) and get_weather keeps its whole schema. jsonschema asserts no
    `format`, so every call validates against its tool's full parameters."""
    req = parse_chat_request({"model": MODEL_NAME, "messages": ASK, "tools": [WEATHER, DATE]}, ApiLimits())
    assert req.tools[0].call_parameters == WEATHER["function"]["parameters"]
    assert req.tools[1].call_parameters == {"type": "object", "required": ["day", "days"], "properties": {
        "day": {"type": "string"}, "days": {"type": "integer"}}, "additionalProperties": True}
    calls = []
    for seed, temperature in enumerate([0.0, 1.0, 1.5, 2.0]):
        resp = tagged_client.chat.completions.create(model=MODEL_NAME, messages=ASK, tools=[WEATHER, DATE],
                                                     max_tokens=180, seed=seed, temperature=temperature)
        calls += _calls(resp)
    assert calls
    for call in calls:
        spec = {"get_weather": WEATHER, "get_date": DATE}[call.function.name]
        jsonschema.validate(json.loads(call.function.arguments), spec["function"]["parameters"])
