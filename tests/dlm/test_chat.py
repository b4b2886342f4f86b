"""`python -m dlm chat`: blocks printed as they commit, real tool calls, per-turn timing, a clean end."""

from __future__ import annotations

import io
import subprocess
import sys

import pytest

from dlm.chat import TerminalChat, run_chat
from dlm.cli import DEMO_CHECKPOINT
from dlm.engine import Engine


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


def test_a_missing_model_is_a_clear_error() -> None:
    done = subprocess.run([sys.executable, "-m", "dlm", "chat", "--model", "/nonexistent/model"],
                          input="hi\n", capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stderr.startswith("error: ") and "/nonexistent/model" in done.stderr
    assert "Traceback" not in done.stderr
