"""Tool arguments grounded in what the caller said: a call may only carry a name or number that was heard.

The demo model copies a heard value into a call imperfectly: "slovakia" comes out as "fovakia", "sixteen
minutes" as 19 (`python -m dlm.eval --failures F` lists them). Parameters that carry something the caller
says (a country, a word to spell, a timer's label, amount and unit, a conversion's value and units) are marked
`heard` in the registry, each with its kind; for one turn, `grounded_call_schema` narrows each of them to an
enum of what the caller's words offer (`heard_offers`): names, words, the numbers they say in digits or in
words, the units they name. `settle_call` keeps a draft that fits, mends one that can be mended without the
model (the one name or number said, a misspelling's nearest phrase, the label said before "timer"), and
otherwise sends it back to be decoded again under that schema, the same constrained decoding as any other
(`dlm.api.span_generation`). Expressions (the calculator's) stay free: a caller may say any arithmetic, and
no enum of heard numbers covers it; they get the caller's numbers and operator instead (`heard_expression`).
A tool that takes units is left out of a turn whose words name none, nor the tool (a conversion, a timer).
"""

from __future__ import annotations

import json
import re
from difflib import SequenceMatcher
from typing import Any

from dlm.constrained.schema import CompiledSchema, check
from dlm.tools.calculator import readable
from dlm.tools.numbers import join_digit_groups
from dlm.tools.registry import TIMER_UNITS, TOOLS, call_schema
from dlm.tools.units import spoken_units

MAX_PHRASE_WORDS = 3
_NAMED = ("name", "word", "label")  # the heard kinds whose values are words the caller said
_UNIT_KINDS = frozenset(["quantity unit", "target unit", "time unit"])
_TIME_UNIT_NAMES = {name: unit for unit in TIMER_UNITS for name in (unit, unit[:-1])}  # "minute" -> "minutes"
FILLERS = frozenset(["um", "uh", "er", "ah", "hmm"])  # what a speaker says while finding the next word
# Words no name begins or ends with: articles, pronouns, auxiliaries, prepositions, conjunctions, question words,
# the verbs and adverbs of a request ("tell me", "same for ... right now") and the fillers and courtesies of
# speech. "tell me malaysia's capital" offers "malaysia" as a country, not "tell" or "me malaysia"; "new
# zealand" and "bosnia and herzegovina" stay whole. One may still be the word to spell ("how do you spell which").
FUNCTION_WORDS = frozenset([
    "a", "an", "the", "this", "that", "these", "those", "some", "any", "i", "me", "my", "you", "your", "he", "him",
    "his", "she", "her", "it", "its", "we", "us", "our", "they", "them", "their", "is", "are", "was", "were", "be",
    "been", "am", "do", "does", "did", "have", "has", "had", "can", "could", "would", "will", "shall", "should",
    "may", "might", "must", "of", "to", "in", "on", "at", "by", "for", "from", "with", "about", "as", "into",
    "onto", "over", "under", "after", "before", "than", "then", "and", "or", "but", "so", "if", "what", "which",
    "who", "whom", "whose", "when", "where", "why", "how", "oh", "hey", "hi", "hello", "well", "okay", "ok", "yeah",
    "yes", "no", "please", "thanks", "thank", "just", "now", "again", "also", "too", "very", "really", "ya", "yep",
    "nope", "alright", "there", "here", "today", "right", "same", "tell", "say", "give", "show", "let", "know",
    "happen", "want", "need", "like", "get", "go", "quick", "question", "excuse", "listen", "sorry", "real",
    "another", "other", "one"
]) | FILLERS
# How alike (difflib's ratio) a required name and a heard phrase must be for the phrase to replace it without
# decoding again: "denkk" -> "denmark" 0.67, "naruseria" -> "bulgaria" 0.47; "unitiagoia" is nearer to
# "capital" (0.35) than to "bulgaria" (0.33) and is decoded again (python -m dlm.eval --failures, README).
SNAP_RATIO = 0.4
_UNITS = {w: i for i, w in enumerate(["zero", "one", "two", "three", "four", "five", "six", "seven", "eight",
                                      "nine"])}
