"""The assistant's tools run for real: safe arithmetic, the clock, units, timers, capitals, clear errors."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import jsonschema
import pytest

from dlm.tools import (
    ToolError,
    ToolSession,
    int_to_words,
    number_to_words,
    ordinal_words,
    run_tool,
    tool_specs,
)
from dlm.tools.calculator import evaluate, readable
from dlm.tools.calls import changes_state


@pytest.mark.parametrize(("expression", "value"), [
    ("12 * 4", 48), ("7 / 2", 3.5), ("2 ^ 10", 1024), ("sqrt(16)", 4.0), ("-3 + 5 * 2", 7), ("(1 + 2) * 3", 9),
    ("10 % 3", 1), ("15 / 100 * 80", 12.0), ("2 ** -1", 0.5),
])
def test_calculator_values(expression: str, value: float) -> None:
    assert evaluate(expression) == value


@pytest.mark.parametrize(("expression", "reason"), [
    ("__import__('os').system('true')", "unsupported"),
    ("().__class__", "unsupported"),
    ("open('x')", "unsupported"),
    ("2 ** 1000", "exponent"),
    ("9 ** 9 ** 9", "exponent"),
    ("10 ** 10 ** 2", "exponent"),
    ("99999999 * 99999999 * 99999999", "too large"),
    ("1 / 0", "division by zero"),
    ("a + 1", "unsupported"),
    ("True + 1", "unsupported"),
    ("'x' * 3", "unsupported"),
    ("1 +", "cannot parse"),
    ("1 + " * 100 + "1", "longer than"),
    ("sqrt(-1)", "negative"),
    ("", "non-empty"),
])
def test_calculator_rejects(expression: str, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        evaluate(expression)


def test_an_expression_is_readable_if_it_parses_whatever_it_evaluates_to() -> None:
    assert readable("sqrt(13)") and readable("2 ^ 10") and readable("10 / 0")  # the tool explains a zero
    assert not readable("sqrt(13rteen)") and not readable("8 *")


def test_number_words() -> None:
    assert int_to_words(48) == "forty-eight"
    assert int_to_words(1205) == "one thousand two hundred five"
    assert int_to_words(-7) == "minus seven"
    assert int_to_words(3_000_000) == "three million"
    assert number_to_words(3.5) == "three point five"
    assert number_to_words(2 / 3) == "zero point six seven"
    assert number_to_words(4.0) == "four"
    assert [ordinal_words(n) for n in (1, 2, 3, 12, 20, 21, 30)] == [
        "first", "second", "third", "twelfth", "twentieth", "twenty-first", "thirtieth"]


def fixed_session(moment: datetime) -> tuple[ToolSession, list[datetime]]:
    now = [moment]
    return ToolSession(clock=lambda: now[0]), now


def test_time_and_date_come_from_the_clock() -> None:
    session, _ = fixed_session(datetime(2025, 3, 14, 14, 5, tzinfo=timezone.utc))
    assert json.loads(session.run("get_time", {})) == {"time": "14:05", "spoken": "two oh five pm"}
    date = json.loads(session.run("get_date", {}))
    assert date == {"date": "2025-03-14", "weekday": "friday", "spoken": "friday march fourteenth"}
    tokyo = json.loads(session.run("get_time", {"timezone": "Asia/Tokyo"}))
    assert tokyo["time"] == "23:05"
    with pytest.raises(ToolError, match="unknown timezone"):
        session.run("get_time", {"timezone": "Mars/Olympus"})


def test_real_clock_is_timezone_aware() -> None:
    assert ToolSession().now().tzinfo is not None


def test_conversions() -> None:
    assert json.loads(run_tool("convert_units", {"value": 100, "from_unit": "c", "to_unit": "f"})) == {
        "result": 212, "spoken": "two hundred twelve degrees fahrenheit"}
    assert json.loads(run_tool("convert_units", {"value": 5, "from_unit": "km", "to_unit": "mi"}))["result"] == 3.11
    with pytest.raises(ToolError, match="cannot convert length"):
        run_tool("convert_units", {"value": 5, "from_unit": "km", "to_unit": "kg"})
    with pytest.raises(ToolError, match="is not one of"):
        run_tool("convert_units", {"value": 5, "from_unit": "parsec", "to_unit": "km"})


def test_timers_live_in_the_session() -> None:
    session, now = fixed_session(datetime(2025, 1, 1, 12, 0, tzinfo=timezone.utc))
    assert json.loads(session.run("set_timer", {"amount": 5, "unit": "minutes", "label": "pasta"})) == {
        "id": 1, "spoken": "five minutes"}
    session.run("set_timer", {"amount": 30, "unit": "seconds"})
    now[0] += timedelta(seconds=70)
    listed = json.loads(session.run("list_timers", {}))
    assert [t["remaining_seconds"] for t in listed["timers"]] == [230, 0]
    assert listed["spoken"].startswith("pasta three minutes and fifty seconds left")
    assert json.loads(session.run("cancel_timer", {}))["cancelled"] == 2
    assert json.loads(session.run("cancel_timer", {"id": 1}))["cancelled"] == 1
    with pytest.raises(ToolError, match="no timers"):
        session.run("cancel_timer", {})
    with pytest.raises(ToolError, match="between one second"):
        session.run("set_timer", {"amount": 48, "unit": "hours"})
    assert ToolSession().run("list_timers", {}) == '{"timers": [], "spoken": "no timers"}'


def test_capitals() -> None:
    assert json.loads(run_tool("country_capital", {"country": "France"}))["capital"] == "paris"
    with pytest.raises(ToolError, match="no capital known for 'atlantis'"):
        run_tool("country_capital", {"country": "atlantis"})


def test_spelling_reads_out_each_word_letter_by_letter() -> None:
    assert json.loads(run_tool("spell_word", {"word": "Garden"})) == {"word": "garden", "spoken": "g, a, r, d, e, n"}
    assert json.loads(run_tool("spell_word", {"word": " new  york "}))["spoken"] == "n, e, w / y, o, r, k"
    for word in ("  ", "x" * 41):
        with pytest.raises(ToolError, match="spell one word or name of 1 to 40 characters"):
            run_tool("spell_word", {"word": word})


@pytest.mark.parametrize(("name", "arguments", "message"), [
    ("launch_rockets", {}, "unknown tool 'launch_rockets'"),
    ("calculator", {}, "missing required key 'expression'"),
    ("calculator", {"expression": 2}, "expected string"),
    ("calculator", {"expression": "1", "x": 1}, "unexpected key 'x'"),
    ("calculator", "{not json", "not valid JSON"),
    ("calculator", "[1]", "must be a JSON object"),
])
def test_bad_calls_are_explained(name: str, arguments: object, message: str) -> None:
    with pytest.raises(ToolError, match=message):
        run_tool(name, arguments)  # type: ignore[arg-type]
    assert message in json.loads(ToolSession().run_safely(name, arguments))["error"]  # type: ignore[arg-type]


def test_arguments_may_arrive_as_json_text() -> None:
    assert json.loads(run_tool("calculator", '{"expression": "6 * 7"}'))["spoken"] == "forty-two"


def test_specs_are_valid_json_schemas() -> None:
    for spec in tool_specs():
        jsonschema.Draft202012Validator.check_schema(spec["function"]["parameters"])


def test_only_timers_change_state_so_only_they_wait_for_the_end_of_a_turn():
    assert changes_state('{"name": "set_timer", "arguments": {"amount": 5, "unit": "minutes"}}')
    assert changes_state('{"name": "cancel_timer", "arguments": {}}')
    for body in ('{"name": "calculator", "arguments": {"expression": "2 + 2"}}', '{"name": "list_timers"}',
                 '{"name": "no_such_tool", "arguments": {}}', "not json"):
        assert not changes_state(body), body
