"""Tool arguments grounded in the caller's words: what a transcript offers, and the schema that allows only it."""

from __future__ import annotations

import json

import jsonschema
import pytest

from dlm.constrained import CompiledSchema, check
from dlm.tools import TOOLS, tool_call_schema
from dlm.tools.grounding import (
    grounded_call_schema,
    heard_expression,
    heard_numbers,
    heard_offers,
    heard_phrases,
    heard_units,
    name_words,
    nearest_phrase,
    results_text,
    settle_call,
    whole_phrase,
)


@pytest.mark.parametrize(("text", "numbers"), [
    ("um so how much is twenty-six gallons in litres", [26]),
    ("twenty six", [26]),
    ("what's -14 fahrenheit in celsius", [-14]),
    ("minus fourteen point five", [-14.5, 14.5]),
    ("one thousand two hundred and five", [1205]),
    ("repeat 455 884 friend", [455, 884]),
    ("six five", [6, 5]),  # two numbers said one after the other, not sixty-five
    ("fifty-one minus 22", [51, -22, 22]),  # 'minus' may be arithmetic or a sign: both offered
    ("set a timer for 2.5 hours", [2.5]),
    ("a hundred", []),  # no number word to start from: nothing offered, the parameter stays free
    ("what's the capital of france", []),
    ("Convert 1,500 meters to feet.", [1500]),  # digits grouped by commas are one number
    ("about 12,000,000 people, or 2,500.5", [12000000, 2500.5]),
    ("1, 2, 3", [1, 2, 3]),  # a comma and a space part numbers
    ("1,2 and 3,4567", [1, 2, 3, 4567]),  # so does one not followed by a group of three
])
def test_heard_numbers_in_digits_and_words(text: str, numbers: list[float]) -> None:
    assert heard_numbers(text) == numbers


def test_heard_phrases_are_word_runs_without_possessives() -> None:
    phrases = heard_phrases("tell me denmark's capital")
    assert {"denmark", "denmark capital", "tell me denmark"} <= set(phrases)
    assert not any("'s" in p for p in phrases)
    assert heard_phrases("the united states please", max_words=2) == [
        "the", "united", "states", "please", "the united", "united states", "states please"]
    assert "don't" in heard_phrases("i don't know")


def test_heard_parameters_are_parameters_of_their_tools() -> None:
    for tool in TOOLS.values():
        assert set(tool.heard) <= set(tool.parameters["properties"]), tool.name
        assert set(tool.heard.values()) <= {"name", "word", "label", "number", "expression", "quantity unit",
                                            "target unit", "time unit"}
    assert {name for name, tool in TOOLS.items() if tool.heard} == {
        "country_capital", "spell_word", "set_timer", "convert_units", "calculator"}


def call(name: str, **arguments: object) -> dict:
    return {"name": name, "arguments": arguments}


def test_a_grounded_call_carries_only_what_was_heard() -> None:
    schema = grounded_call_schema("put on a 50 second rice timer")
    compiled = CompiledSchema(schema)
    assert check(call("set_timer", amount=50, unit="seconds", label="rice"), compiled) == []
    assert check(call("set_timer", amount=50, unit="seconds"), compiled) == []  # a label stays optional
    assert check(call("set_timer", amount=5, unit="seconds"), compiled)  # 5 was not said
    assert check(call("set_timer", amount=50, unit="seconds", label="tea"), compiled)
    assert check(call("calculator", expression="50 * 3"), compiled) == []  # expressions stay free
    assert check(call("get_time"), compiled) == []
    jsonschema.Draft202012Validator.check_schema(schema)  # still a JSON schema any validator reads


def test_names_are_grounded_and_nothing_heard_leaves_a_parameter_free() -> None:
    compiled = CompiledSchema(grounded_call_schema("what is bulgaria's capital"))
    assert check(call("country_capital", country="bulgaria"), compiled) == []
    assert check(call("country_capital", country="cerosia"), compiled)
    assert check(call("spell_word", word="capital"), compiled) == []
    assert check(call("country_capital", country="capital"), compiled)  # the words that ask for the tool
    timer = CompiledSchema(grounded_call_schema("start a tea timer for three minutes"))
    assert check(call("set_timer", amount=3, unit="minutes", label="tea"), timer) == []
    assert check(call("set_timer", amount=3, unit="minutes", label="minutes"), timer)
    assert check(call("set_timer", amount=3, unit="minutes", label="three"), timer)  # the amount's words
    free = grounded_call_schema("set a timer for a minute")  # no number said: the amount keeps its own schema
    timer = next(b for b in free["anyOf"] if b["properties"]["name"] == {"const": "set_timer"})
    assert timer["properties"]["arguments"]["properties"]["amount"] == {"type": "number"}
    unlabelled = grounded_call_schema("a timer for 5 minutes", ["set_timer"])["anyOf"][0]["properties"]["arguments"]
    assert unlabelled["properties"] == {"amount": {"enum": [5]}, "unit": {"enum": ["minutes"]}}  # no label said
    assert tool_call_schema(["set_timer"])["anyOf"][0]["properties"]["arguments"]["properties"]["label"]


