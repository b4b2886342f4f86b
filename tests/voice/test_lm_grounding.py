"""The voice stage's tool calls carry only names and numbers the caller said, decoded by the shipped demo model."""

from __future__ import annotations

import asyncio
import json

import pytest

from dlm.cli import DEMO_CHECKPOINT
from dlm.engine import Engine
from dlm.tools.calls import ToolCall, parse_tool_call
from dlm.tools.grounding import heard_numbers, heard_phrases
from voice.config import LmConfig
from voice.events import TokenUsage
from voice.lm_stage import LmStage

EXCHANGES = 8  # past questions and answers: more than the demo model's context holds beside the tools


@pytest.fixture(scope="module")
def engine() -> Engine:
    return Engine.from_dir(DEMO_CHECKPOINT)


def ground(engine: Engine, question: str, body: dict) -> tuple[dict, int]:
    """The call `body` after the stage grounded it in `question`, and how many calls it decoded again."""
    stage = LmStage(engine, LmConfig())
    stage.history.append({"role": "user", "content": question})
    try:
        grounded = asyncio.run(stage._grounded(json.dumps(body), stage.config.max_new_tokens))
    finally:
        stage.close()
    name, arguments = parse_tool_call(grounded)
    return {"name": name, "arguments": arguments}, stage.calls_redone


def test_a_name_the_caller_did_not_say_becomes_the_heard_one_it_is_like_or_is_decoded_again(engine: Engine) -> None:
    slovakia = "do you happen to know the capital of slovakia"
    misspelt = {"name": "country_capital", "arguments": {"country": "fovakia"}}
    assert ground(engine, slovakia, misspelt) == ({"name": "country_capital", "arguments": {"country": "slovakia"}}, 0)
    bulgaria = {"name": "country_capital", "arguments": {"country": "bulgaria"}}
    unlike = {"name": "country_capital", "arguments": {"country": "unitiagoia"}}
    assert ground(engine, "what is bulgaria's capital", unlike) == (bulgaria, 0)  # the one name said
    two = "what is the capital of bulgaria or of romania"
    call, redone = ground(engine, two, unlike)  # like neither: decoded again
    assert redone == 1
    assert call["name"] == "country_capital" and call["arguments"]["country"] in heard_phrases(two)


def test_a_number_the_caller_did_not_say_is_replaced_by_one_they_did(engine: Engine) -> None:
    nineteen = {"name": "set_timer", "arguments": {"amount": 19, "unit": "minutes"}}
    sixteen = {"name": "set_timer", "arguments": {"amount": 16, "unit": "minutes"}}
    assert ground(engine, "start a timer for sixteen minutes", nineteen) == (sixteen, 0)  # the one number said
    question = "start a timer for sixteen or seventeen minutes"  # which one: decoded again
    call, redone = ground(engine, question, nineteen)
    assert redone == 1 and call["name"] == "set_timer"
    assert call["arguments"]["amount"] in heard_numbers(question) == [16, 17]


def test_a_call_decoded_again_is_grounded_too(engine: Engine) -> None:
    """A call cut short is decoded again under the grounded schema, which leaves an expression free: the
    redone expression still gets the caller's numbers and operator."""
    stage = LmStage(engine, LmConfig())
    stage.history.append({"role": "user", "content": "hmm what's um eight multiplied by 9"})
    try:
        redone = asyncio.run(stage._grounded('{"name": "calculator", "arguments": {"expression": "8 9',
                                              stage.config.max_new_tokens))
    finally:
        stage.close()
    assert stage.calls_redone == 1
    assert parse_tool_call(redone) == ("calculator", {"expression": "8 * 9"})


def test_a_call_that_fits_what_was_heard_is_kept_and_an_unsaid_detail_dropped(engine: Engine) -> None:
    body = {"name": "spell_word", "arguments": {"word": "rhythm"}}
    assert ground(engine, "how do you spell rhythm", body) == (body, 0)
    timer = {"name": "set_timer", "arguments": {"amount": 16, "unit": "minutes"}}
    labelled = {"name": "set_timer", "arguments": {**timer["arguments"], "label": "tea"}}
    assert ground(engine, "let me know in 16 minutes", labelled) == (timer, 0)
    free = {"name": "calculator", "arguments": {"expression": "7 * 17"}}  # expressions are never narrowed
    assert ground(engine, "what's seventeen times 7", free) == (free, 0)


