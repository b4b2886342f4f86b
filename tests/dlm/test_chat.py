"""`python -m dlm chat`: blocks printed as they commit, real tool calls, per-turn timing, a clean end."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dlm.chat import TerminalChat, run_chat
from dlm.cli import DEMO_CHECKPOINT
from dlm.engine import Engine
from dlm.history import fit_history


@pytest.fixture(scope="module")
def engine() -> Engine:
    engine = Engine.from_dir(DEMO_CHECKPOINT)
    yield engine
    engine.close()


def test_a_turn_runs_the_tool_and_reports_its_timing(engine: Engine) -> None:
    out = io.StringIO()
    timings = run_chat(engine, ["what's the date today\n", "\n", "never read\n"], out)

    text = out.getvalue()
    assert len(timings) == 1, "the empty line ends the chat"
    assert "[tool get_date({}) -> " in text and '"spoken": ' in text
    assert 0 < timings[0].first_block_ms <= timings[0].total_ms
    assert "(first block " in text and " ms, total " in text


def test_the_history_holds_the_call_its_result_and_the_reply(engine: Engine) -> None:
    chat = TerminalChat(engine, io.StringIO())
    chat.turn("what's the date today")
    roles = [m["role"] for m in chat.history]
    assert roles[:2] == ["system", "user"] and "tool" in roles and roles[-1] == "assistant"
    call = next(m for m in chat.history if m.get("tool_calls"))
    assert call["tool_calls"][0]["function"]["name"] == "get_date"


def test_a_typed_word_reaches_the_tool_as_the_caller_wrote_it(engine: Engine) -> None:
    """The model alone ends its call inside the JSON here (`"pretgaria"}}}`, no closing tag); the chat runs that
    call, grounded as the voice assistant grounds its calls."""
    chat = TerminalChat(engine, io.StringIO())
    chat.turn("what is bulgaria's capital")
    call = next(m for m in chat.history if m.get("tool_calls"))["tool_calls"][0]["function"]
    assert (call["name"], call["arguments"]) == ("country_capital", {"country": "bulgaria"})
    assert chat.history[-1]["content"] == "sofia is the capital of bulgaria."


def test_a_bidirectional_checkpoint_chats_without_a_copy_bias(fixtures_dir: Path) -> None:
    """LLaDA and Dream take no logit bias; the chat had passed one and failed on every turn."""
    llada = Engine.from_dir(fixtures_dir / "llada" / "checkpoint")
    try:
        assert llada.copy_bias([{"role": "user", "content": "say kelmaria"}]) is None
        timings = run_chat(llada, ["hello there\n", "\n"], io.StringIO())
    finally:
        llada.close()
    assert len(timings) == 1 and timings[0].total_ms > 0


def test_a_missing_model_is_a_clear_error() -> None:
    done = subprocess.run([sys.executable, "-m", "dlm", "chat", "--model", "/nonexistent/model"],
                          input="hi\n", capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stderr.startswith("error: ") and "/nonexistent/model" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_checkpoint_without_a_chat_template_is_refused_before_the_first_turn(fixtures_dir: Path,
                                                                             tmp_path: Path) -> None:
    """Had been a CheckpointError traceback, status 1, on the first message."""
    shutil.copytree(fixtures_dir / "sdar" / "checkpoint", tmp_path / "ckpt")
    conf = tmp_path / "ckpt" / "tokenizer_config.json"
    conf.write_text(json.dumps({k: v for k, v in json.loads(conf.read_text()).items() if k != "chat_template"}))
    done = subprocess.run([sys.executable, "-m", "dlm", "chat", "--model", str(tmp_path / "ckpt")],
                          input="hello\n", capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr == f"error: {conf}: no chat_template; the chat needs one\n"


def test_a_long_chat_forgets_its_oldest_exchanges_instead_of_overflowing_the_context(engine: Engine) -> None:
    chat = TerminalChat(engine, io.StringIO())
    questions = ["what's the date today", "spell umbrella", "what is the capital of france", "what's 12 times 4",
                 "how much is 3 miles in kilometers", "set a timer for 5 minutes"]
    for question in questions:  # the demo's 320-token context holds about three of these exchanges
        chat.turn(question)
    cfg = engine.model.cfg
    assert len(engine.prompt_ids(chat.history, True)) <= cfg.max_position_embeddings
    assert chat.history[0]["role"] == "system" and chat.history[1]["role"] == "user"
    users = [m["content"] for m in chat.history if m["role"] == "user"]
    assert users[-1] == questions[-1] and questions[0] not in users


def test_fit_history_drops_whole_exchanges_from_the_oldest_and_keeps_the_system_message() -> None:
    history = [{"role": "system", "content": "s"},
               {"role": "user", "content": "a"}, {"role": "assistant", "content": "", "tool_calls": []},
               {"role": "tool", "content": "{}"}, {"role": "assistant", "content": "ra"},
               {"role": "user", "content": "b"}, {"role": "assistant", "content": "rb"},
               {"role": "user", "content": "c"}]
    fit_history(history, len, budget=4)
    assert [m["content"] for m in history] == ["s", "b", "rb", "c"]
    fit_history(history, len, budget=0)  # the newest message stays whatever the budget
    assert [m["content"] for m in history] == ["s", "c"]


def test_fit_history_keeps_the_current_turn_whole() -> None:
    """A tool round that ran over the budget had dropped the turn's question and call: [system, tool]."""
    history = [{"role": "system", "content": "s"}, {"role": "user", "content": "a"},
               {"role": "assistant", "content": "ra"}, {"role": "user", "content": "b"},
               {"role": "assistant", "content": "", "tool_calls": []}, {"role": "tool", "content": "{}"}]
    assert fit_history(history, len, budget=4) == 2
    assert [m["role"] for m in history] == ["system", "user", "assistant", "tool"]
    assert fit_history(history, len, budget=0) == 2  # the turn alone over budget: it goes too, as before
    assert [m["role"] for m in history] == ["system", "tool"]


