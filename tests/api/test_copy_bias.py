"""The API decodes as the voice assistant does: a reply (tool calls included) is copy-biased toward the
caller's words, so a name the demo model has never seen reaches the tool as it was said.

Over real sockets on the trained demo checkpoint. The asks are held-out ones whose names the bare model
miscopies ("gizhomelia" -> "gizoslia"); a server started with copy_bias 0 shows the bias is what
mends them (after retraining the demo, pick asks the new model miscopies: `python -m dlm.eval --copy-bias 0`)."""

from __future__ import annotations

import json

import openai
import pytest

from dlm.api.live_server import LiveServer
from dlm.api.server import create_app
from dlm.cli import DEMO_CHECKPOINT
from dlm.tools import tool_specs

ASKS = [("what city is the capital of gikifoland", "country_capital", {"country": "gikifoland"}),
        ("uh what's the capital of oskaluvia", "country_capital", {"country": "oskaluvia"}),
        ("spell the word lantern", "spell_word", {"word": "lantern"}),
        # followed from its first piece on, which the call's string starts with ("dsvenia" without)
        ("tell me slovenia's capital", "country_capital", {"country": "slovenia"}),
        ("do you happen to know the capital of slovakia real quick", "country_capital", {"country": "slovakia"}),
        # a word that asks for the tool starts no name ("cityevir", "spell" when it did)
        ("capital city uh of kulevir", "country_capital", {"country": "kulevir"}),
        ("could you spell threnodia okay", "spell_word", {"word": "threnodia"}),
        # a number said in words, written in digits (68 without)
        ("um a sixty seven minute timer please", "set_timer", {"amount": 67, "unit": "minutes"})]


@pytest.fixture(scope="module")
def clients():
    """A client of a server at the default copy bias and one of a server with it off, on one engine."""
    from dlm.engine import Engine

    engine = Engine.from_dir(DEMO_CHECKPOINT)
    with LiveServer(create_app(engine, "demo")) as biased, LiveServer(create_app(engine, "demo", copy_bias=0.0)) as bare:
        yield [openai.OpenAI(base_url=live.url + "/v1", api_key="unused", max_retries=0, timeout=120)
               for live in (biased, bare)]


def _arguments(client: openai.OpenAI, ask: str, tool_choice: str | dict) -> dict:
    reply = client.chat.completions.create(model="demo", messages=[{"role": "user", "content": ask}],
                                           tools=tool_specs(), tool_choice=tool_choice, max_tokens=64)
    (call,) = reply.choices[0].message.tool_calls
    return json.loads(call.function.arguments)


@pytest.mark.parametrize("forced", [False, True], ids=["drafted", "forced"])
@pytest.mark.parametrize(("ask", "tool", "expected"), ASKS)
def test_tool_call_copies_the_callers_name(clients, ask, tool, expected, forced):
    """Drafted by the free decoder (tool_choice auto) or decoded under the schema from its first token (a
    forced function): both are biased."""
    tool_choice = {"type": "function", "function": {"name": tool}} if forced else "auto"
    biased, bare = clients
    assert _arguments(biased, ask, tool_choice) == expected
    assert _arguments(bare, ask, tool_choice) != expected


def test_reply_says_back_what_was_heard(clients):
    biased, _ = clients
    reply = biased.chat.completions.create(model="demo", max_tokens=64,
                                           messages=[{"role": "user", "content": "say back gashuslea india serbia"}])
    assert "gashuslea india serbia" in reply.choices[0].message.content
