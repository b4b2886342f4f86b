"""The tool-call round trip on the trained demo checkpoint: the model decides to call a tool (tool_choice
auto), the call is a real tool with valid arguments, the tool runs, and the model answers in text.

What the small demo model *says* is its training's business (dlm.eval scores it); this checks the protocol."""

from __future__ import annotations

import json
import re

import jsonschema
import openai
import pytest

from dlm.api.chat_request import parse_chat_request
from dlm.api.limits import ApiLimits
from dlm.api.live_server import LiveServer
from dlm.api.server import create_app
from dlm.cli import DEMO_CHECKPOINT
from dlm.tools import TOOLS, ToolError, run_tool, tool_specs


@pytest.fixture(scope="module")
def demo_engine():
    from dlm.engine import Engine

    return Engine.from_dir(DEMO_CHECKPOINT)


@pytest.fixture(scope="module")
def demo_client(demo_engine):
    with LiveServer(create_app(demo_engine, "demo")) as live:
        yield openai.OpenAI(base_url=live.url + "/v1", api_key="unused", max_retries=0, timeout=120)


@pytest.mark.parametrize("stream", [False, True])
def test_tool_call_round_trip(demo_client, stream):
    messages = [{"role": "user", "content": "Set a timer for 5 minutes."}]
    first = demo_client.chat.completions.create(model="demo", messages=messages, tools=tool_specs(),
                                                max_tokens=96)
    (call,) = first.choices[0].message.tool_calls
    assert first.choices[0].finish_reason == "tool_calls"
    arguments = json.loads(call.function.arguments)
    jsonschema.validate(arguments, TOOLS[call.function.name].parameters)
    try:
        result = run_tool(call.function.name, arguments)
    except ToolError as exc:  # a wrong but well-formed call: the client reports the error, as real ones do
        result = json.dumps({"error": str(exc)})
    messages += [{"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
                 {"role": "tool", "tool_call_id": call.id, "content": result}]
    answer = demo_client.chat.completions.create(model="demo", messages=messages, tools=tool_specs(),
                                                 max_tokens=96, stream=stream)
    if stream:
        chunks = [c for c in answer if c.choices]
        assert not any(c.choices[0].delta.tool_calls for c in chunks)
        text, finish = "".join(c.choices[0].delta.content or "" for c in chunks), chunks[-1].choices[0].finish_reason
    else:
        assert answer.choices[0].message.tool_calls is None
        text, finish = answer.choices[0].message.content, answer.choices[0].finish_reason
    assert text.strip() and "<tool_call>" not in text
    assert finish == "stop"


@pytest.mark.parametrize("seed", range(2))
def test_json_object_closes_within_a_tight_max_tokens(demo_client, seed):
    """Any object in 8 tokens of the demo's 2048-token vocabulary. An object key is a free string, and
    checking that each of its tokens could still close in time took a scan of the vocabulary per token: about
    a minute for each position, past this client's timeout. Characters now settle most of them
    (`TokenGrammar.allowed_within`)."""
    reply = demo_client.chat.completions.create(
        model="demo", messages=[{"role": "user", "content": "describe a cat as json"}],
        response_format={"type": "json_object"}, max_tokens=8, seed=seed, temperature=1.3)
    choice = reply.choices[0]
    assert choice.finish_reason == "stop"
    assert isinstance(json.loads(choice.message.content), dict)


def test_a_history_longer_than_the_context_is_a_clear_400(demo_client):
    """The demo's context is 320 tokens, the server's prompt limit 4096: a prompt between them with no
    max_tokens had been a 500 (streaming: a 200 that failed in the stream)."""
    words = [{"role": "user", "content": "peru " * 290}]
    for stream in (False, True):
        with pytest.raises(openai.BadRequestError) as info:
            demo_client.chat.completions.create(model="demo", messages=words, stream=stream)
        assert info.value.code == "context_length_exceeded"
        assert "the limit is 319 " in info.value.message  # the prompt may be; it had said 4096 for a longer one
    with pytest.raises(openai.BadRequestError, match="the limit is 319 "):
        demo_client.chat.completions.create(model="demo", messages=[{"role": "user", "content": "peru " * 3000}])


def test_a_forced_call_whose_parameters_use_defs(demo_client):
    """Pydantic writes nested models and enums as `$defs` with `$ref`s: those resolve against the call
    schema's root, where the tool's parameters are nested, so they had failed (500 forced, unchecked auto)."""
    place = {"$defs": {"Country": {"type": "string", "enum": ["peru", "chile"]}}, "type": "object",
             "properties": {"country": {"$ref": "#/$defs/Country"}}, "required": ["country"]}
    tool = {"type": "function", "function": {"name": "capital", "parameters": place}}
    reply = demo_client.chat.completions.create(
        model="demo", messages=[{"role": "user", "content": "capital of peru"}], tools=[tool],
        tool_choice="required", max_tokens=40)
    (call,) = reply.choices[0].message.tool_calls
    assert reply.choices[0].finish_reason == "tool_calls"
    jsonschema.validate(json.loads(call.function.arguments), place)


def test_a_call_cut_off_by_max_tokens_is_not_reported_as_made(demo_client):
    """A call with no room to close: the finish reason is `length`, and no `<tool_call>` markup reaches the
    content (it had been `tool_calls` with arguments that do not parse, or the raw opening tag as text)."""
    reply = demo_client.chat.completions.create(
        model="demo", messages=[{"role": "user", "content": "what is 12 times 4"}], tools=tool_specs(), max_tokens=4)
    choice = reply.choices[0]
    assert choice.finish_reason == "length"
    assert "<tool_call>" not in (choice.message.content or "")


def test_a_call_cut_off_by_max_tokens_can_be_sent_back(demo_client, demo_engine):
    """Its arguments are no JSON; sent back in the history, as a client's tool loop does, the server's own message
    had been refused (400: not valid JSON). They are rendered into the prompt as written, as OpenAI's API takes
    them: an opaque string."""
    ask = {"role": "user", "content": "what is twelve times four"}
    tools = [{"type": "function", "function": {"name": "calculator", "parameters": {
        "type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]}}}]
    for max_tokens in range(16, 40):
        cut = demo_client.chat.completions.create(model="demo", messages=[ask], tools=tools,
                                                  max_tokens=max_tokens).choices[0]
        if cut.finish_reason == "length" and cut.message.tool_calls and cut.message.tool_calls[0].function.arguments:
            break
    (call,) = cut.message.tool_calls
    with pytest.raises(json.JSONDecodeError):
        json.loads(call.function.arguments)
    history = [ask, cut.message.model_dump(exclude_none=True),
               {"role": "tool", "tool_call_id": call.id, "content": "error: the call was cut off"}, ask]
    reply = demo_client.chat.completions.create(model="demo", messages=history, tools=tools, max_tokens=60)
    assert reply.choices[0].finish_reason in ("stop", "tool_calls", "length")
    req = parse_chat_request({"model": "demo", "messages": history}, ApiLimits())
    prompt = demo_engine.tokenizer.apply_chat_template(req.messages, add_generation_prompt=True)
    assert f'<tool_call>{{"name": "calculator", "arguments": {call.function.arguments}}}</tool_call>' in prompt


WEATHER_JSON = {"type": "json_schema", "json_schema": {"name": "w", "schema": {
    "type": "object", "properties": {"city": {"type": "string"}, "temp": {"type": "integer"}},
    "required": ["city", "temp"], "additionalProperties": False}}}


@pytest.mark.parametrize(("shape", "small"), [({"tool_choice": "required", "tools": tool_specs()}, 16),
                                              ({"response_format": WEATHER_JSON}, 5)])
def test_a_max_tokens_no_answer_fits_is_refused_naming_the_least_that_does(demo_client, shape, small):
    """A forced call or a response_format answer under a max_tokens below its shortest had been a 200 with
    the JSON cut off (`{"city`) or a call with empty arguments, finish_reason length."""
    ask = {"model": "demo", "messages": [{"role": "user", "content": "what is 12 times 4"}], **shape}
    with pytest.raises(openai.BadRequestError) as info:
        demo_client.chat.completions.create(max_tokens=small, **ask)
    assert info.value.param == "max_tokens"
    least = int(re.search(r"max_tokens must be at least (\d+)", info.value.message).group(1))
    choice = demo_client.chat.completions.create(max_tokens=least, **ask).choices[0]
    if choice.message.tool_calls:
        assert choice.finish_reason == "tool_calls"
        json.loads(choice.message.tool_calls[0].function.arguments)
    else:
        assert choice.finish_reason == "stop"
        json.loads(choice.message.content)


@pytest.mark.parametrize("tool_choice", ["auto", "required"])
def test_a_stop_string_leaves_a_call_whole(demo_client, tool_choice):
    """The demo writes 12 * 4: `"stop": ["*"]` had cut its arguments to `{"expression": "12 `, finish_reason
    stop, even with the call forced."""
    parameters = {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]}
    tool = {"type": "function", "function": {"name": "calculator", "parameters": parameters}}
    reply = demo_client.chat.completions.create(
        model="demo", messages=[{"role": "user", "content": "what is twelve times four"}], tools=[tool],
        tool_choice=tool_choice, stop=["*"], max_tokens=64)
    (call,) = reply.choices[0].message.tool_calls
    assert reply.choices[0].finish_reason == "tool_calls"
    arguments = json.loads(call.function.arguments)
    jsonschema.validate(arguments, parameters)
    assert "*" in arguments["expression"]


def test_enum_values_the_vocabulary_cannot_write(demo_client):
    """The demo's byte-level vocabulary holds no token with a whole "é": an enum of only such values is a 400
    (it had failed midway, a 500), and one with a value it can write decodes to that value."""
    def ask(values: list[str]):
        schema = {"type": "object", "properties": {"place": {"enum": values}}, "required": ["place"],
                  "additionalProperties": False}
        return demo_client.chat.completions.create(
            model="demo", messages=[{"role": "user", "content": "where to"}], max_tokens=20,
            response_format={"type": "json_schema", "json_schema": {"name": "p", "schema": schema}})

    with pytest.raises(openai.BadRequestError, match="cannot be written|can be written"):
        ask(["café", "日本"])
    reply = ask(["café", "paris"])
    assert json.loads(reply.choices[0].message.content) == {"place": "paris"}


def test_an_object_that_lists_its_keys_is_answered_with_those(demo_client):
    """Open to other keys by JSON Schema's default, the demo had filled the object with invented ones up to
    max_tokens: 298 tokens and 15-90 s for `{"c": 48}`. The decoder writes the keys listed unless
    additionalProperties says otherwise."""
    schema = {"type": "object", "properties": {"c": {"type": "integer"}}, "required": ["c"]}
    reply = demo_client.chat.completions.create(
        model="demo", messages=[{"role": "user", "content": "what is twelve times four"}],
        response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": schema}})
    assert set(json.loads(reply.choices[0].message.content)) == {"c"}
    assert reply.choices[0].finish_reason == "stop" and reply.usage.completion_tokens < 20
