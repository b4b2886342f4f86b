"""JSON-schema constrained decoding: every prefix of a valid instance is accepted, everything the automaton
lets through to completion validates (checked with `jsonschema`), over many random schemas."""

from __future__ import annotations

import json
import random
import string
from typing import Any

import jsonschema
import pytest

from dlm.constrained import (
    CompiledSchema,
    JsonPrefixAutomaton,
    JsonSchemaConstraint,
    SchemaError,
    check,
    check_schema,
)
from dlm.constrained.completion import UNREACHABLE, CompletionCost
from dlm.tools import tool_call_schema

KEYS = ["a", "name", "value", "unit", "x_y", "é"]
WORDS = ["", "a", "ab", 'q"uote', "back\\slash", "new\nline", "ünï", "12"]
CHARSET = list('{}[]",:-.0123456789 eE+\\\n_' + string.ascii_lowercase) + ["é"]


def random_schema(rng: random.Random, depth: int = 0) -> dict[str, Any]:
    kinds = ["string", "number", "integer", "boolean", "null", "enum", "anyOf", "any"]
    if depth < 2:
        kinds += ["object", "object", "array"]
    kind = rng.choice(kinds)
    if kind == "enum":
        return {"enum": rng.sample(["x", "y", 1, 10, 2.5, True, None, "x y"], rng.randint(1, 4))}
    if kind == "anyOf":
        return {"anyOf": [random_schema(rng, depth + 1) for _ in range(rng.randint(1, 3))]}
    if kind == "any":
        return {}
    if kind == "object":
        keys = rng.sample(KEYS, rng.randint(0, 3))
        schema: dict[str, Any] = {"type": "object", "properties": {k: random_schema(rng, depth + 1) for k in keys},
                                  "required": [k for k in keys if rng.random() < 0.6]}
        if rng.random() < 0.7:
            schema["additionalProperties"] = False
        return schema
    if kind == "array":
        schema = {"type": "array", "items": random_schema(rng, depth + 1)}
        if rng.random() < 0.5:
            schema["minItems"] = rng.randint(0, 2)
            schema["maxItems"] = schema["minItems"] + rng.randint(0, 2)
        return schema
    if kind == "string" and rng.random() < 0.3:
        return {"type": "string", "minLength": 1, "maxLength": 3}
    return {"type": kind}


def random_instance(rng: random.Random, schema: dict[str, Any]) -> Any:
    if "enum" in schema:
        return rng.choice(schema["enum"])
    if "anyOf" in schema:
        return random_instance(rng, rng.choice(schema["anyOf"]))
    kind = schema.get("type")
    if kind is None:
        return rng.choice([1, "s", None, [1, {"k": False}], {"z": -0.5}])
    if kind == "string":
        if "maxLength" in schema:
            return "".join(rng.choice("abé\"") for _ in range(rng.randint(1, 3)))
        return rng.choice(WORDS)
    if kind == "number":
        return rng.choice([0, -3, 2.5, 1e-7, 123456789, -0.25])
    if kind == "integer":
        return rng.choice([0, 7, -42, 1000])
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "null":
        return None
    if kind == "array":
        n = rng.randint(schema.get("minItems", 0), schema.get("maxItems", 3))
        return [random_instance(rng, schema["items"]) for _ in range(n)]
    props = schema["properties"]
    keys = [k for k in props if k in schema["required"] or rng.random() < 0.5]
    rng.shuffle(keys)
    return {k: random_instance(rng, props[k]) for k in keys}


def dumps_variants(value: Any) -> list[str]:
    """Spellings the automaton must accept (literals and closed-object keys only in their canonical form)."""
    return [json.dumps(value, ensure_ascii=False), json.dumps(value, separators=(",", ":"), ensure_ascii=False)]


def random_walk(rng: random.Random, automaton: JsonPrefixAutomaton, limit: int = 120) -> str | None:
    """Type random characters the automaton allows; return the text once it is complete."""
    state, text = automaton.initial(), ""
    for _ in range(limit):
        options = [c for c in CHARSET if automaton.step(state, c)]
        if automaton.is_complete(state) and (not options or rng.random() < 0.3):
            return text
        assert options, f"viable prefix {text!r} has no continuation"
        char = rng.choice(options)
        state, text = automaton.step(state, char), text + char
    return text if automaton.is_complete(state) else None


