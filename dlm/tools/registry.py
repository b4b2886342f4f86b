"""The assistant's tools: JSON-schema specs the model and the API see, and their real implementations.

Results are compact JSON with a `spoken` field already in words, so a small model only has to copy it into
its reply and the text can go straight to TTS.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import cached_property
from typing import Any, Protocol
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from dlm.constrained.schema import CompiledSchema, check
from dlm.tools.calculator import evaluate
from dlm.tools.facts import CAPITALS
from dlm.tools.numbers import format_number, int_to_words, number_to_words, ordinal_words
from dlm.tools.units import UNITS, convert, unit_name

TIMER_UNITS = {"seconds": 1, "minutes": 60, "hours": 3600}
MAX_TIMER_SECONDS = 24 * 3600
MONTHS = ["january", "february", "march", "april", "may", "june", "july", "august", "september",
          "october", "november", "december"]


class ToolError(ValueError):
    """An unknown tool or arguments that do not fit its schema or its domain."""


def own_words(name: str, description: str, parameters: dict[str, Any]) -> frozenset[str]:
    """The words of a tool's name, its description, its parameters' names and their enums, and their
    inflections: what a caller says to ask for the tool ("spelled", "the capital of", "a three minute timer")."""
    properties = parameters.get("properties", {})
    text = " ".join([name.replace("_", " "), description, *properties, *enum_values(parameters)])
    words = set(re.findall(r"[a-z0-9]+", text.lower()))
    singulars = {w[:-1] for w in words if len(w) > 3 and w.endswith("s")}
    return frozenset(words | singulars | {w + end for w in words if len(w) > 3 for end in ("s", "es", "ed", "ing")})


def enum_values(parameters: dict[str, Any]) -> list[str]:
    """Every value a tool's parameters' enums allow, as text (a property's schema may be just `true`)."""
    specs = parameters.get("properties", {}).values()
    return [str(v) for spec in specs if isinstance(spec, dict) for v in spec.get("enum", ())]


class Described(Protocol):
    """A tool as a caller's request or the registry describes it."""

    name: str
    description: str
    parameters: dict[str, Any]


def asking_words(tools: Iterable[Described]) -> frozenset[str]:
    """The words that ask for one of ``tools`` and are not a value any of their parameters takes: where a name
    the caller says does not begin ("the capital city of"), where "10 mm in inches" still gives its units."""
    tools = list(tools)
    words = frozenset().union(*(own_words(t.name, t.description, t.parameters) for t in tools))
    return words - {value for t in tools for value in enum_values(t.parameters)}


@dataclass(frozen=True)
class Tool:
    """`heard` names the parameters whose value the caller says (a "name", any one "word", a "number", an
    "expression" whose numbers they say, the "quantity unit" said after a number, the "target unit" asked for,
    a timer's "time unit", or a "label": a name, the one said before the tool's noun when the call has none,
    "a tea timer"), which a call may only carry as heard (`dlm.tools.grounding`). `changes_state`: running it
    changes the session (a timer set or cancelled), so the voice assistant runs it only once the caller's turn
    has surely ended; the others only read (the clock, a table, arithmetic) and may run in a reply started
    speculatively."""

    name: str
    description: str
    parameters: dict[str, Any]
    run: Callable[[ToolSession, dict[str, Any]], dict[str, Any]]
    heard: dict[str, str] = field(default_factory=dict)
    changes_state: bool = False

    @cached_property
    def own_words(self) -> frozenset[str]:
        """What a caller says to ask for this tool (:func:`own_words`), so never a value a heard parameter carries."""
        return own_words(self.name, self.description, self.parameters)

    @property
    def noun(self) -> str:
        """What the tool is about, the last word of its name: "timer" for set_timer."""
        return self.name.rsplit("_", 1)[-1]

    def spec(self) -> dict[str, Any]:
        """The OpenAI-style function description."""
        return {"type": "function",
                "function": {"name": self.name, "description": self.description, "parameters": self.parameters}}


@dataclass
class Timer:
    id: int
    seconds: float
    label: str
    ends_at: datetime


@dataclass
class ToolSession:
    """Per-conversation tool state (timers) and the clock, injectable so tests and data are reproducible; the
    facts table too, so training data can hold places the model cannot know and must read from the result."""

    clock: Callable[[], datetime] = field(default=lambda: datetime.now().astimezone())
    capitals: dict[str, str] = field(default_factory=lambda: CAPITALS)
    timers: dict[int, Timer] = field(default_factory=dict)
    next_timer_id: int = 1

    def run(self, name: str, arguments: dict[str, Any] | str) -> str:
        """Run a tool and return its JSON result; raises ToolError with a readable reason."""
        tool = TOOLS.get(name)
        if tool is None:
            raise ToolError(f"unknown tool {name!r}; available: {', '.join(TOOLS)}")
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments) if arguments.strip() else {}
            except json.JSONDecodeError as err:
                raise ToolError(f"arguments for {name} are not valid JSON: {err.msg}") from None
        if not isinstance(arguments, dict):
            raise ToolError(f"arguments for {name} must be a JSON object")
        errors = check(arguments, _COMPILED[name])
        if errors:
            raise ToolError(f"bad arguments for {name}: {'; '.join(errors)}")
        try:
            result = tool.run(self, arguments)
        except (ValueError, ArithmeticError) as err:  # an overflow too (a timer past the year 9999)
            raise ToolError(f"{name}: {err}") from None
        return json.dumps(result, ensure_ascii=False)

    def run_safely(self, name: str, arguments: dict[str, Any] | str) -> str:
        """Like `run`, but a failure becomes an {"error": ...} result the model can talk about."""
        try:
            return self.run(name, arguments)
        except ToolError as err:
            return json.dumps({"error": str(err)}, ensure_ascii=False)

    def now(self, timezone: str | None = None) -> datetime:
        now = self.clock()
        if timezone:
            try:
                now = now.astimezone(ZoneInfo(timezone))
            except (ZoneInfoNotFoundError, ValueError):
                raise ValueError(f"unknown timezone {timezone!r}") from None
        return now

    def running_timers(self) -> dict[int, Timer]:
        """The timers, once those that have ended are dropped: a finished timer has nothing left to list or
        cancel."""
        now = self.now()
        self.timers = {i: t for i, t in self.timers.items() if t.ends_at > now}
        return self.timers