_TEENS = {w: i + 10 for i, w in enumerate(["ten", "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen",
                                           "seventeen", "eighteen", "nineteen"])}
_TENS = {w: 10 * (i + 2) for i, w in enumerate(["twenty", "thirty", "forty", "fifty", "sixty", "seventy",
                                                 "eighty", "ninety"])}
_SCALES = {"thousand": 1000, "million": 10**6, "billion": 10**9}
_SIGNS = {"minus", "negative"}
_NUMBER_WORDS = frozenset([*_UNITS, *_TEENS, *_TENS, *_SCALES, "hundred", "point", *_SIGNS])
_TOKEN = re.compile(r"-?\d+(?:\.\d+)?|[a-z]+")
_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")  # a word of a transcript, as names are made of them
_LITERAL = re.compile(r"\d+(?:\.\d+)?")  # a number in an expression (its sign is an operator)
_PAIR = re.compile(r"\s*(?P<a>\d+(?:\.\d+)?)\s*(?P<op>\*\*|[-+*/%])?\s*(?P<b>\d+(?:\.\d+)?)\s*")
# the words that say one operator and nothing else ("and" and "by" say several); "times itself" says two, so
# an expression for it is left as the model wrote it
_SPOKEN_OPERATORS = {"plus": "+", "add": "+", "together": "+", "sum": "+", "minus": "-", "subtract": "-",
                     "less": "-", "times": "*", "multiplied": "*", "x": "*", "divided": "/", "over": "/",
                     "squared": "**", "power": "**", "itself": "**", "cubed": "**"}
# Numbers a caller says without a number word: "32 squared" is "32 ** 2", "half of 30" is "30 / 2". Left out, an
# earlier tool result took the 2's place ("35 ** 7.87" for "how much is 35 squared" after a conversion)
_IMPLIED_NUMBERS = re.compile(r"\b(?:(?P<two>squared|square(?! root)|itself|second power|half|double|twice)"
                              r"|(?P<three>cubed|third power|triple))\b")


class _SpokenNumber:
    """One number being read off a run of words: 'two hundred and five', 'minus fourteen', 'three point five'."""

    def __init__(self, sign: int, first: str) -> None:
        """Starts at `first`, a word below a hundred."""
        self.sign, self.total, self.decimals = sign, 0, None
        if first in _UNITS:
            self.part, self.last = _UNITS[first], "unit"
        elif first in _TEENS:
            self.part, self.last = _TEENS[first], "teen"
        else:
            self.part, self.last = _TENS[first], "tens"

    def takes(self, word: str) -> bool:
        """Whether `word` continues this number (and if so, take it)."""
        if self.decimals is not None:
            if word in _UNITS:
                self.decimals += str(_UNITS[word])
                return True
            return False
        follows_big = self.last in ("hundred", "scale")
        if word in _UNITS and (self.last == "tens" or follows_big):
            self.part, self.last = self.part + _UNITS[word], "unit"
        elif word in _TEENS and follows_big:
            self.part, self.last = self.part + _TEENS[word], "teen"
        elif word in _TENS and follows_big:
            self.part, self.last = self.part + _TENS[word], "tens"
        elif word == "hundred" and self.last in ("unit", "teen", "tens") and self.part < 100:
            self.part, self.last = self.part * 100, "hundred"
        elif word in _SCALES and self.last in ("unit", "teen", "tens", "hundred"):
            self.total, self.part, self.last = self.total + self.part * _SCALES[word], 0, "scale"
        elif word == "point" and self.last in ("unit", "teen", "tens"):
            self.decimals = ""
        else:
            return False
        return True

    def value(self) -> int | float:
        whole = self.total + self.part
        if self.decimals:
            return self.sign * float(f"{whole}.{self.decimals}")
        return self.sign * whole


def _tokens(text: str) -> list[str]:
    """The numbers and words of a transcript, lower-cased; one written with digit groups is one ("1,500")."""
    return _TOKEN.findall(join_digit_groups(text.lower()))


