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
from dlm.tools.calls import changes_state, run_tool_call


@pytest.mark.parametrize(("expression", "value"), [
    ("12 * 4", 48), ("7 / 2", 3.5), ("2 ^ 10", 1024), ("sqrt(16)", 4.0), ("-3 + 5 * 2", 7), ("(1 + 2) * 3", 9),
    ("10 % 3", 1), ("15 / 100 * 80", 12.0), ("2 ** -1", 0.5),
    ("2,500 / 5", 500), ("12,000,000 / 1,000", 12000), ("1,500.5 * 2", 3001.0),  # digit groups: one number
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
    ("10 ** 15", "too large"),  # the first number the reply could not say
    ("1 / 0", "division by zero"),
    ("a + 1", "unsupported"),
    ("True + 1", "unsupported"),
    ("'x' * 3", "unsupported"),
    ("1 +", "cannot parse"),
    ("1 + " * 100 + "1", "longer than"),
    ("sqrt(-1)", "negative"),
    ("", "non-empty"),
    ("1, 2, 3", "unsupported"),  # commas between numbers join nothing
    ("1,5000", "unsupported"),
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


def convert(value: float, from_unit: str, to_unit: str) -> dict:
    return json.loads(run_tool("convert_units", {"value": value, "from_unit": from_unit, "to_unit": to_unit}))


def test_a_small_result_is_said_not_rounded_away_to_zero() -> None:
    assert json.loads(run_tool("calculator", {"expression": "1/1000"})) == {
        "result": 0.001, "spoken": "zero point zero zero one"}
    assert json.loads(run_tool("calculator", {"expression": "1/300"})) == {
        "result": 0.0033, "spoken": "zero point zero zero three three"}
    assert convert(3, "g", "kg") == {"result": 0.003, "spoken": "zero point zero zero three kilograms"}
    assert convert(1, "ml", "cup") == {"result": 0.00423, "spoken": "zero point zero zero four two three cups"}
    assert number_to_words(0.1 + 0.2 - 0.3) == "zero"  # float noise, far below anything said, is still zero


def test_results_of_a_unit_or_more_of_the_last_place_are_said_as_the_model_was_trained_on() -> None:
    assert json.loads(run_tool("calculator", {"expression": "1 / 12"})) == {
        "result": 0.0833, "spoken": "zero point zero eight"}
    assert convert(1, "mi", "m") == {
        "result": 1609.34, "spoken": "one thousand six hundred nine point three four meters"}
    assert convert(1, "g", "oz") == {"result": 0.04, "spoken": "zero point zero four ounces"}
    assert convert(1, "lb", "kg")["spoken"] == "zero point four five kilograms"


def test_a_long_decimal_is_said_as_its_shortest_digits() -> None:
    spoken = json.loads(run_tool("calculator", {"expression": "999999999999999.9"}))["spoken"]
    assert spoken.endswith("thousand nine hundred ninety-nine point nine")  # '.2f' wrote the float's ".88"
    assert "eight" not in spoken


def test_conversions_refuse_what_cannot_be_said_or_cannot_be() -> None:
    for value, reason in ((1e300, "value is too large"), (10**400, "value is too large"),
                          (float("inf"), "not a finite number"), (float("nan"), "not a finite number")):
        with pytest.raises(ToolError, match=reason):
            convert(value, "m", "ft")
    with pytest.raises(ToolError, match="result is too large"):
        convert(10**14, "km", "mm")
    with pytest.raises(ToolError, match="-300 degrees celsius is below absolute zero"):
        convert(-300, "c", "k")
    assert convert(-459.67, "f", "k") == {"result": 0, "spoken": "zero kelvin"}  # absolute zero itself
    assert convert(-1, "c", "c")["spoken"] == "minus one degree celsius"


@pytest.mark.parametrize("body", [
    '{"name": "convert_units", "arguments": {"value": 1e999, "from_unit": "m", "to_unit": "ft"}}',
    '{"name": "convert_units", "arguments": {"value": 1' + "0" * 400 + ', "from_unit": "m", "to_unit": "ft"}}',
])
def test_a_value_too_large_for_a_float_is_an_error_result_not_a_crash(body: str) -> None:
    assert "error" in json.loads(run_tool_call(ToolSession(), body).result)


def test_an_arithmetic_failure_of_a_tool_is_its_error_result() -> None:
    session, _ = fixed_session(datetime.max.replace(tzinfo=timezone.utc) - timedelta(minutes=1))
    result = json.loads(session.run_safely("set_timer", {"amount": 5, "unit": "minutes"}))  # past the year 9999
    assert result == {"error": "set_timer: date value out of range"}


def test_timers_live_in_the_session() -> None:
    session, now = fixed_session(datetime(2025, 1, 1, 12, 0, tzinfo=timezone.utc))
    assert json.loads(session.run("set_timer", {"amount": 5, "unit": "minutes", "label": "pasta"})) == {
        "id": 1, "spoken": "five minutes"}
    session.run("set_timer", {"amount": 90, "unit": "seconds"})
    now[0] += timedelta(seconds=70)
    listed = json.loads(session.run("list_timers", {}))
    assert [t["remaining_seconds"] for t in listed["timers"]] == [230, 20]
    assert listed["spoken"].startswith("pasta three minutes and fifty seconds left")
    assert json.loads(session.run("cancel_timer", {}))["cancelled"] == 2
    assert json.loads(session.run("cancel_timer", {"id": 1}))["cancelled"] == 1
    with pytest.raises(ToolError, match="no timers"):
        session.run("cancel_timer", {})
    with pytest.raises(ToolError, match="between one second"):
        session.run("set_timer", {"amount": 48, "unit": "hours"})
    assert ToolSession().run("list_timers", {}) == '{"timers": [], "spoken": "no timers"}'


def test_a_finished_timer_is_gone() -> None:
    session, now = fixed_session(datetime(2025, 1, 1, 12, 0, tzinfo=timezone.utc))
    session.run("set_timer", {"amount": 30, "unit": "seconds", "label": "tea"})
    now[0] += timedelta(seconds=29.6)
    assert json.loads(session.run("list_timers", {}))["spoken"] == "tea one second left"  # not yet "zero"
    now[0] += timedelta(seconds=0.4)
    assert json.loads(session.run("list_timers", {})) == {"timers": [], "spoken": "no timers"}
    with pytest.raises(ToolError, match="there are no timers running"):
        session.run("cancel_timer", {})
    session.run("set_timer", {"amount": 10, "unit": "seconds"})
    now[0] += timedelta(seconds=15)
    session.run("set_timer", {"amount": 1, "unit": "minutes"})
    assert [t["id"] for t in json.loads(session.run("list_timers", {}))["timers"]] == [3]
    with pytest.raises(ToolError, match="no timer with id 2"):
        session.run("cancel_timer", {"id": 2})


@pytest.mark.parametrize("seconds", [0.4, 0.5, 0.99])
def test_a_timer_lasts_at_least_a_second(seconds: float) -> None:
    with pytest.raises(ToolError, match="between one second and twenty-four hours"):
        run_tool("set_timer", {"amount": seconds, "unit": "seconds"})
    assert json.loads(run_tool("set_timer", {"amount": 1, "unit": "seconds"}))["spoken"] == "one second"


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