@pytest.mark.parametrize("seed", range(40))
def test_random_schemas(seed: int) -> None:
    rng = random.Random(seed)
    schema = random_schema(rng)
    jsonschema.Draft202012Validator.check_schema(schema)
    automaton = JsonPrefixAutomaton(CompiledSchema(schema))
    for _ in range(5):  # every valid instance, in each standard spelling, is accepted prefix by prefix
        instance = random_instance(rng, schema)
        jsonschema.validate(instance, schema)
        for text in dumps_variants(instance):
            state = automaton.initial()
            for i, char in enumerate(text):
                state = automaton.step(state, char)
                assert state, f"rejected valid prefix {text[:i + 1]!r} of {text!r} for {schema}"
            assert automaton.is_complete(state), text
    for _ in range(15):  # whatever the automaton completes is valid
        text = random_walk(rng, automaton)
        if text is not None:
            value = json.loads(text)
            jsonschema.validate(value, schema)
            assert check(value, CompiledSchema(schema)) == []


@pytest.mark.parametrize(("schema", "text"), [
    ({"type": "integer"}, "1.5"),
    ({"type": "integer"}, "01"),
    ({"type": "object", "properties": {"a": {}}, "additionalProperties": False}, '{"b"'),
    ({"type": "object", "properties": {"a": {}}, "required": ["a"]}, "{}"),
    ({"type": "object", "properties": {"a": {}}}, '{"a": 1, "a"'),
    ({"enum": ["red", "green"]}, '"blue'),
    ({"type": "array", "maxItems": 1}, "[1, "),
    ({"type": "array", "minItems": 2}, "[1]"),
    ({"type": "string", "maxLength": 2}, '"abc'),
    ({"type": "string"}, '"a\\x'),
    ({"type": "boolean"}, "tru "),
    ({}, "{} {}"),
    ({}, "[1,  2]"),  # two blanks in a row: whitespace is capped
])
def test_rejects_prefixes_without_valid_completion(schema: dict[str, Any], text: str) -> None:
    automaton = JsonPrefixAutomaton(CompiledSchema(schema))
    state = automaton.feed(automaton.initial(), text)
    assert not state or not automaton.is_complete(state)
    if text not in ("{}", "[1]"):
        assert not state


def test_an_object_that_lists_its_keys_is_decoded_with_those_and_checked_as_json_schema_does() -> None:
    listed = {"type": "object", "properties": {"c": {"type": "integer"}}, "required": ["c"]}
    automaton = JsonPrefixAutomaton(CompiledSchema(listed))
    assert not automaton.feed(automaton.initial(), '{"c": 1, "')  # no key but the listed one is written
    assert check({"c": 1, "x": 2}, CompiledSchema(listed)) == []  # yet other keys are valid, as JSON Schema says
    for open_ in ({**listed, "additionalProperties": True}, {"type": "object"}, {"type": "object", "required": ["c"]}):
        automaton = JsonPrefixAutomaton(CompiledSchema(open_))
        assert automaton.feed(automaton.initial(), '{"c": 1, "x": 2')


def test_refs_and_nested_anyof() -> None:
    schema = {"$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer"},
                                                                  "next": {"anyOf": [{"$ref": "#/$defs/node"},
                                                                                     {"type": "null"}]}},
                                 "required": ["v", "next"], "additionalProperties": False}},
              "$ref": "#/$defs/node"}
    automaton = JsonPrefixAutomaton(CompiledSchema(schema))
    text = '{"v": 1, "next": {"v": 2, "next": null}}'
    assert automaton.is_complete(automaton.feed(automaton.initial(), text))
    assert not automaton.feed(automaton.initial(), '{"v": 1, "next": {"w"')


