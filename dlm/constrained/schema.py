"""JSON schemas compiled into a flat table of nodes that both the prefix automaton and `check` walk.

Supported: type (incl. lists), enum, const, object properties/required/additionalProperties, array
items/minItems/maxItems, string minLength/maxLength, anyOf, oneOf, allOf, local $ref into #/$defs or
#/definitions, and true/false as sub-schemas. Annotation keywords are ignored; any other constraint keyword raises
`SchemaError`, since silently ignoring it would let the decoder produce output the caller's validator rejects.
A schema without a type takes the one its keywords are about (properties: an object, minLength: a string), which
allows less than JSON Schema does, never more. So does the decoder on an object that lists its properties and
says nothing of `additionalProperties`: it writes the keys listed (`Node.listed_only`), as xgrammar's strict mode
reads such an object, while `check` takes other keys as JSON Schema does. Offered them, the demo model had
written invented keys up to max_tokens (a one-key schema: 298 tokens, 15-90 s); `"additionalProperties": true`
asks for them.

Keywords beside an anyOf/oneOf/allOf/$ref apply together with each branch (member, referenced schema): the two
are merged into one schema that is their intersection (`CompiledSchema._merge`): required keys are united,
types intersected, minimums take the larger and maximums the smaller, enums keep the values in both, and a key
both define takes both sub-schemas, merged the same way. Where that cannot be written exactly (two different
anyOf, a keyword it has no rule for given differently on both sides) the schema is refused, never loosened.
A branch that admits no value (false, or one that contradicts the keywords beside it) is left out of an
anyOf/oneOf; an anyOf/oneOf with none left, an allOf with such a member, or a false anywhere else, is refused.

Minimums are bounded: minItems/minLength over `MAX_MIN_COUNT`, or a sub-schema whose shortest instance is over
`MAX_VALUE_CHARS` characters, are refused, since no answer could hold one and the decoder builds the shortest
completion of every state it weighs as text. Maximums only bound, so any is fine.

The decoder follows a oneOf as an anyOf: it cannot tell, midway through a value, whether the value will also
match a second branch. That is exact when no value matches two branches, which the compiler proves where it
can (branches of different JSON types, different enum/const values, or objects one of whose required keys
the other forbids or takes only other values for). Otherwise a decoded value may match two branches, which
oneOf forbids: `strict` compilation (a request's `strict: true`) refuses such a schema, a lax one decodes it
as anyOf. `check` enforces oneOf exactly either way.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError as MetaSchemaError
from referencing.exceptions import Unresolvable

_ANNOTATIONS = {
    "title", "description", "default", "examples", "$schema", "$id", "$comment", "$defs", "definitions",
    "strict", "name", "deprecated", "readOnly", "writeOnly",
}
_HANDLED = {
    "type", "enum", "const", "properties", "required", "additionalProperties", "items", "minItems",
    "maxItems", "minLength", "maxLength", "anyOf", "oneOf", "allOf", "$ref",
}
_TYPES = ("string", "number", "integer", "boolean", "null", "object", "array")
_IMPLIED_TYPES = {"object": ("properties", "required", "additionalProperties"), "array": ("items", "minItems", "maxItems"),
                  "string": ("minLength", "maxLength")}
_LARGER, _SMALLER = {"minItems", "minLength"}, {"maxItems", "maxLength"}
_MERGED_APART = {"enum", "const", "properties", "additionalProperties"}  # merged from both keywords of a side at once
FILLER = "a"  # the character shortest strings are made of: every string schema takes it

Schema = dict[str, Any] | bool


class SchemaError(ValueError):
    """The schema uses something the constrained decoder cannot enforce, or is malformed."""


def check_schema(schema: Any) -> None:
    """Raise `SchemaError` unless ``schema`` is a JSON schema at all (by the 2020-12 meta-schema): an enum that
    is not a list or properties that are not an object would otherwise fail deep inside the compiler. For
    schemas from outside (a request's); it takes about 0.6 ms for a tool's parameters, the compiler 0.2 ms.
    The meta-schema check costs about 0.2 ms a sub-schema, so sub-schemas are counted first (`_count_written`)."""
    _count_written(schema)
    try:
        Draft202012Validator.check_schema(schema)
    except RecursionError:
        raise SchemaError("the schema is nested too deeply") from None
    except MetaSchemaError as exc:
        where = "/".join(str(part) for part in exc.path) or "the root"
        raise SchemaError(f"not a valid JSON schema at {where}: {exc.message}") from None


_SCHEMA_MAPS = ("properties", "patternProperties", "dependentSchemas", "dependencies", "$defs", "definitions")
_SCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_SCHEMA_VALUES = ("items", "additionalItems", "additionalProperties", "unevaluatedItems", "unevaluatedProperties",
                  "propertyNames", "contains", "not", "if", "then", "else", "contentSchema")


def _count_written(schema: Any) -> None:
    """Refuse a schema written with over `MAX_NODES` sub-schemas, counting no further than that: the meta-schema
    check walks every one, and 417 KB of nested anyOf (under the body limit) had held the event loop 3.4 s
    before the compiler's own count refused it. Every place the meta-schema checks a schema is counted, $defs
    included, so an unreferenced bulk weighs too."""
    todo, seen = [schema], 0
    while todo:
        node = todo.pop()
        if not isinstance(node, dict):
            continue
        seen += 1
        if seen > MAX_NODES:
            raise _too_large()
        for key, value in node.items():
            if key in _SCHEMA_MAPS and isinstance(value, dict):
                todo.extend(value.values())
            elif key in _SCHEMA_LISTS and isinstance(value, list):
                todo.extend(value)
            elif key in _SCHEMA_VALUES:
                todo.append(value)


def _too_large() -> SchemaError:
    return SchemaError(f"the schema is too large: over {MAX_NODES} sub-schemas")


@dataclass
class Node:
    """One compiled schema: `kind` is a JSON type, 'literal' (enum/const/boolean/null), 'anyof' or 'any'."""

    kind: str
    literals: tuple[str, ...] = ()
    properties: dict[str, int] = field(default_factory=dict)
    required: frozenset[str] = frozenset()
    additional: int | None = None  # node id for extra keys; None forbids them
    listed_only: bool = False  # an object that lists its keys and says nothing of others: decoded with those alone
    items: int = -1
    min_items: int = 0
    max_items: int | None = None
    min_length: int = 0
    max_length: int | None = None
    alternatives: tuple[int, ...] = ()
    exclusive: bool = False  # a oneOf: a value must match exactly one alternative
    implied: bool = False  # the type came from the keywords, not `type`: values of other types are instances too


MAX_MIN_COUNT = 4096
"""The largest minItems or minLength compiled; above it a schema is refused before anything of that size is built.
An answer holds at most the server's max completion tokens (1024 by default; the demo model's whole context is
320 tokens), and no real one needs more items or characters than four a token of that. minItems 10**9 had grown
the completions the decoder builds until the server ran out of memory, minItems 10000 took 9 s for 40 tokens."""

MAX_VALUE_CHARS = 4 * MAX_MIN_COUNT
"""The most characters the shortest instance of any sub-schema may take. Minimums multiply where they nest (an
array of 4096 arrays of 4096 strings), so capping each does not bound it, and the decoder builds the shortest
completion of every state it weighs as text."""

MAX_NODES = 256
"""Compiled nodes a schema may have. The decoder follows every alternative a prefix still fits at once, so a
schema of thousands (an anyOf of 2000 strings) held the model for 27 s over 8 tokens, for every caller; an anyOf
of 250 strings of counted length takes 0.2 s a token on the demo vocabulary. Sub-schemas as written are held to
it too (`check_schema`), before the meta-schema check."""

MAX_MERGES = 2000
"""Schema merges (`CompiledSchema._merge`) a schema may take to compile. A merge of two $refs writes the first
out in place, so an allOf of two $refs whose targets are such allOfs again doubles the work at every level:
17 levels of a 2 KB schema held the server's event loop for many seconds. Real schemas take a few dozen."""