def test_a_call_is_kept_trimmed_or_sent_back_to_be_decoded_again() -> None:
    heard = "how do you spell rhythm"
    right = json.dumps(call("spell_word", word="rhythm"))
    assert settle_call(right, heard) == (right, grounded_call_schema(heard))
    misspelt = settle_call(json.dumps(call("spell_word", word="rythm")), heard)[0]  # a required name like a heard one
    assert misspelt is not None and json.loads(misspelt) == call("spell_word", word="rhythm")
    assert settle_call(json.dumps(call("spell_word", word="qqqqq")), heard)[0] == right  # the one name said
    two = "how do you spell rhythm and how do you spell rhyme"
    assert settle_call(json.dumps(call("spell_word", word="qqqqq")), two)[0] is None  # like neither: decode again
    assert settle_call(right[:-1], heard)[0] is None  # not JSON
    label = "let me know in 16 minutes thank you"  # no label said: an invented one is dropped, not decoded again
    kept, _ = settle_call(json.dumps(call("set_timer", amount=16, unit="minutes", label="tea")), label)
    assert json.loads(kept) == call("set_timer", amount=16, unit="minutes")
    wrong_amount = json.dumps(call("set_timer", amount=19, unit="minutes", label="tea"))  # the one number said
    assert json.loads(settle_call(wrong_amount, label)[0]) == call("set_timer", amount=16, unit="minutes")
    assert settle_call(wrong_amount, "in 16 or 17 minutes")[0] is None  # which of two: decode again
    assert settle_call(json.dumps(call("no_such_tool")), label)[0] is None


def test_names_neither_begin_nor_end_with_a_function_word() -> None:
    offers = heard_offers("um what is new zealand's capital")
    assert "new zealand" in offers["name"] and "new zealand capital" in offers["name"]
    assert not {"um", "what", "is new zealand", "new zealand's"} & set(offers["name"])
    assert {"what", "is", "new", "zealand"} <= set(offers["word"])  # any one word may be spelt ("spell which")
    assert "new zealand" not in offers["word"]
    compiled = CompiledSchema(grounded_call_schema("hey could you spell which"))
    assert check(call("spell_word", word="which"), compiled) == []
    assert check(call("spell_word", word="spell"), compiled)  # the tool's own name
    assert check(call("country_capital", country="which"), compiled)
    assert check(call("set_timer", amount=5, unit="minutes", label="can"), CompiledSchema(grounded_call_schema(
        "remind me in 5 minutes if you can")))


def test_name_words_are_the_words_a_name_may_begin_with() -> None:
    assert name_words("um tell me New Zealand's capital in twenty-two words or 20") == [
        "new", "zealand's", "capital", "words"]


def test_a_name_is_the_whole_one_the_caller_said() -> None:
    heard = "do you happen to know a capital of new zealand"
    for said in ("phe", "new zealand"):
        settled = settle_call(json.dumps(call("country_capital", country=said)), heard)[0]
        assert json.loads(settled) == call("country_capital", country="new zealand"), said
    # said, so kept: a misheard word beside a name ("tel me china", "cuba capitol") would make it longer
    new = json.dumps(call("country_capital", country="new"))
    assert settle_call(new, heard)[0] == new
    spelled = settle_call(json.dumps(call("spell_word", word="faminly")), "okay how is family spelled")[0]
    assert json.loads(spelled) == call("spell_word", word="family")  # "spelled" asks for the tool
    assert whole_phrase(["new", "zealand", "new zealand"]) == "new zealand"
    assert whole_phrase(["bulgaria", "romania"]) is None
    label = "remind me in nineteen minutes if you can"  # an invented optional detail is dropped, not replaced
    kept = settle_call(json.dumps(call("set_timer", amount=19, unit="minutes", label="breteen")), label)[0]
    assert json.loads(kept) == call("set_timer", amount=19, unit="minutes")