def spoken_time(moment: datetime) -> str:
    """'two oh five pm', 'noon', 'seven pm' — how a person reads a clock aloud."""
    hour, minute = moment.hour, moment.minute
    if minute == 0 and hour in (0, 12):
        return "midnight" if hour == 0 else "noon"
    suffix = "am" if hour < 12 else "pm"
    head = int_to_words(hour % 12 or 12)
    if minute == 0:
        return f"{head} {suffix}"
    tail = f"oh {int_to_words(minute)}" if minute < 10 else int_to_words(minute)
    return f"{head} {tail} {suffix}"


def spoken_duration(seconds: float) -> str:
    parts = []
    seconds = int(round(seconds))
    for size, name in ((3600, "hour"), (60, "minute"), (1, "second")):
        count, seconds = divmod(seconds, size)
        if count:
            parts.append(f"{int_to_words(count)} {name}{'s' if count != 1 else ''}")
    return " and ".join(parts) if parts else "zero seconds"


def _get_time(session: ToolSession, args: dict[str, Any]) -> dict[str, Any]:
    now = session.now(args.get("timezone"))
    return {"time": now.strftime("%H:%M"), "spoken": spoken_time(now)}


def _get_date(session: ToolSession, args: dict[str, Any]) -> dict[str, Any]:
    now = session.now(args.get("timezone"))
    weekday = now.strftime("%A").lower()
    return {"date": now.strftime("%Y-%m-%d"), "weekday": weekday,
            "spoken": f"{weekday} {MONTHS[now.month - 1]} {ordinal_words(now.day)}"}


def _calculator(session: ToolSession, args: dict[str, Any]) -> dict[str, Any]:
    value = format_number(evaluate(args["expression"]))
    return {"result": value, "spoken": number_to_words(value)}


def _convert_units(session: ToolSession, args: dict[str, Any]) -> dict[str, Any]:
    value = format_number(convert(args["value"], args["from_unit"], args["to_unit"]), 2)
    return {"result": value, "spoken": f"{number_to_words(value)} {unit_name(args['to_unit'], value)}"}


def _set_timer(session: ToolSession, args: dict[str, Any]) -> dict[str, Any]:
    seconds = args["amount"] * TIMER_UNITS[args["unit"]]
    session.running_timers()  # finished ones are dropped here too, so they do not pile up in a long session
    if not 1 <= seconds <= MAX_TIMER_SECONDS:
        raise ValueError("a timer must last between one second and twenty-four hours")
    timer = Timer(session.next_timer_id, seconds, args.get("label", ""),
                  session.now() + timedelta(seconds=seconds))
    session.timers[timer.id] = timer
    session.next_timer_id += 1
    return {"id": timer.id, "spoken": spoken_duration(seconds)}


def _cancel_timer(session: ToolSession, args: dict[str, Any]) -> dict[str, Any]:
    timers = session.running_timers()
    if not timers:
        raise ValueError("there are no timers running")
    timer_id = args.get("id", max(timers))
    timer = timers.pop(timer_id, None)
    if timer is None:
        raise ValueError(f"no timer with id {timer_id}")
    return {"cancelled": timer_id, "spoken": f"the timer for {spoken_duration(timer.seconds)}"}