def heard_numbers(text: str) -> list[int | float]:
    """The numbers in a transcript, each once, in order, whether written in digits ('-14', '2.5') or words
    ('twenty-six'). One said after 'minus' is offered both ways: 'fifty-one minus 22' is arithmetic, 'minus 22
    degrees' is not."""
    return list(dict.fromkeys(_numbers_as_said(text)))


def _numbers_as_said(text: str) -> list[int | float]:
    """:func:`heard_numbers` with a number said twice kept twice ("12 times 12" says two numbers)."""
    found: list[int | float] = []
    current: _SpokenNumber | None = None
    sign = 1

    def add(value: int | float, signed: bool) -> None:
        found.extend((value, -value) if signed else (value,))

    for token in _tokens(text):
        if current is not None and (token == "and" and current.last in ("hundred", "scale") or current.takes(token)):
            continue
        if current is not None:
            add(current.value(), current.sign < 0)
            current = None
        if token[0].isdigit() or token[0] == "-":
            add(sign * (float(token) if "." in token else int(token)), sign < 0)
        elif token in _UNITS or token in _TEENS or token in _TENS:
            current = _SpokenNumber(sign, token)
        sign = -1 if token in _SIGNS else 1
    if current is not None:
        add(current.value(), current.sign < 0)
    return found


def heard_phrases(text: str, max_words: int = MAX_PHRASE_WORDS) -> list[str]:
    """Every run of up to `max_words` consecutive words of a transcript: the names a call may carry (a
    possessive's 's left off: "denmark's capital" offers "denmark")."""
    words = _WORD.findall(re.sub(r"'s\b", "", text.lower()))
    return list(dict.fromkeys(" ".join(words[i:i + n]) for n in range(1, max_words + 1)
                              for i in range(len(words) - n + 1)))


def heard_units(text: str) -> tuple[list[str], list[str]]:
    """The units a transcript names (their codes): those said right after a number, which a quantity is in
    ("115 degrees fahrenheit", "nine yards"), and the others, which it is asked in ("in metres"). Fillers are
    passed over: "17 kilometers per um hour" is "kmh", not "km"."""
    return _units_said(text, spoken_units())


def heard_time_units(text: str) -> tuple[list[str], list[str]]:
    """The timer units a transcript names, as :func:`heard_units` splits them: "five minutes" says how long a
    timer runs, while "a minute and a half" names its unit without the amount in it (90 seconds is right)."""
    return _units_said(text, _TIME_UNIT_NAMES)


def _units_said(text: str, names: dict[str, str]) -> tuple[list[str], list[str]]:
    """The units of ``names`` (what a caller says -> a unit) said in ``text``: right after a number, and not."""
    words = [w for w in _tokens(text) if w not in FILLERS]
    longest = max(len(name.split()) for name in names)
    after_number: list[str] = []
    others: list[str] = []
    i = 0
    while i < len(words):
        n = next((n for n in range(min(longest, len(words) - i), 0, -1) if " ".join(words[i:i + n]) in names), 0)
        if n:
            before = words[i - 1] if i else ""
            said_after_number = before[:1].isdigit() or before[:1] == "-" or before in _NUMBER_WORDS
            (after_number if said_after_number else others).append(names[" ".join(words[i:i + n])])
        i += n or 1
    return list(dict.fromkeys(after_number)), [u for u in dict.fromkeys(others) if u not in after_number]


def heard_offers(text: str) -> dict[str, list[Any]]:
    """What `text` offers each kind of heard parameter: as a "name" its phrases that neither begin nor end with
    a function word or a lone letter, as a "word" any one of its words, as a "number" the numbers said, as a
    "quantity unit" and a "target unit" the units it names (:func:`heard_units`), as a "time unit" the timer
    units it names right after a number (:func:`heard_time_units`)."""
    phrases = heard_phrases(text)
    names = [p for p in phrases if _may_bound_name(p.split()[0]) and _may_bound_name(p.split()[-1])]
    quantity_units, target_units = heard_units(text)
    return {"name": names, "word": [p for p in phrases if " " not in p], "number": heard_numbers(text),
            "quantity unit": quantity_units, "target unit": target_units, "time unit": heard_time_units(text)[0]}