def test_a_turn_whose_tool_round_overflows_the_context_is_still_answered(engine: Engine) -> None:
    """Keeping the whole turn, a tool round past the context had been refused after its timer was set: the timer
    ran, the history forgot it."""
    chat = TerminalChat(engine, io.StringIO())
    chat.turn("please " * 52 + "set a timer for 5 minutes")
    assert chat.tools.timers and chat.history[-1]["role"] == "assistant"


def test_a_message_too_long_for_the_context_is_refused_and_the_chat_goes_on(engine: Engine) -> None:
    """It had ended the chat with a traceback, and the conversation with it."""
    out = io.StringIO()
    timings = run_chat(engine, ["hi " * 140, "what is 2 plus 2", ""], out)
    assert "leaves no room in the context" in out.getvalue() and "say it in fewer words" in out.getvalue()
    assert len(timings) == 1  # the second message was answered


def test_a_reply_writes_the_callers_word_once(engine: Engine) -> None:
    """Two neighbouring positions decoded in one pass both expected "plus", copied from the question: the reply was
    "2 plusplus 6 equals eight." (measured on the shipped checkpoint before `confidence.without_parallel_repeats`)."""
    chat = TerminalChat(engine, io.StringIO())
    chat.turn("What is 2 plus 6?")
    reply = chat.history[-1]["content"]
    assert "eight" in reply and "plusplus" not in reply, reply


def test_a_reply_says_the_request_back_as_it_was_asked(engine: Engine) -> None:
    """The result's "minus seven" had been copied into the question said back: "7 minus seven is minus seven"."""
    chat = TerminalChat(engine, io.StringIO())
    chat.turn("What is 7 minus 14?")
    reply = chat.history[-1]["content"]
    assert "minus seven" in reply and "minus seven is" not in reply and "minus seven equals" not in reply, reply


@pytest.mark.parametrize(("asked", "copied"), [("spell knowledge", "k, n, o, w, l, e, d, g, e"),
                                               ("what's 10 divided by 3", "three point three three")])
def test_a_copy_whose_end_repeats_its_middle_ends_there(engine: Engine, asked: str, copied: str) -> None:
    """The copy bias had read the end of these as their middle: "... d, g, e, d, g, e, ..." to the token cap (46 of
    the 54 spelled words whose last letter occurs earlier, measured with /tmp/loop/probe.py)."""
    chat = TerminalChat(engine, io.StringIO())
    chat.turn(asked)
    reply = chat.history[-1]["content"]
    assert reply.endswith(copied + "."), reply


def test_a_tool_error_is_answered_not_read_out(engine: Engine) -> None:
    """The copy bias had followed the error's text: "sorry, i don't know the capital known for 'atlantis'"."""
    chat = TerminalChat(engine, io.StringIO())
    chat.turn("what's the capital of atlantis")
    assert chat.history[-1]["content"] == "sorry, i don't know the capital of atlantis."