class CompiledSchema:
    """A schema's nodes; node 0 is the root. `ANY` is the id of the unconstrained node."""

    def __init__(self, schema: dict[str, Any] | bool, writable: frozenset[str] | None = None,
                 strict: bool = False):
        """`writable`: the characters a decoder's vocabulary can write (None: all). An enum value or a key
        with others can never be decoded, so it is left out, and a schema that needs one is refused: with a
        byte-level vocabulary a character whose bytes no token holds whole, such as "é" in an English one.
        `strict`: refuse a oneOf whose branches are not provably disjoint, which the decoder cannot enforce."""
        self.nodes: list[Node] = []
        self._writable = writable
        self._root_doc = schema if isinstance(schema, dict) else {}
        self._refs: dict[tuple[str, str], int] = {}  # (ref, the keywords beside it) -> node
        self._apart: dict[tuple[int, int], bool] = {}  # `_disjoint`'s answers (False while being worked out)
        self._merges = 0
        root = self._add_placeholder()
        self.ANY = self._add(Node("any"))
        try:
            self._fill(root, schema)
            self._refuse_bare_cycles()
            if strict:
                self._refuse_overlapping_one_of()
        except RecursionError:
            raise SchemaError("the schema is nested too deeply") from None
        self.shortest = self._shortest_instances()
        """A shortest instance per node, as text (None: the node admits no value)."""

    def _add_placeholder(self) -> int:
        if len(self.nodes) >= MAX_NODES:
            raise _too_large()
        self.nodes.append(Node("any"))
        return len(self.nodes) - 1

    def _add(self, node: Node) -> int:
        node_id = self._add_placeholder()
        self.nodes[node_id] = node
        return node_id

    def _refuse_bare_cycles(self) -> None:
        """A $ref that comes back to itself through alternatives alone ({"$ref": "#/$defs/A"} as A, or A =
        anyOf [A, integer]) says nothing about the value's shape, and following it never ends."""
        state = [0] * len(self.nodes)  # 0 unseen, 1 on the path, 2 done

        def visit(node_id: int) -> None:
            state[node_id] = 1
            for alt in self.nodes[node_id].alternatives:
                if state[alt] == 1:
                    raise SchemaError("a $ref refers back to itself without an object or array in between")
                if state[alt] == 0:
                    visit(alt)
            state[node_id] = 2

        for node_id in range(len(self.nodes)):
            if state[node_id] == 0:
                visit(node_id)

    def _refuse_overlapping_one_of(self) -> None:
        for node in self.nodes:
            if not node.exclusive:
                continue
            for i, j in combinations(range(len(node.alternatives)), 2):
                if not self._disjoint(node.alternatives[i], node.alternatives[j]):
                    raise SchemaError(
                        f"oneOf branches {i} and {j} may both match one value, and the decoder enforces oneOf "
                        "only as anyOf: make them exclusive (different types, or a required key with different "
                        "const/enum values), use anyOf, or leave out strict")

    def _disjoint(self, a: int, b: int) -> bool:
        """Whether no value is an instance of both nodes, provably: False when unsure, and on coming back to a
        pair still being worked out (a recursive $ref), so every True holds."""
        if (a, b) in self._apart:
            return self._apart[(a, b)]
        self._apart[(a, b)] = False
        x, y = self.nodes[a], self.nodes[b]
        if x.kind == "anyof":
            apart = all(self._disjoint(alt, b) for alt in x.alternatives)
        elif y.kind == "anyof":
            apart = all(self._disjoint(a, alt) for alt in y.alternatives)
        elif not _types(x) & _types(y):
            apart = True
        elif x.kind == y.kind == "literal":
            apart = not any(_same(json.loads(u), json.loads(v)) for u in x.literals for v in y.literals)
        elif x.kind == y.kind == "object":
            apart = self._key_apart(x, y) or self._key_apart(y, x)
        else:
            apart = False
        self._apart[(a, b)] = apart
        return apart

    def _key_apart(self, x: Node, y: Node) -> bool:
        """Some key `x` requires is one `y` forbids, or allows only with values `x` does not take."""
        for key in x.required:
            mine, theirs = x.properties.get(key, x.additional), y.properties.get(key, y.additional)
            if theirs is None or (mine is not None and self._disjoint(mine, theirs)):
                return True
        return False

    def _shortest_instances(self) -> list[str | None]:
        """By fixed point, since schemas may refer to themselves; a candidate over `MAX_VALUE_CHARS` counts as
        none, and a node whose shortest is one once every other is known is refused."""
        texts: list[str | None] = [None] * len(self.nodes)
        changed = True
        while changed:
            changed, too_long = False, []
            for node_id, node in enumerate(self.nodes):
                try:
                    new = self._shortest_instance(node, texts)
                except _TooLong:
                    too_long.append(node_id)
                    continue
                if new is not None and (texts[node_id] is None or len(new) < len(texts[node_id])):
                    texts[node_id], changed = new, True
        if too_long:
            raise SchemaError(f"the shortest value of a sub-schema is over {MAX_VALUE_CHARS} characters (minimums "
                              "multiply where they nest): more than any answer holds")
        return texts

    @staticmethod
    def _shortest_instance(node: Node, texts: list[str | None]) -> str | None:
        """From the shortest instances found so far of the nodes it holds; raises `_TooLong` before building
        one over the cap."""
        if node.kind in ("any", "number", "integer"):
            return "0"
        if node.kind == "literal":
            return min(node.literals, key=len)
        if node.kind == "string":
            too_few = node.max_length is not None and node.max_length < node.min_length
            return None if too_few else '"' + FILLER * node.min_length + '"'
        if node.kind == "anyof":
            return shortest_text(texts[alt] for alt in node.alternatives)
        if node.kind == "array":
            if node.max_items is not None and node.max_items < node.min_items:
                return None
            item = texts[node.items] if node.min_items else ""
            if item is not None and node.min_items * (len(item) + 1) > MAX_VALUE_CHARS:
                raise _TooLong
            return None if item is None else "[" + ",".join([item] * node.min_items) + "]"
        members = []
        for key in sorted(node.required):
            sub = node.properties.get(key, node.additional)
            if sub is None or texts[sub] is None:
                return None
            members.append(f"{_dump(key)}:{texts[sub]}")
        text = "{" + ",".join(members) + "}"
        if len(text) > MAX_VALUE_CHARS:
            raise _TooLong
        return text

    def _compile(self, schema: Any) -> int:
        if schema is True or schema == {}:
            return self.ANY
        node_id = self._add_placeholder()
        self._fill(node_id, schema)
        return node_id

    def _target(self, ref: str) -> Schema:
        """The schema a local $ref names."""
        parts = ref.split("/")
        if len(parts) != 3 or parts[0] != "#" or parts[1] not in ("$defs", "definitions"):
            raise SchemaError(f"only local refs like '#/$defs/Name' are supported, got {ref!r}")
        defs = self._root_doc.get(parts[1], {})
        if parts[2] not in defs:
            raise SchemaError(f"unresolved $ref {ref!r}")
        return defs[parts[2]]

    def _resolve_ref(self, ref: str, siblings: dict[str, Any]) -> int:
        """The node of a $ref's schema merged with the keywords beside it: one per pair, so that a schema may
        refer to itself."""
        siblings = {k: v for k, v in siblings.items() if k not in _ANNOTATIONS}
        key = (ref, json.dumps(siblings, sort_keys=True))
        if key not in self._refs:
            target = self._target(ref)
            self._refs[key] = node_id = self._add_placeholder()
            self._fill(node_id, self._merge(target, siblings))
        return self._refs[key]

    def _fill(self, node_id: int, schema: Any) -> None:
        self.nodes[node_id] = self._node(schema)

    def _node(self, schema: Any) -> Node:
        if schema is True:
            schema = {}
        if schema is False:
            raise SchemaError("a sub-schema admits no value (false, or keywords that contradict each other), which "
                              "only an anyOf/oneOf branch or additionalProperties may")
        if not isinstance(schema, dict):
            raise SchemaError(f"a schema must be an object or true, got {schema!r}")
        unknown = set(schema) - _HANDLED - _ANNOTATIONS
        if unknown:
            raise SchemaError(f"unsupported schema keywords: {', '.join(sorted(unknown))}")
        return self._build(schema)

    def _build(self, schema: dict[str, Any]) -> Node:
        if "allOf" in schema:
            merged: Schema = _without(schema, "allOf")
            for member in schema["allOf"]:
                merged = self._merge(merged, member)
            return self._node(merged)
        if "$ref" in schema:
            return Node("anyof", alternatives=(self._resolve_ref(schema["$ref"], _without(schema, "$ref")),))
        for key in ("anyOf", "oneOf"):
            if key in schema:
                rest = _without(schema, key)
                branches = [branch for alt in schema[key] if (branch := self._merge(rest, alt)) is not False]
                if not branches:
                    raise SchemaError(f"{key} admits no value: each branch is false or contradicts the keywords "
                                      "beside it")
                return Node("anyof", alternatives=tuple(map(self._compile, branches)), exclusive=key == "oneOf")
        types = schema.get("type")
        unknown = [t for t in _type_list(types or []) if t not in _TYPES]
        if unknown:
            raise SchemaError(f"unknown type {unknown[0]!r}")
        values = _literals(schema)
        if values is not None:
            return self._literal(values, {k: v for k, v in schema.items() if k not in ("enum", "const")})
        if types is None:
            implied = [kind for kind, keys in _IMPLIED_TYPES.items() if any(k in schema for k in keys)]
            if not implied:
                return Node("anyof", alternatives=(self.ANY,))
            node = self._build({**schema, "type": implied[0] if len(implied) == 1 else implied})
            for typed in (node, *(self.nodes[alt] for alt in node.alternatives)):
                typed.implied = True
            return node
        if isinstance(types, list):
            rest = _without(schema, "type")
            return Node("anyof", alternatives=tuple(self._compile({**rest, "type": t}) for t in types))
        if types == "boolean":
            return Node("literal", literals=("true", "false"))
        if types == "null":
            return Node("literal", literals=("null",))
        if types == "object":
            return self._object(schema)
        if types == "array":
            items = self._compile(schema.get("items", True))
            return Node("array", items=items, min_items=_count(schema, "minItems") or 0,
                        max_items=_count(schema, "maxItems"))
        if types == "string":
            return Node("string", min_length=_count(schema, "minLength") or 0, max_length=_count(schema, "maxLength"))
        return Node(types)

    def _literal(self, values: list[Any], beside: dict[str, Any]) -> Node:
        """The values that also satisfy the keywords `beside` their enum/const (checked here, since the decoder
        writes a literal whole), in the spellings this model's vocabulary can write."""
        if _constrains(beside):
            defs = {k: self._root_doc[k] for k in ("$defs", "definitions") if k in self._root_doc}
            validator = Draft202012Validator({**beside, **defs})
            try:
                values = [v for v in values if validator.is_valid(v)]
            except Unresolvable as exc:
                raise SchemaError(f"unresolved $ref beside an enum/const: {exc}") from None
        if not values:
            raise SchemaError("enum/const leaves no allowed value")
        literals = [text for text in map(_dump, values) if self._can_write(text)]
        if not literals:
            raise SchemaError(f"no enum/const value can be written with this model's vocabulary: {values[0]!r}")
        return Node("literal", literals=tuple(dict.fromkeys(literals)))

    def _object(self, schema: dict[str, Any]) -> Node:
        props = {name: self._compile(sub) for name, sub in schema.get("properties", {}).items()
                 if self._can_write(_dump(name))}
        required = frozenset(schema.get("required", ()))
        unwritable = sorted(key for key in required if not self._can_write(_dump(key)))
        if unwritable:
            raise SchemaError(f"required key {unwritable[0]!r} cannot be written with this model's vocabulary")
        extra = schema.get("additionalProperties", True)
        additional = None if extra is False else self._compile(extra)
        missing = required - set(props)
        if additional is None and missing:
            raise SchemaError(f"required keys {sorted(missing)} are not allowed by additionalProperties false")
        listed_only = "additionalProperties" not in schema and bool(props) and not missing
        return Node("object", properties=props, required=required, additional=additional, listed_only=listed_only)

    def _merge(self, a: Schema, b: Schema) -> Schema:
        """allOf [a, b] as one schema, so that keywords beside a branch apply to it too; False where no value is
        an instance of both. Raises `SchemaError` where the intersection cannot be written exactly."""
        self._merges += 1
        if self._merges > MAX_MERGES:
            raise SchemaError(f"the schema takes over {MAX_MERGES} merges of allOf members, $refs and the keywords "
                              "beside them to compile: simplify it")
        if not _constrains(a):
            return b
        if not _constrains(b) or a is False:
            return a
        if b is False:
            return b
        assert isinstance(a, dict) and isinstance(b, dict)
        if "$ref" in a and "$ref" in b and a["$ref"] != b["$ref"]:  # one of them in place of its $ref
            return self._merge(self._merge(self._target(a["$ref"]), _without(a, "$ref")), b)
        if "$ref" in a or "$ref" in b:  # a $ref beside the rest merged, as `_resolve_ref` takes it
            ref = a.get("$ref", b.get("$ref"))
            self._target(ref)  # a dangling one is refused, even where the rest admits no value
            rest = self._merge(_without(a, "$ref"), _without(b, "$ref"))
            return rest if not isinstance(rest, dict) else {**rest, "$ref": ref}
        merged: dict[str, Any] = {}
        for key in dict.fromkeys([*a, *b]):
            if key in _ANNOTATIONS or key in _MERGED_APART:
                continue
            if key not in a or key not in b or _same(a[key], b[key]):
                merged[key] = a[key] if key in a else b[key]
            elif key in _LARGER or key in _SMALLER:
                merged[key] = (max if key in _LARGER else min)(a[key], b[key])
            elif key == "required":
                merged[key] = list(dict.fromkeys([*a[key], *b[key]]))
            elif key == "allOf":
                merged[key] = [*a[key], *b[key]]
            elif key == "items":
                merged[key] = self._merge(a[key], b[key])
            elif key == "type":
                merged[key] = [t for t in dict.fromkeys(_type_list(a[key]) + _type_list(b[key]))
                               if _allows_type(a[key], t) and _allows_type(b[key], t)]
                if not merged[key]:
                    return False
            else:
                raise SchemaError(f"{key} is given differently beside an anyOf/oneOf/allOf/$ref and in its branch, "
                                  "which the decoder cannot combine")
        values = _literals(a, b)
        if values is not None:
            if not values:
                return False
            merged["enum"] = values
        if any(key in side for side in (a, b) for key in ("properties", "additionalProperties")):
            merged.update(self._merge_objects(a, b))
        return merged

    def _merge_objects(self, a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
        """properties and additionalProperties of both sides: each key takes what both say of it (its property
        schema, else the side's additionalProperties); one a side forbids is left out where no other key is
        allowed either, which forbids it."""
        extra_a, extra_b = a.get("additionalProperties", True), b.get("additionalProperties", True)
        props_a, props_b = a.get("properties", {}), b.get("properties", {})
        extra = self._merge(extra_a, extra_b)
        props = {}
        for key in dict.fromkeys([*props_a, *props_b]):
            sub = self._merge(props_a.get(key, extra_a), props_b.get(key, extra_b))
            if sub is not False or extra is not False:
                props[key] = sub
        said = "additionalProperties" in a or "additionalProperties" in b  # unsaid, it stays unsaid (`_object`)
        return {"properties": props, "additionalProperties": extra} if said else {"properties": props}

    def _can_write(self, text: str) -> bool:
        return self._writable is None or set(text) <= self._writable


class _TooLong(Exception):
    """A shortest instance over `MAX_VALUE_CHARS`, found before it is built."""


def shortest_text(options: Iterable[str | None]) -> str | None:
    """The shortest text, the first in character order among equals: the same whatever order `options` come
    in (a state's stacks are a set), so decoding under a budget does not change from one process to the next."""
    return min((option for option in options if option is not None), key=lambda t: (len(t), t), default=None)


def _without(schema: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in schema.items() if k != key}


def _constrains(schema: Schema) -> bool:
    """Whether a schema rules out any value: not true, nor an object of annotations alone."""
    return schema is False or (isinstance(schema, dict) and any(k not in _ANNOTATIONS for k in schema))


def _literals(*schemas: dict[str, Any]) -> list[Any] | None:
    """The values every enum and const of `schemas` allows (None: they have none)."""
    lists = [[s["const"]] if key == "const" else list(s["enum"]) for s in schemas for key in ("const", "enum")
             if key in s]
    if not lists:
        return None
    return [v for v in lists[0] if all(any(_same(v, w) for w in other) for other in lists[1:])]


def _count(schema: dict[str, Any], key: str) -> int | None:
    """A count keyword as an int (the meta-schema takes 3.0 for 3); a minimum over `MAX_MIN_COUNT` is refused."""
    if key not in schema:
        return None
    value = int(schema[key])
    if key in _LARGER and value > MAX_MIN_COUNT:
        raise SchemaError(f"{key} {value} is more than any answer can hold: at most {MAX_MIN_COUNT} is supported")
    return value


def _type_list(types: str | list[str]) -> list[str]:
    return [types] if isinstance(types, str) else list(types)


def _allows_type(types: str | list[str], type_name: str) -> bool:
    """Whether `types` admits every instance of `type_name` (an integer is a number)."""
    return type_name in _type_list(types) or (type_name == "integer" and "number" in _type_list(types))


def _dump(value: Any) -> str:
    """The canonical text of a literal, the form the decoder must produce."""
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False)
    except ValueError:  # 1e400 is read as infinity, which JSON cannot write
        raise SchemaError(f"enum/const values must be finite numbers, got {value!r}") from None