def name_words(text: str) -> list[str]:
    """The words of a transcript a name it carries may begin with: neither function words nor numbers."""
    return _without([w for w in _WORD.findall(text.lower()) if _may_bound_name(w)], _NUMBER_WORDS)


def _may_bound_name(word: str) -> bool:
    """Whether a name may begin or end with ``word``: not a function word, nor a lone letter, which is what a
    transcript leaves of a contraction ("how s teacher spelled" offered "s teacher" to spell)."""
    return word not in FUNCTION_WORDS and len(word) > 1


def whole_phrase(phrases: list[str]) -> str | None:
    """The one phrase every other one is part of ("new zealand" of "new", "zealand"), if there is one."""
    longest = max(phrases, key=lambda p: len(p.split()), default=None)
    if longest is None or not all(f" {p} " in f" {longest} " for p in phrases):
        return None
    return longest


def said_before(text: str, noun: str, names: list[str]) -> str | None:
    """The longest of ``names`` said right before ``noun``: what the caller calls it ("tea" in "a tea timer")."""
    words = _WORD.findall(text.lower())
    for end in (i for i, word in enumerate(words) if word == noun):
        runs = (" ".join(words[start:end]) for start in range(max(0, end - MAX_PHRASE_WORDS), end))
        said = next((run for run in runs if run in names), None)
        if said:
            return said
    return None


def _without(phrases: list[str], not_names: frozenset[str]) -> list[str]:
    """The phrases with none of ``not_names`` in them, and no digits."""
    return [p for p in phrases if not_names.isdisjoint(re.split(r"[\s-]+", p)) and not any(c.isdigit() for c in p)]


def grounded_parameters(text: str) -> dict[str, dict[str, Any]]:
    """Each tool's parameter schema with its heard parameters narrowed to what `text` offers. When it offers
    nothing of its kind a required parameter is left as it is, so a call stays possible, and an optional one is
    taken out (a timer's label nobody said). Words that ask for the tool (`Tool.own_words`: "capital", "city",
    "timer", "minutes") are never offered as its values: "what is bulgaria's capital" offers "bulgaria" for the
    country, not "capital". Nor are digits, or number words where the tool takes a heard number too (a timer of
    "fifty seconds" is not labelled "fifty"). A "word" is a name if one was said, else any word. A tool that
    takes units (a conversion's, a timer's) is left out when `text` names no unit and not the tool's noun
    ("timer": "set a timer for ten" may leave its unit to the model): "then take off eight" had become a
    pounds-to-kilograms conversion, "how much is 9 times thirteen" a nine-second timer."""
    offers = heard_offers(text)  # once per turn, for every tool
    words = set(_tokens(text))
    names_a_unit = bool(offers["quantity unit"] or offers["target unit"] or words & _TIME_UNIT_NAMES.keys())
    narrowed = {}
    for tool in TOOLS.values():
        if _UNIT_KINDS & set(tool.heard.values()) and not names_a_unit and tool.noun not in words:
            continue
        properties = dict(tool.parameters.get("properties", {}))
        required = tool.parameters.get("required", ())
        # a tool that takes a heard number takes the words of one as that number, not as a name ("fifty")
        not_names = tool.own_words | (_NUMBER_WORDS if "number" in tool.heard.values() else frozenset())
        for name, kind in tool.heard.items():
            if kind == "expression":  # stays free: a caller may say any arithmetic
                continue
            offered = _without(offers["name"], not_names) if kind in _NAMED else offers[kind]
            if kind == "word" and not offered:
                offered = _without(offers["word"], not_names)
            if offered:
                properties[name] = {"enum": offered}
            elif name not in required:
                del properties[name]
        narrowed[tool.name] = {**tool.parameters, "properties": properties}
    return narrowed