@pytest.mark.parametrize("schema", [{"type": "string", "pattern": "a+"}, {"type": "number", "minimum": 0},
                                    {"$ref": "http://example.com/s.json"}, {"type": "date"}, {"enum": []},
                                    {"type": "object", "required": ["a"], "additionalProperties": False}])
def test_unsupported_schemas_are_refused(schema: dict[str, Any]) -> None:
    with pytest.raises(SchemaError):
        CompiledSchema(schema)


def _kind(name: str, **extra: Any) -> dict[str, Any]:
    """An object tagged by a required `kind` (a discriminated union's branch)."""
    return {"type": "object", "properties": {"kind": {"const": name}, **extra}, "required": ["kind"]}


@pytest.mark.parametrize("branches", [
    [{"type": "string"}, {"type": "integer"}, {"type": "object"}],
    [{"enum": ["a", 1]}, {"enum": ["b", True]}, {"type": "null"}],
    [_kind("circle", r={"type": "number"}), _kind("square", side={"type": "number"})],
    [{"type": "object", "properties": {"a": {}}, "required": ["a"], "additionalProperties": False},
     {"type": "object", "properties": {"b": {}}, "required": ["b"], "additionalProperties": False}],
    [{"$ref": "#/$defs/leaf"}, {"type": "array", "items": {"$ref": "#/$defs/leaf"}}],
])
def test_a_oneof_of_disjoint_branches_is_exact_and_strict_keeps_it(branches: list[dict[str, Any]]) -> None:
    schema = {"oneOf": branches, "$defs": {"leaf": {"type": "string"}}}
    CompiledSchema(schema, strict=True)
    rng = random.Random(0)
    for _ in range(20):  # whatever the automaton completes matches exactly one branch
        text = random_walk(rng, JsonPrefixAutomaton(CompiledSchema(schema)))
        if text is not None:
            jsonschema.validate(json.loads(text), schema)


@pytest.mark.parametrize(("branches", "overlap"), [
    ([{"type": "integer"}, {"type": "number"}], 3),
    ([{"enum": ["a", 1]}, {"enum": [1, "b"]}], 1),
    ([{"type": "string"}, {"const": "x"}], "x"),
    ([_kind("a"), {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"],
                   "additionalProperties": True}], {"kind": "a", "n": 1}),
    ([{"type": "object", "required": ["a"]}, {"type": "object", "required": ["b"]}], {"a": 1, "b": 2}),
    ([{}, {"type": "null"}], None),
])
def test_a_oneof_whose_branches_may_overlap_is_refused_when_strict(branches: list[dict[str, Any]],
                                                                    overlap: Any) -> None:
    """Decoded as anyOf, `overlap` (which matches both branches, so not the oneOf) could come out: strict
    refuses the schema; lax decodes it as anyOf, and `check` still tells that the value is no instance."""
    schema = {"oneOf": branches}
    with pytest.raises(SchemaError, match="oneOf branches 0 and 1 may both match one value"):
        CompiledSchema(schema, strict=True)
    lax = CompiledSchema(schema)
    automaton = JsonPrefixAutomaton(lax)
    assert automaton.is_complete(automaton.feed(automaton.initial(), json.dumps(overlap)))
    assert check(overlap, lax) == ["$: matches 2 oneOf branches, not exactly one"]
    assert check(overlap, CompiledSchema({"anyOf": branches})) == []


def vocabulary() -> list[str]:
    """Multi-character pieces like a BPE vocabulary's, plus an unusable special (empty text)."""
    pieces = ['{"', '":', ' "', '",', '"}', "}", "{", '"', ":", ",", " ", "[", "]", "name", "arguments",
              "calculator", "get_time", "expression", "12", " *", " 4", "country", "fr", "ance", "value", "_",
              "unit", "from", "to", "km", "mi", "true", "null", "1", "0", ".", "5", "-", "e", "é", ""]
    return pieces + list(string.ascii_lowercase)