def _types(node: Node) -> set[str]:
    """The JSON types a node's instances can have, integers as numbers (3.0 is an integer to a validator). All
    of them for an implied type: the decoder keeps to it, a validator does not (`{"properties": {}}` takes true)."""
    if node.kind == "any" or node.implied:
        return {"string", "number", "boolean", "null", "object", "array"}
    if node.kind == "literal":
        return {_json_type(json.loads(text)) for text in node.literals}
    return {"number" if node.kind == "integer" else node.kind}


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    return {str: "string", type(None): "null", dict: "object", list: "array"}[type(value)]


def _same(u: Any, v: Any) -> bool:
    """Equal as JSON values: 1 and 1.0 are, true and 1 are not, also inside arrays and objects."""
    if _json_type(u) != _json_type(v):
        return False
    if isinstance(u, list):
        return len(u) == len(v) and all(map(_same, u, v))
    if isinstance(u, dict):
        return u.keys() == v.keys() and all(_same(u[k], v[k]) for k in u)
    return u == v


def _is_type(value: Any, type_name: str) -> bool:
    if type_name == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if type_name == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    python_types = {"string": str, "boolean": bool, "null": type(None), "object": dict, "array": list}
    return isinstance(value, python_types[type_name])


def check(value: Any, schema: CompiledSchema, node_id: int = 0, path: str = "$") -> list[str]:
    """Every way `value` breaks the schema, as readable messages (empty when it conforms)."""
    node = schema.nodes[node_id]
    if node.kind == "any":
        return []
    if node.kind == "anyof":
        results = [check(value, schema, alt, path) for alt in node.alternatives]
        matched = sum(not r for r in results)
        if node.exclusive and matched > 1:
            return [f"{path}: matches {matched} oneOf branches, not exactly one"]
        return [] if matched else results[0]
    if node.kind == "literal":
        ok = json.dumps(value, ensure_ascii=False) in node.literals  # not _dump: a decoded 1e999 is infinity
        return [] if ok else [f"{path}: {value!r} is not one of {', '.join(node.literals)}"]
    if not _is_type(value, node.kind):
        return [f"{path}: expected {node.kind}, got {type(value).__name__}"]
    if node.kind == "string":
        if len(value) < node.min_length or (node.max_length is not None and len(value) > node.max_length):
            return [f"{path}: string length {len(value)} out of bounds"]
        return []
    if node.kind == "array":
        errors = [] if len(value) >= node.min_items else [f"{path}: fewer than {node.min_items} items"]
        if node.max_items is not None and len(value) > node.max_items:
            errors.append(f"{path}: more than {node.max_items} items")
        for i, item in enumerate(value):
            errors += check(item, schema, node.items, f"{path}[{i}]")
        return errors
    if node.kind == "object":
        errors = [f"{path}: missing required key {k!r}" for k in sorted(node.required - set(value))]
        for key, item in value.items():
            sub = node.properties.get(key, node.additional)
            if sub is None:
                errors.append(f"{path}: unexpected key {key!r}")
            else:
                errors += check(item, schema, sub, f"{path}.{key}")
        return errors
    return []
