"""The settle-or-decode-again step the chat and the evaluation run in one go (the voice stage steps it itself)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dlm.cli import DEMO_CHECKPOINT
from dlm.engine import Engine
from dlm.grounded_call import grounded_call, heard_and_results
from dlm.tools.calls import parse_tool_call


@pytest.fixture(scope="module")
def engine() -> Engine:
    engine = Engine.from_dir(DEMO_CHECKPOINT)
    yield engine
    engine.close()


def ground(engine: Engine, messages: list[dict], body: str) -> tuple[str, bool]:
    knobs, _ = engine.knobs(effort="medium")
    session = engine.new_session()
    try:
        return grounded_call(engine, session, engine.prompt_ids(messages, True), body, messages, knobs, 64)
    finally:
        session.release()


def test_a_call_that_can_be_settled_is_not_decoded_again(engine: Engine) -> None:
    messages = [{"role": "user", "content": "how do you spell rhythm"}]
    body = json.dumps({"name": "spell_word", "arguments": {"word": "rythm"}})
    assert ground(engine, messages, body) == (json.dumps({"name": "spell_word", "arguments": {"word": "rhythm"}}),
                                              False)


def test_a_call_cut_short_is_decoded_again_under_the_grounded_schema(engine: Engine) -> None:
    messages = [{"role": "user", "content": "hmm what's um eight multiplied by 9"}]
    call, redone = ground(engine, messages, '{"name": "calculator", "arguments": {"expression": "8 9')
    assert redone and parse_tool_call(call) == ("calculator", {"expression": "8 * 9"})


def test_a_model_that_cannot_decode_a_call_under_a_schema_keeps_its_own(fixtures_dir: Path) -> None:
    """LLaDA is bidirectional: its calls cannot be decoded again span by span, so a call is settled or kept."""
    engine = Engine.from_dir(fixtures_dir / "llada" / "checkpoint")
    try:
        messages = [{"role": "user", "content": "what is 8 times 9"}]
        body = '{"name": "calculator", "arguments": {"expression": "8 9'
        assert ground(engine, messages, body) == (body, False)
    finally:
        engine.close()


def test_grounding_reads_the_caller_s_last_words_and_every_tool_result() -> None:
    messages = [{"role": "user", "content": "what's 32 squared"},
                {"role": "tool", "content": '{"result": 1024}'},
                {"role": "assistant", "content": "it's one thousand twenty-four."},
                {"role": "user", "content": "times it by 12"}]
    assert heard_and_results(messages) == ("times it by 12", '{"result": 1024}')
    assert heard_and_results([]) == ("", "")