def test_token_walks_produce_valid_tool_calls() -> None:
    schema = tool_call_schema()
    vocab = vocabulary()
    stop = len(vocab)
    vocab.append("")  # the stop token's slot
    rng = random.Random(0)
    for _ in range(30):
        constraint = JsonSchemaConstraint(schema, vocab, stop_token_ids=[stop])
        while not constraint.stopped:
            allowed = constraint.allowed_token_ids()
            assert allowed, constraint.text
            assert all(constraint.is_allowed(t) for t in allowed)
            token = stop if stop in allowed and rng.random() < 0.5 else rng.choice(allowed)
            constraint.advance(token)
            assert len(constraint.text) < 400
        jsonschema.validate(json.loads(constraint.text), schema)


def test_token_constraint_blocks_and_explains() -> None:
    vocab = vocabulary()
    constraint = JsonSchemaConstraint({"type": "object", "properties": {"name": {"enum": ["get_time"]}},
                                       "required": ["name"], "additionalProperties": False}, vocab)
    for piece in ['{"', "name", '":', ' "']:
        constraint.advance(vocab.index(piece))
    allowed = {vocab[t] for t in constraint.allowed_token_ids()}
    assert "get_time" in allowed and "calculator" not in allowed and "" not in allowed
    with pytest.raises(ValueError, match="breaks the schema"):
        constraint.advance(vocab.index("calculator"))
    clone = constraint.copy()
    clone.advance(vocab.index("get_time"))
    assert constraint.text == '{"name": "' and clone.text == '{"name": "get_time'
    assert not clone.is_complete()


def test_an_instead_id_may_only_stand_first_and_ends_the_span() -> None:
    """A tool call's opening tag where an answer is a call or the JSON: allowed before any text, never after."""
    vocab = vocabulary()
    tag = vocab.index("")
    constraint = JsonSchemaConstraint({"type": "object"}, vocab, instead_ids=[tag])
    assert tag in constraint.allowed_token_ids() and tag in constraint.allowed_token_ids(budget=3)
    clone = constraint.copy()
    clone.advance(tag)
    assert clone.stopped and clone.stopped_by == tag and clone.text == ""
    constraint.advance(vocab.index("{"))
    assert tag not in constraint.allowed_token_ids() and not constraint.is_allowed(tag)
    assert not constraint.stopped and constraint.stopped_by is None


def random_prefix_states(rng: random.Random, automaton: JsonPrefixAutomaton, count: int) -> list[tuple[str, Any]]:
    """Viable prefixes reached by typing random allowed characters."""
    prefixes = []
    for _ in range(count):
        state, text = automaton.initial(), ""
        for _ in range(rng.randint(0, 30)):
            options = [c for c in CHARSET if automaton.step(state, c)]
            if not options:
                break
            char = rng.choice(options)
            state, text = automaton.step(state, char), text + char
        prefixes.append((text, state))
    return prefixes


@pytest.mark.parametrize("seed", range(40))
def test_completion_cost_is_the_shortest_completion(seed: int) -> None:
    """Zero exactly when complete, never drops by more than one per character, and the completion it gives
    is one the automaton takes to a whole instance: together these make it the shortest completion."""
    rng = random.Random(seed)
    schema = random_schema(rng)
    automaton = JsonPrefixAutomaton(CompiledSchema(schema))
    cost = CompletionCost(automaton)
    for text, state in random_prefix_states(rng, automaton, 12):
        here = cost.of(state)
        assert (here == 0) == automaton.is_complete(state), (schema, text)
        if here >= UNREACHABLE:
            assert cost.text(state) is None
            continue
        after = {c: cost.of(s) for c in CHARSET if (s := automaton.step(state, c))}
        assert all(a >= here - 1 for a in after.values()), (schema, text, here, after)
        completion = cost.text(state)
        assert len(completion) == here and automaton.is_complete(automaton.feed(state, completion)), \
            (schema, text, completion)
        jsonschema.validate(json.loads(text + completion), schema)