def grounded_call_schema(heard_text: str, names: list[str] | None = None) -> dict[str, Any]:
    """The schema of one call of the assistant's tools whose heard parameters carry only what `heard_text`
    (the caller's last words) offers."""
    narrowed = grounded_parameters(heard_text)
    return call_schema({name: narrowed[name] for name in (names or list(TOOLS)) if name in narrowed})


def nearest_phrase(value: str, phrases: list[str]) -> str | None:
    """The heard phrase a misspelt name stands for: the most alike, if at least :data:`SNAP_RATIO` alike."""
    scored = [(SequenceMatcher(None, value, phrase).ratio(), phrase) for phrase in phrases]
    ratio, phrase = max(scored, default=(0.0, None))
    return phrase if ratio >= SNAP_RATIO else None


def said_numbers(text: str) -> list[int | float]:
    """The numbers of an arithmetic request in the order said, each as often as said ("12 times 12" says two),
    with those its words say without a number word among them ("4 squared times 3" says 4, 2, 3). Only here:
    "half an hour" is no timer of 2."""
    found: list[int | float] = []
    text, end = text.lower(), 0
    for match in _IMPLIED_NUMBERS.finditer(text):
        found += [*_numbers_as_said(text[end:match.start()]), 2 if match["two"] else 3]
        end = match.end()
    return found + _numbers_as_said(text[end:])


def heard_expression(expression: str, heard_text: str, results: str = "") -> str:
    """The expression with the caller's numbers and operator in it.

    The numbers said include those words such as "squared" or "half" say (:func:`said_numbers`). The numbers
    in it are matched to those said, each said number to one place: first where it holds as many and the
    same number stands in the same place ("92 - 92" for "ninety-one minus ninety-two" keeps its second 92),
    then wherever it stands, and then to the earlier results (`results`: the conversation's tool results, a
    follow-up's "it", which count only when the caller said at most one number, as a follow-up does). When as
    many places are left over as numbers are left unmatched, each place gets one of them in turn: "129 - 55"
    for "129 minus fifty-four" -> "129 - 54", "92 - 92" -> "91 - 92", "11 * 11" for "11 x one" -> "11 * 1",
    "30 / 7" for "half of 30" -> "30 / 2", "102 * 12" after 1024 for "times it by 12" -> "1024 * 12", and
    "2 * 2" after 1225 for "times it by 2" -> "1225 * 2" (a follow-up's number is matched from the right).
    Otherwise it stays: "5 / 100 * 80" for "5 percent of 80" (nobody says the 100), "12 * 12" for "12 times
    12". Then an expression of two numbers whose operator is not the one the caller said (`_SPOKEN_OPERATORS`,
    when they said exactly one) gets theirs: "51 ** 22" for "fifty-one minus 22" -> "51 - 22", "8 9" -> "8 *
    9"."""
    expression = join_digit_groups(expression)  # "2,500 / 5" holds the 2500 said, not a 2 and a 500
    said = [n for n in said_numbers(heard_text) if n >= 0]
    earlier = [n for n in heard_numbers(results) if n >= 0] if len(said) <= 1 else []  # a follow-up says one
    unmatched = [*said, *(n for n in earlier if n not in said)]
    literals = list(_LITERAL.finditer(expression))
    values = [float(m.group()) if "." in m.group() else int(m.group()) for m in literals]
    in_place = [i for i, v in enumerate(values) if v == said[i]] if len(values) == len(said) else []
    for i in in_place:
        unmatched.remove(values[i])
    left_over = []
    # a follow-up's "it" comes first ("times it by 2" -> "1225 * 2"): its said number is matched from the right
    for i in reversed(range(len(values))) if earlier else range(len(values)):
        if i in in_place:
            continue
        if values[i] in unmatched:
            unmatched.remove(values[i])
        else:
            left_over.append(i)
    left_over.sort()
    if left_over and len(left_over) == len(unmatched):
        replacements = dict(zip(left_over, unmatched, strict=True))
        pieces, end = [], 0
        for i, literal in enumerate(literals):
            pieces += [expression[end:literal.start()], str(replacements.get(i, literal.group()))]
            end = literal.end()
        expression = "".join(pieces) + expression[end:]
    operators = {_SPOKEN_OPERATORS[w] for w in _tokens(heard_text) if w in _SPOKEN_OPERATORS}
    pair = _PAIR.fullmatch(expression)
    if pair is None or len(operators) != 1 or pair["op"] in operators:
        return expression
    return f"{pair['a']} {operators.pop()} {pair['b']}"


