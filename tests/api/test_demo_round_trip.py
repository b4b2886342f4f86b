"""The tool-call round trip on the trained demo checkpoint: the model decides to call a tool (tool_choice
auto), the call is a real tool with valid arguments, the tool runs, and the model answers from its result."""

from __future__ import annotations

import json

import jsonschema
import openai
import pytest

from dlm.api.live_server import LiveServer
from dlm.api.server import create_app
from dlm.cli import DEMO_CHECKPOINT
from dlm.tools import TOOLS, run_tool, tool_specs

pytestmark = pytest.mark.skipif(not (DEMO_CHECKPOINT / "config.json").exists(),
                                reason="the demo checkpoint dlm/assets/demo is not built yet")


@pytest.fixture(scope="module")
def demo_client():
    from dlm.engine import Engine

    with LiveServer(create_app(Engine.from_dir(DEMO_CHECKPOINT), "demo")) as live:
        yield openai.OpenAI(base_url=live.url + "/v1", api_key="unused", max_retries=0, timeout=120)


@pytest.mark.parametrize("stream", [False, True])
def test_tool_call_round_trip(demo_client, stream):
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    first = demo_client.chat.completions.create(model="demo", messages=messages, tools=tool_specs(),
                                                max_tokens=96)
    (call,) = first.choices[0].message.tool_calls
    assert first.choices[0].finish_reason == "tool_calls"
    arguments = json.loads(call.function.arguments)
    jsonschema.validate(arguments, TOOLS[call.function.name].parameters)
    result = run_tool(call.function.name, arguments)
    messages += [{"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
                 {"role": "tool", "tool_call_id": call.id, "content": result}]
    answer = demo_client.chat.completions.create(model="demo", messages=messages, tools=tool_specs(),
                                                 max_tokens=96, stream=stream)
    if stream:
        text = "".join(c.choices[0].delta.content or "" for c in answer if c.choices)
    else:
        assert answer.choices[0].message.tool_calls is None
        text = answer.choices[0].message.content
    assert "paris" in text.lower()