@pytest.mark.parametrize("free_keys", [False, True])
@pytest.mark.parametrize("budget", [15, 18, 20, 30, 45])
def test_a_token_budget_always_closes_the_json(budget: int, free_keys: bool) -> None:
    """Tokens picked at random among those allowed within the budget: the JSON closes in time, every time
    and its stop token as well (18 = the shortest instance, '{"note":"","n":0}', in single characters, and
    the stop; 15 = the same with the multi-character tokens that shorten it, the tightest budget), also where
    any other key may be written (JSON Schema's default)."""
    schema = {"type": "object", "properties": {"note": {"type": "string"}, "n": {"type": "integer"},
                                               "more": {"type": "array", "items": {}}},
              "required": ["note", "n"], "additionalProperties": free_keys}
    vocab = ["", *CHARSET, "ab", '{"', '":', '", "', "[[", "{}", "12", "zzzz", '"n"']
    stop = 0
    rng = random.Random(budget)
    for _ in range(30):
        constraint = JsonSchemaConstraint(schema, vocab, [stop])
        for left in range(budget, 0, -1):
            token = rng.choice(constraint.allowed_token_ids(left))
            constraint.advance(token)
            if constraint.stopped:
                break
        assert constraint.stopped, constraint.text
        jsonschema.validate(json.loads(constraint.text), schema)


def test_a_tool_with_long_required_arguments_fits_a_budget_its_characters_do_not() -> None:
    """After the name 'calculator' the shortest completion is 32 characters but 10 of these tokens: with 12
    tokens left (the name, those 10 and the stop) the tool may still be named, where counting characters
    ruled it out (and with it the tool the model meant), with 10 only get_time fits. The bound is never
    above the characters, and 0 exactly when the JSON is complete."""
    vocab = vocabulary()
    constraint = JsonSchemaConstraint(tool_call_schema(), vocab)
    for piece in ['{"', "name", '":', ' "']:
        constraint.advance(vocab.index(piece))
    assert vocab.index("calculator") in constraint.allowed_token_ids(12)
    assert {vocab[t] for t in constraint.allowed_token_ids(10)} & {"calculator", "get_time"} == {"get_time"}
    grammar = constraint.grammar
    rng = random.Random(0)
    for text, state in random_prefix_states(rng, grammar.automaton, 40):
        tokens, chars = grammar.tokens_to_finish(state), grammar.cost.of(state)
        assert tokens <= chars and (tokens == 0) == (chars == 0), text


def random_combined_schema(rng: random.Random) -> dict[str, Any]:
    """An object schema with keywords beside an anyOf/oneOf/allOf or a $ref, whose branches hold their own
    properties, required keys, bounds, types and true/false: the decoder must honour both sides at once."""
    def branch() -> Any:
        if rng.random() < 0.15:
            return rng.choice([True, False])
        keys = rng.sample(["a", "b", "c"], rng.randint(0, 2))
        sub: dict[str, Any] = {"properties": {k: rng.choice([{"type": "string", "maxLength": 2}, {"type": "integer"},
                                                             {"enum": ["x", 1]}, {"minLength": 1}, True])
                                              for k in keys},
                               "required": [k for k in keys if rng.random() < 0.5]}
        if rng.random() < 0.3:
            sub["additionalProperties"] = False
        if rng.random() < 0.3:
            sub["type"] = rng.choice(["object", ["object", "null"]])
        return sub

    keys = rng.sample(["a", "b", "d"], rng.randint(0, 2))
    schema: dict[str, Any] = {"type": "object", "properties": {k: {"type": rng.choice(["string", "integer"])}
                                                                for k in keys},
                              "required": [k for k in keys if rng.random() < 0.5]}
    if rng.random() < 0.3:
        schema["additionalProperties"] = rng.choice([False, {"type": "boolean"}])
    combinator = rng.choice(["anyOf", "oneOf", "allOf", "$ref"])
    if combinator == "$ref":
        schema["$ref"] = "#/$defs/base"
        schema["$defs"] = {"base": branch()}
    else:
        schema[combinator] = [branch() for _ in range(rng.randint(1, 3))]
    return schema