def results_text(messages: list[dict[str, Any]]) -> str:
    """The tool results of a conversation, one per line: where a follow-up's "it" comes from."""
    return "\n".join(m["content"] for m in messages if m.get("role") == "tool" and isinstance(m.get("content"), str))


def settle_call(body: str, heard_text: str, results: str = "") -> tuple[str | None, dict[str, Any]]:
    """(the call to run, or None when it must be decoded again; the grounded schema to decode it under).

    - A call of a tool the grounded schema leaves out (:func:`grounded_parameters`) is decoded again.
    - An expression gets the caller's numbers and operator (:func:`heard_expression`; a follow-up's numbers
      come from ``results``, the conversation's tool results, :func:`results_text`). One that does not even
      parse ("sqrt(13rteen)") is decoded again.
    - A required name the caller did not say becomes the one they said, when everything they said that could
      be one is part of it ("phe" for "a capital of new zealand" -> "new zealand", :func:`whole_phrase`), or
      else the heard phrase it is a misspelling of (:func:`nearest_phrase`).
    - A required number or unit they did not say becomes the one they said, if they said one.
    That is what decoding again would have to find, without its cost or its risk of picking a neighbouring word.
    - An optional detail the caller did not say is dropped rather than decoded again: a timer labelled "tea"
      when no tea was mentioned is an unlabelled timer, and decoding again could only pick some other word.
    - A "label" the call leaves out is the name said right before the tool's noun ("a tea timer",
      :func:`said_before`)."""
    narrowed = grounded_parameters(heard_text)
    schema = call_schema(narrowed)
    try:
        call = json.loads(body)
    except json.JSONDecodeError:
        return None, schema
    tool = TOOLS.get(call.get("name")) if isinstance(call, dict) else None
    if tool is not None and tool.name not in narrowed:  # a tool the caller did not ask for: decode again
        return None, schema
    arguments = call.get("arguments") if tool is not None else None
    if tool is not None and isinstance(arguments, dict):
        required = set(tool.parameters.get("required", ()))
        allowed = narrowed[tool.name]["properties"]
        offers = {name: allowed[name].get("enum") for name in tool.heard if name in allowed}
        unheard = [name for name in tool.heard if name in arguments
                   and (name not in offers or offers[name] is not None and arguments[name] not in offers[name])]
        settled = {k: v for k, v in arguments.items() if k not in unheard or k in required}
        for name, offered in offers.items():
            value = settled.get(name)  # an unheard optional one is gone already
            if not offered or value is None:
                continue
            if tool.heard[name] not in _NAMED:  # a number or a unit: the one said, if one was
                if name in unheard and len(offered) == 1:
                    settled[name] = offered[0]
                continue
            if name in unheard and isinstance(value, str):
                settled[name] = whole_phrase(offered) or nearest_phrase(value, offered) or value
        for name, kind in tool.heard.items():
            if kind == "expression" and isinstance(arguments.get(name), str):
                settled[name] = heard_expression(arguments[name], heard_text, results)
                if not readable(settled[name]):  # "sqrt(13rteen)": no arithmetic at all
                    return None, schema
            elif kind == "label" and name not in settled and offers.get(name):
                label = said_before(heard_text, tool.noun, offers[name])
                if label:
                    settled[name] = label
        if settled != arguments:
            call = {**call, "arguments": settled}
            body = json.dumps(call)
    return (body if not check(call, CompiledSchema(schema)) else None), schema