def _list_timers(session: ToolSession, args: dict[str, Any]) -> dict[str, Any]:
    now = session.now()  # before the running ones are found: each has time left, "one second", never "zero"
    timers = [{"id": t.id, "label": t.label, "remaining_seconds": math.ceil((t.ends_at - now).total_seconds())}
              for t in session.running_timers().values()]
    if not timers:
        return {"timers": [], "spoken": "no timers"}
    said = ", ".join(f"{(t['label'] + ' ') if t['label'] else ''}{spoken_duration(t['remaining_seconds'])} left"
                     for t in timers)
    return {"timers": timers, "spoken": said}


def _country_capital(session: ToolSession, args: dict[str, Any]) -> dict[str, Any]:
    country = args["country"].strip().lower().removeprefix("the ")
    capital = session.capitals.get(country)
    if capital is None:
        raise ValueError(f"no capital known for {args['country']!r}")
    return {"country": country, "capital": capital}


MAX_SPELLED_CHARACTERS = 40


def _spell_word(session: ToolSession, args: dict[str, Any]) -> dict[str, Any]:
    """The letters to read out, so the model copies them instead of recalling how a word it may never have
    seen is spelled (a word's letters are not in its tokens; copying is a skill it has)."""
    words = args["word"].lower().split()
    if not words or len(args["word"]) > MAX_SPELLED_CHARACTERS:
        raise ValueError(f"spell one word or name of 1 to {MAX_SPELLED_CHARACTERS} characters")
    return {"word": " ".join(words), "spoken": " / ".join(", ".join(word) for word in words)}


_TIMEZONE = {"type": "string", "description": "IANA timezone such as Europe/Paris; default local time"}
_TOOL_LIST = [
    Tool("get_time", "The current time of day.",
         {"type": "object", "properties": {"timezone": _TIMEZONE}, "additionalProperties": False}, _get_time),
    Tool("get_date", "Today's date and weekday.",
         {"type": "object", "properties": {"timezone": _TIMEZONE}, "additionalProperties": False}, _get_date),
    Tool("calculator", "Evaluate an arithmetic expression with + - * / % ** and sqrt().",
         {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"],
          "additionalProperties": False}, _calculator, {"expression": "expression"}),
    Tool("convert_units", "Convert a value between units of length, mass, volume, temperature or speed.",
         {"type": "object",
          "properties": {"value": {"type": "number"}, "from_unit": {"enum": list(UNITS)},
                         "to_unit": {"enum": list(UNITS)}},
          "required": ["value", "from_unit", "to_unit"], "additionalProperties": False}, _convert_units,
         {"value": "number", "from_unit": "quantity unit", "to_unit": "target unit"}),
    Tool("set_timer", "Start a countdown timer.",
         {"type": "object",
          "properties": {"amount": {"type": "number"}, "unit": {"enum": list(TIMER_UNITS)},
                         "label": {"type": "string"}},
          "required": ["amount", "unit"], "additionalProperties": False}, _set_timer,
         {"amount": "number", "unit": "time unit", "label": "label"}, changes_state=True),
    Tool("cancel_timer", "Cancel a timer by id, or the latest one.",
         {"type": "object", "properties": {"id": {"type": "integer"}}, "additionalProperties": False},
         _cancel_timer, changes_state=True),
    Tool("list_timers", "The running timers and the time left on each.",
         {"type": "object", "properties": {}, "additionalProperties": False}, _list_timers),
    Tool("country_capital", "The capital city of a country.",
         {"type": "object", "properties": {"country": {"type": "string"}}, "required": ["country"],
          "additionalProperties": False}, _country_capital, {"country": "name"}),
    Tool("spell_word", "The letters of a word or name, to read them out.",
         {"type": "object", "properties": {"word": {"type": "string"}}, "required": ["word"],
          "additionalProperties": False}, _spell_word, {"word": "word"}),
]
TOOLS: dict[str, Tool] = {tool.name: tool for tool in _TOOL_LIST}
ASKING_WORDS = asking_words(_TOOL_LIST)
_COMPILED = {tool.name: CompiledSchema(tool.parameters) for tool in _TOOL_LIST}


def tool_specs() -> list[dict[str, Any]]:
    return [tool.spec() for tool in _TOOL_LIST]


def tool_call_schema(names: list[str] | None = None) -> dict[str, Any]:
    """The schema of one whole call, {"name": ..., "arguments": {...}}, for constrained decoding."""
    return call_schema({t.name: t.parameters for t in (TOOLS[n] for n in (names or list(TOOLS)))})


def call_schema(parameters: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """A call of any one of the named tools, each with the given schema of its arguments."""
    return {"anyOf": [
        {"type": "object",
         "properties": {"name": {"const": name}, "arguments": schema},
         "required": ["name", "arguments"], "additionalProperties": False}
        for name, schema in parameters.items()
    ]}


def run_tool(name: str, arguments: dict[str, Any] | str, session: ToolSession | None = None) -> str:
    """Run one tool call in `session` (a fresh one when omitted); see `ToolSession.run`."""
    return (session or ToolSession()).run(name, arguments)