def test_a_spoken_question_gets_a_call_with_what_was_heard(engine: Engine) -> None:
    """The whole turn: free decoding, grounding, the tool, and a reply after its result; its token usage counts
    both decoding rounds (the second reads the first's prompt, its call and the result again)."""
    question = "tell me denmark's capital"
    stage = LmStage(engine, LmConfig())
    usage = TokenUsage()

    async def turn() -> list:
        return [item async for item in stage.reply(question, usage=usage)]

    try:
        items = asyncio.run(turn())
    finally:
        stage.close()
    calls = [item for item in items if isinstance(item, ToolCall)]
    assert calls and calls[0].name == "country_capital"
    assert calls[0].arguments["country"] in heard_phrases(question)
    assert "".join(item for item in items if isinstance(item, str)).strip()
    asked = next(i for i, m in enumerate(stage.history) if m["role"] == "user" and m["content"] == question)
    first_prompt = len(engine.prompt_ids(stage.history[: asked + 1], True))
    assert usage.input_tokens > 2 * first_prompt and usage.output_tokens > 0  # the second round reads more


def test_a_call_the_model_ends_inside_is_still_run(engine: Engine) -> None:
    """The demo model stops inside its call here (``{"country": "pretgaria"}}}``, no closing tag): the stage
    runs that call, grounded, and speaks the capital rather than its fallback."""
    stage = LmStage(engine, LmConfig())

    async def turn() -> list:
        return [item async for item in stage.reply("what is bulgaria's capital")]

    try:
        items = asyncio.run(turn())
    finally:
        stage.close()
    calls = [item for item in items if isinstance(item, ToolCall)]
    assert [(c.name, c.arguments) for c in calls] == [("country_capital", {"country": "bulgaria"})]
    said = "".join(item for item in items if isinstance(item, str))
    assert "sofia" in said and stage.config.fallback_reply not in said


def test_words_to_say_back_come_out_as_they_were_heard(engine: Engine) -> None:
    """The copy bias: the bare demo model says "zeouramo basket 57 ondrivala kenya" (``copy_bias = 0``)."""
    phrase = "zefiramo basket 57 ondrivala kenya"
    stage = LmStage(engine, LmConfig())

    async def turn() -> str:
        return "".join([item async for item in stage.reply(f"say back {phrase}") if isinstance(item, str)])

    try:
        said = asyncio.run(turn())
    finally:
        stage.close()
    assert phrase in said


def test_instructions_replace_the_system_message(engine: Engine) -> None:
    """A Realtime session's instructions are the prompt's system message from then on; none when empty."""
    stage = LmStage(engine, LmConfig())
    try:
        stage.history.append({"role": "user", "content": "hi"})
        assert stage.history[0] == {"role": "system", "content": LmConfig().system_prompt}
        stage.instruct("answer in one word.")
        prompt = engine.tokenizer.decode(engine.prompt_ids(stage.history, None), skip_special=False)
        assert prompt.startswith("<|im_start|>system\nanswer in one word.<|im_end|>")
        assert LmConfig().system_prompt not in prompt
        stage.instruct("")
        assert [m["role"] for m in stage.history] == ["user"]
    finally:
        stage.close()



def test_a_discarded_reply_is_rolled_back_even_after_old_exchanges_were_trimmed(engine: Engine) -> None:
    """The demo model's 320-token context makes a reply forget the oldest exchanges first; a speculative reply
    thrown away afterwards still takes exactly its own messages with it, whatever the system message did."""
    stage = LmStage(engine, LmConfig())
    try:
        for n in range(EXCHANGES):
            stage.history += [{"role": "user", "content": f"what is {n} plus {n}"},
                              {"role": "assistant", "content": f"it's {2 * n}."}]
        before, mark = list(stage.history), stage.mark()

        async def reply() -> None:
            async for _ in stage.reply("what is the capital of france"):
                pass

        asyncio.run(reply())
        kept = [m for m in before if m in stage.history]
        assert 1 < len(kept) < len(before), "the reply should have trimmed some old exchanges, not all"
        assert stage.history[len(kept)] == {"role": "user", "content": "what is the capital of france"}
        stage.instruct("answer in one word.")  # a new system message moves no mark
        stage.rollback(mark)
        assert stage.history == [{"role": "system", "content": "answer in one word."}, *kept[1:]]
    finally:
        stage.close()