@pytest.mark.parametrize("seed", range(60))
def test_keywords_beside_a_combinator_or_ref_hold_together_with_it(seed: int) -> None:
    """What the automaton completes validates against the whole schema (they had been overwritten by a
    branch's own: a branch's `required` replaced the parent's). A oneOf is decoded only where strict
    compiling proves its branches disjoint; a schema refused must be refused with SchemaError, nothing else."""
    rng = random.Random(seed)
    schema = random_combined_schema(rng)
    jsonschema.Draft202012Validator.check_schema(schema)
    try:
        compiled = CompiledSchema(schema, strict="oneOf" in schema)
    except SchemaError:
        return
    automaton = JsonPrefixAutomaton(compiled)
    for _ in range(15):
        text = random_walk(rng, automaton)
        if text is not None:
            value = json.loads(text)
            jsonschema.validate(value, schema)
            assert check(value, compiled) == []


def _decoded(schema: dict[str, Any], budget: int = 40) -> list[Any]:
    """Values decoded from random allowed characters within a budget that makes every one close."""
    vocab = ["", *CHARSET]
    rng, values = random.Random(0), []
    for _ in range(10):
        constraint = JsonSchemaConstraint(schema, vocab, [0])
        for left in range(budget, 0, -1):
            constraint.advance(rng.choice(constraint.allowed_token_ids(left)))
            if constraint.stopped:
                break
        values.append(json.loads(constraint.text))
    return values


def test_a_parents_required_keys_survive_a_branch_that_requires_others() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"],
              "anyOf": [{"properties": {"b": {"type": "string"}}, "required": ["b"]}, {"required": ["c"]}]}
    values = _decoded(schema)
    assert values and all("a" in v and ("b" in v or "c" in v) for v in values)
    automaton = JsonPrefixAutomaton(CompiledSchema(schema))
    assert not automaton.is_complete(automaton.feed(automaton.initial(), '{"b": "x"}'))
    assert automaton.is_complete(automaton.feed(automaton.initial(), '{"a": 1, "b": "x"}'))


def test_keywords_beside_a_ref_apply_to_its_schema() -> None:
    schema = {"$defs": {"point": {"type": "object", "properties": {"x": {"type": "number"}}}},
              "$ref": "#/$defs/point", "required": ["x", "label"], "properties": {"label": {"maxLength": 3}}}
    automaton = JsonPrefixAutomaton(CompiledSchema(schema))
    assert not automaton.is_complete(automaton.feed(automaton.initial(), '{"x": 1}'))
    assert not automaton.feed(automaton.initial(), '{"x": 1, "label": "abcd"')
    assert automaton.is_complete(automaton.feed(automaton.initial(), '{"x": 1, "label": "abc"}'))


@pytest.mark.parametrize(("schema", "instance", "other"), [
    ({"anyOf": [False, {"type": "string"}]}, '"s"', "1"),
    ({"oneOf": [True, {"type": "string"}]}, "1", None),  # lax: decoded as anyOf, so anything
    ({"allOf": [True, {"type": "integer"}]}, "3", '"s"'),
    ({"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": False,
      "anyOf": [{"required": ["a"]}, False]}, '{"a": 1}', "{}"),
])
def test_true_and_false_are_schemas_inside_combinators(schema: dict[str, Any], instance: str, other: str | None) -> None:
    """true takes any value, false none: a false branch is left out (it had raised a TypeError, a 500)."""
    automaton = JsonPrefixAutomaton(CompiledSchema(schema))
    assert automaton.is_complete(automaton.feed(automaton.initial(), instance))
    if other is not None:
        state = automaton.feed(automaton.initial(), other)
        assert not state or not automaton.is_complete(state)