@pytest.mark.parametrize(("heard", "units"), [
    ("give me 115 degrees fahrenheit in degrees celsius", (["f"], ["c"])),
    ("how many feet are in 3 meters", (["m"], ["ft"])),  # the quantity's unit is the one after its number
    ("what's minus fourteen fahrenheit in centigrade", (["f"], ["c"])),
    ("convert 60 mph to kilometers per hour", (["mph"], ["kmh"])),
    ("how many kilos is a pound", ([], ["kg", "lb"])),  # no number said: neither is the quantity's
    ("convert 17 kilometers per um hour into mph", (["kmh"], ["mph"])),  # a filler inside a unit's name
])
def test_units_are_heard_as_the_quantity_s_and_the_asked_for(heard: str, units: tuple) -> None:
    assert heard_units(heard) == units


def test_a_conversion_carries_the_units_the_caller_named() -> None:
    heard = "tell me nine yards in metres please"
    want = call("convert_units", value=9, from_unit="yd", to_unit="m")
    for wrong in (call("convert_units", value=9, from_unit="lb", to_unit="kg"),
                  call("convert_units", value=9, from_unit="m", to_unit="yd")):  # unheard, swapped
        assert json.loads(settle_call(json.dumps(wrong), heard)[0]) == want
    unsure = json.dumps(call("convert_units", value=1, from_unit="lb", to_unit="g"))
    assert settle_call(unsure, "how many kilos is a pound")[0] is None  # which is which: decoded again


@pytest.mark.parametrize(("heard", "label"), [
    ("put on a 5 minute oven timer", "oven"),  # "minute" asks for the tool: it is no label
    ("set a coffee break timer for 5 minutes", "coffee break"),
    ("set a timer for 5 minutes", None),
    ("set another timer for 5 minutes", None),
])
def test_a_timer_left_unlabelled_gets_the_name_said_before_timer(heard: str, label: str | None) -> None:
    bare = {"amount": 5, "unit": "minutes"}
    settled = json.loads(settle_call(json.dumps(call("set_timer", **bare)), heard)[0])
    assert settled == call("set_timer", **bare, **({"label": label} if label else {}))
    assert TOOLS["set_timer"].noun == "timer"


def test_a_follow_up_s_expression_takes_its_numbers_from_the_caller_and_earlier_results() -> None:
    earlier = [{"role": "user", "content": "what's 32 squared"},
               {"role": "tool", "content": json.dumps({"result": 1024, "spoken": "one thousand twenty-four"})}]
    results = results_text(earlier)
    assert heard_expression("1024+ 88", "and then plus 8", results) == "1024+ 8"
    assert heard_expression("102 * 12", "times it by 12", results) == "1024 * 12"
    assert heard_expression("1024 * 12", "times it by 12", results) == "1024 * 12"  # all known: kept
    assert heard_expression("2 * 2", "times it by 2 now", results) == "1024 * 2"  # "it" first
    assert heard_expression("2 * 2", "what's 2 times 2", results) == "2 * 2"  # two numbers said: no "it"
    assert heard_expression("102 * 12", "times it by 12") == "102 * 12"  # no earlier result to take
    settled = settle_call(json.dumps(call("calculator", expression="102 * 12")), "times it by 12", results)[0]
    assert json.loads(settled) == call("calculator", expression="1024 * 12")


def test_an_earlier_result_fills_in_only_for_a_follow_up() -> None:
    """A follow-up says the one number it brings; a new question's unsaid numbers are its own."""
    results = results_text([{"role": "tool", "content": json.dumps({"result": 7.87, "spoken": "seven point eight seven"})}])
    assert heard_expression("35 ** 7.87", "how much is 35 squared thanks", results) == "35 ** 2"  # "squared" says 2
    assert heard_expression("30 / 7", "half of 30", results) == "30 / 2"
    assert heard_expression("5 / 100 * 80", "what's 5 percent of 80", results) == "5 / 100 * 80"
    assert heard_expression("7.8 - 3", "then take off three", results) == "7.87 - 3"


def test_a_conversion_or_a_timer_needs_a_unit_the_caller_named() -> None:
    heard = "um so then take off eight"
    assert "convert_units" not in json.dumps(grounded_call_schema(heard))
    assert "set_timer" not in json.dumps(grounded_call_schema("how much is 9 times thirteen"))
    assert "set_timer" in json.dumps(grounded_call_schema("set a timer for ten"))  # the tool itself named
    timer = settle_call(json.dumps(call("set_timer", amount=5, unit="seconds")), "remind me in five minutes")[0]
    assert json.loads(timer) == call("set_timer", amount=5, unit="minutes")  # the one unit said
    half = json.dumps(call("set_timer", amount=90, unit="seconds"))
    assert settle_call(half, "set a timer for a minute and a half")[0] == half  # a unit said with no number: kept
    assert grounded_call_schema(heard, ["convert_units", "calculator"]) == grounded_call_schema(heard, ["calculator"])
    wrong_tool = json.dumps(call("convert_units", value=8, from_unit="lb", to_unit="kg"))
    assert settle_call(wrong_tool, heard) == (None, grounded_call_schema(heard))  # decoded again without it
    assert "convert_units" in json.dumps(grounded_call_schema("and in pounds"))  # a follow-up names its unit