@pytest.mark.parametrize(("schema", "message"), [
    ({"allOf": [False]}, "admits no value"),
    ({"anyOf": [False, False]}, "anyOf admits no value"),
    ({"oneOf": [{"type": "string"}], "type": "integer"}, "oneOf admits no value"),
    ({"type": "array", "minItems": 100_000}, "minItems 100000 is more than any answer can hold"),
    ({"type": "array", "minItems": 10**9}, "minItems"),
    ({"type": "string", "minLength": 10**12}, "minLength"),
    ({"type": "array", "minItems": 4000, "items": {"type": "array", "minItems": 4000}}, "minimums multiply"),
    ({"type": "object", "properties": {k: {"type": "string", "minLength": 4096} for k in "abcde"},
      "required": ["a", "b"], "allOf": [{"required": ["c", "d"]}, {"required": ["e"]}]}, "over 16384 characters"),
    ({"anyOf": [{"type": "string"}], "items": {"type": "string"}, "type": "array", "minItems": 1,
      "allOf": [{"anyOf": [{"type": "integer"}]}]}, "anyOf is given differently"),
])
def test_schemas_no_answer_can_meet_are_refused_at_once(schema: dict[str, Any], message: str) -> None:
    """Before anything of their size is built: minItems 10**9 had grown the decoder's completions until the
    server ran out of memory."""
    with pytest.raises(SchemaError, match=message):
        CompiledSchema(schema)


def test_a_schema_whose_merges_double_at_every_level_is_refused_at_once() -> None:
    """An allOf of two $refs to allOfs of two $refs ...: 17 levels of a 2 KB schema had held the server for many
    seconds; three levels compile."""
    def chain(depth: int) -> dict[str, Any]:
        defs: dict[str, Any] = {f"D{i}{c}": {"allOf": [{"$ref": f"#/$defs/D{i + 1}a"}, {"$ref": f"#/$defs/D{i + 1}b"}]}
                                for i in range(depth) for c in "ab"}
        defs |= {f"D{depth}a": {"type": "object", "required": ["a"]}, f"D{depth}b": {"type": "object"}}
        return {"$defs": defs, "$ref": "#/$defs/D0a"}

    automaton = JsonPrefixAutomaton(CompiledSchema(chain(3)))
    assert automaton.is_complete(automaton.feed(automaton.initial(), '{"a": 1}'))
    assert not automaton.is_complete(automaton.feed(automaton.initial(), "{}"))
    with pytest.raises(SchemaError, match="over 2000 merges"):
        CompiledSchema(chain(17))


def test_a_large_but_allowed_minimum_decodes_in_linear_time() -> None:
    """minItems at the cap: the token bound walks one completion instead of rebuilding one per token."""
    schema = {"type": "array", "items": {"type": "integer"}, "minItems": 2000}
    vocab = ["", *CHARSET, "0,", "[0"]
    constraint = JsonSchemaConstraint(schema, vocab, [0])
    for _ in range(40):
        allowed = constraint.allowed_token_ids(budget=3000)
        constraint.advance(vocab.index("0,") if vocab.index("0,") in allowed else allowed[-1])
    assert constraint.grammar.tokens_to_finish(constraint.state) <= 2 * 2000


def _strings(n: int) -> list[dict[str, Any]]:
    return [{"type": "string", "maxLength": i} for i in range(n)]


@pytest.mark.parametrize("schema", [
    {"anyOf": [{"enum": 7}, *_strings(300)]},  # the meta-schema check would have named the enum
    {"$defs": {"unused": {"anyOf": _strings(300)}}, "properties": {"a": {"enum": 7}}},  # bulk where no $ref goes
    {"type": "object", "properties": {"a": {"not": {"anyOf": [{"enum": 7}, *_strings(300)]}}}},
])
def test_a_schema_written_with_too_many_sub_schemas_is_refused_before_the_meta_schema_check(
        schema: dict[str, Any]) -> None:
    """The meta-schema check walks every sub-schema, about 0.2 ms each: 417 KB of nested anyOf had held the
    server's event loop 3.4 s before the compiler's count refused it. Counting comes first now, and stops at the
    limit: each of these holds an error that check would have reported instead."""
    with pytest.raises(SchemaError, match="the schema is too large: over 256 sub-schemas"):
        check_schema(schema)


def test_a_schema_written_with_256_sub_schemas_is_checked_as_before() -> None:
    properties = {f"k{i}": {"type": "string"} for i in range(254)}
    check_schema({"type": "object", "properties": {**properties, "last": {"type": "string"}}})
    with pytest.raises(SchemaError, match="not a valid JSON schema at properties/last/enum"):
        check_schema({"type": "object", "properties": {**properties, "last": {"enum": 7}}})