def test_a_number_said_with_digit_groups_grounds_the_call_that_carries_it() -> None:
    conversion = json.dumps(call("convert_units", value=1500, from_unit="m", to_unit="ft"))
    assert settle_call(conversion, "Convert 1,500 meters to feet.")[0] == conversion
    timer = json.dumps(call("set_timer", amount=1200, unit="seconds"))
    assert settle_call(timer, "Set a timer for 1,200 seconds.")[0] == timer
    assert heard_units("Convert 1,500 meters to feet.") == (["m"], ["ft"])
    assert heard_expression("2,500 / 50", "What is 2,500 divided by 5?") == "2500 / 5"


def test_a_lone_letter_is_no_name() -> None:
    """A transcript's "how s" is "how's": its "s" neither begins nor ends a name."""
    heard = "how s teacher spelled please"
    assert "s teacher" not in heard_offers(heard)["name"] and "s" not in name_words(heard)
    settled = settle_call(json.dumps(call("spell_word", word="teach")), heard)[0]
    assert json.loads(settled) == call("spell_word", word="teacher")


def test_an_expression_that_does_not_parse_is_decoded_again() -> None:
    heard = "tell me the square root of thirteen"
    assert settle_call(json.dumps(call("calculator", expression="sqrt(1rteen)")), heard)[0] is None
    kept = json.dumps(call("calculator", expression="10 / 0"))  # parses: the calculator says why not
    assert settle_call(kept, "ten divided by zero")[0] == kept


def test_a_misspelt_name_snaps_to_the_heard_phrase_it_is_most_like() -> None:
    assert nearest_phrase("denkk", heard_phrases("tell me denmark's capital")) == "denmark"
    assert nearest_phrase("naruseria", heard_phrases("do you know a capital of bulgaria")) == "bulgaria"
    assert nearest_phrase("unitiagoia", heard_phrases("what is bulgaria's capital")) is None  # too unlike either
    assert nearest_phrase("denmark", []) is None
    assert nearest_phrase("brivakia", heard_offers("um what is slovakia's capital")["name"]) == "slovakia"


@pytest.mark.parametrize(("expression", "heard", "grounded"), [
    ("129 - 55", "what does 129 um minus fifty-four make now", "129 - 54"),  # a number misheard, in place
    ("22 * 5", "how much is uh twenty-eight times 5", "28 * 5"),
    ("sqrt(20)", "what's the square root of 19", "sqrt(19)"),
    ("2.4 + 1", "two point five plus one", "2.5 + 1"),
    ("51 - 22", "fifty-one minus 22", "51 - 22"),  # all heard: kept
    ("399 * 9", "times it by nine", "399 * 9"),  # a follow-up's earlier result: not the caller's to say
    ("32 ** 2", "how much is 32 squared", "32 ** 2"),  # a number nobody says
    ("51 ** 22", "tell me fifty-one minus 22", "51 - 22"),  # the operator the caller said
    ("8   9", "what's eight multiplied by 9", "8 * 9"),
    ("95 / 160", "what's ninety-six and 160 together", "96 + 160"),  # both at once
    ("-5 + 3", "minus 5 plus 3", "-5 + 3"),  # two operators said: left alone
    ("32 ** 2", "32 times itself", "32 ** 2"),  # "times itself" is squaring
    ("11 * 11", "11 x one uh", "11 * 1"),  # the numbers said, though each of its own was said too
    ("7 * 6", "what's six times 7", "7 * 6"),  # the same numbers in another order: kept
    ("92 - 92", "ninety-one minus ninety-two", "91 - 92"),  # the one in its place is kept
    ("4 * 3", "what is 4 cubed", "4 ** 3"),
    ("4 ** 2 * 4", "what is 4 squared times 3", "4 ** 2 * 3"),  # "squared" says its 2 where it is said
])
def test_an_expression_carries_the_numbers_and_operator_the_caller_said(expression: str, heard: str, grounded: str) -> None:
    assert heard_expression(expression, heard) == grounded
    settled, _ = settle_call(json.dumps(call("calculator", expression=expression)), heard)
    assert settled is not None and json.loads(settled) == call("calculator", expression=grounded)
