"""JSON schemas compiled into a flat table of nodes that both the prefix automaton and `check` walk.

Supported: type (incl. lists), enum, const, object properties/required/additionalProperties, array
items/minItems/maxItems, string minLength/maxLength, anyOf, oneOf, allOf with a single member, local $ref
into #/$defs or #/definitions. Annotation keywords are ignored; any other constraint keyword raises
`SchemaError`, since silently ignoring it would let the decoder produce output the caller's validator rejects.

The decoder follows a oneOf as an anyOf: it cannot tell, midway through a value, whether the value will also
match a second branch. That is exact when no value matches two branches, which the compiler proves where it
can (branches of different JSON types, different enum/const values, or objects one of whose required keys
the other forbids or takes only other values for). Otherwise a decoded value may match two branches, which
oneOf forbids: `strict` compilation (a request's `strict: true`) refuses such a schema, a lax one decodes it
as anyOf. `check` enforces oneOf exactly either way.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError as MetaSchemaError

_ANNOTATIONS = {
    "title", "description", "default", "examples", "$schema", "$id", "$comment", "$defs", "definitions",
    "strict", "name", "deprecated", "readOnly", "writeOnly",
}
_HANDLED = {
    "type", "enum", "const", "properties", "required", "additionalProperties", "items", "minItems",
    "maxItems", "minLength", "maxLength", "anyOf", "oneOf", "allOf", "$ref",
}
_TYPES = ("string", "number", "integer", "boolean", "null", "object", "array")


class SchemaError(ValueError):
    """The schema uses something the constrained decoder cannot enforce, or is malformed."""


def check_schema(schema: Any) -> None:
    """Raise `SchemaError` unless ``schema`` is a JSON schema at all (by the 2020-12 meta-schema): an enum that
    is not a list or properties that are not an object would otherwise fail deep inside the compiler. For
    schemas from outside (a request's); it takes about 0.6 ms for a tool's parameters, the compiler 0.2 ms."""
    try:
        Draft202012Validator.check_schema(schema)
    except RecursionError:
        raise SchemaError("the schema is nested too deeply") from None
    except MetaSchemaError as exc:
        where = "/".join(str(part) for part in exc.path) or "the root"
        raise SchemaError(f"not a valid JSON schema at {where}: {exc.message}") from None


@dataclass
class Node:
    """One compiled schema: `kind` is a JSON type, 'literal' (enum/const/boolean/null), 'anyof' or 'any'."""

    kind: str
    literals: tuple[str, ...] = ()
    properties: dict[str, int] = field(default_factory=dict)
    required: frozenset[str] = frozenset()
    additional: int | None = None  # node id for extra keys; None forbids them
    items: int = -1
    min_items: int = 0
    max_items: int | None = None
    min_length: int = 0
    max_length: int | None = None
    alternatives: tuple[int, ...] = ()
    exclusive: bool = False  # a oneOf: a value must match exactly one alternative


MAX_NODES = 256
"""Compiled nodes a schema may have. The decoder follows every alternative a prefix still fits at once, so a
schema of thousands (an anyOf of 2000 strings) held the model for 27 s over 8 tokens, for every caller; an anyOf
of 250 strings of counted length takes 0.2 s a token on the demo vocabulary."""


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
        self._refs: dict[str, int] = {}
        self._apart: dict[tuple[int, int], bool] = {}  # `_disjoint`'s answers (False while being worked out)
        root = self._add_placeholder()
        self.ANY = self._add(Node("any"))
        try:
            self._fill(root, schema)
            self._refuse_bare_cycles()
            if strict:
                self._refuse_overlapping_one_of()
        except RecursionError:
            raise SchemaError("the schema is nested too deeply") from None

    def _add_placeholder(self) -> int:
        if len(self.nodes) >= MAX_NODES:
            raise SchemaError(f"the schema is too large: over {MAX_NODES} sub-schemas")
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

    def _compile(self, schema: Any) -> int:
        if schema is True or schema == {}:
            return self.ANY
        node_id = self._add_placeholder()
        self._fill(node_id, schema)
        return node_id

    def _resolve_ref(self, ref: str) -> int:
        if ref not in self._refs:
            parts = ref.split("/")
            if len(parts) != 3 or parts[0] != "#" or parts[1] not in ("$defs", "definitions"):
                raise SchemaError(f"only local refs like '#/$defs/Name' are supported, got {ref!r}")
            target = self._root_doc.get(parts[1], {}).get(parts[2])
            if target is None:
                raise SchemaError(f"unresolved $ref {ref!r}")
            self._refs[ref] = node_id = self._add_placeholder()
            self._fill(node_id, target)
        return self._refs[ref]

    def _fill(self, node_id: int, schema: Any) -> None:
        if schema is True:
            schema = {}
        if not isinstance(schema, dict):
            raise SchemaError(f"a schema must be an object or true, got {schema!r}")
        unknown = set(schema) - _HANDLED - _ANNOTATIONS
        if unknown:
            raise SchemaError(f"unsupported schema keywords: {', '.join(sorted(unknown))}")
        self.nodes[node_id] = self._build(schema)

    def _build(self, schema: dict[str, Any]) -> Node:
        if "$ref" in schema:
            return Node("anyof", alternatives=(self._resolve_ref(schema["$ref"]),))
        if "allOf" in schema:
            if len(schema["allOf"]) != 1:
                raise SchemaError("allOf is supported only with a single member")
            rest = {k: v for k, v in schema.items() if k != "allOf"}
            return self._build({**rest, **schema["allOf"][0]})
        for key in ("anyOf", "oneOf"):
            if key in schema:
                rest = {k: v for k, v in schema.items() if k != key}
                if not schema[key]:
                    raise SchemaError(f"{key} must not be empty")
                alts = tuple(self._compile({**rest, **alt}) for alt in schema[key])
                return Node("anyof", alternatives=alts, exclusive=key == "oneOf")
        types = schema.get("type")
        if "enum" in schema or "const" in schema:
            values = [schema["const"]] if "const" in schema else list(schema["enum"])
            if types is not None:
                values = [v for v in values if _matches_type(v, types)]
            if not values:
                raise SchemaError("enum/const leaves no allowed value")
            literals = [text for text in map(_dump, values) if self._can_write(text)]
            if not literals:
                raise SchemaError(f"no enum/const value can be written with this model's vocabulary: {values[0]!r}")
            return Node("literal", literals=tuple(dict.fromkeys(literals)))
        if isinstance(types, list):
            rest = {k: v for k, v in schema.items() if k != "type"}
            return Node("anyof", alternatives=tuple(self._compile({**rest, "type": t}) for t in types))
        if types is None:
            if any(k in schema for k in ("properties", "required", "additionalProperties")):
                types = "object"
            elif "items" in schema:
                types = "array"
            else:
                return Node("anyof", alternatives=(self.ANY,))
        if types not in _TYPES:
            raise SchemaError(f"unknown type {types!r}")
        if types == "boolean":
            return Node("literal", literals=("true", "false"))
        if types == "null":
            return Node("literal", literals=("null",))
        if types == "object":
            return self._object(schema)
        if types == "array":
            items = self._compile(schema.get("items", True))
            return Node("array", items=items, min_items=schema.get("minItems", 0),
                        max_items=schema.get("maxItems"))
        if types == "string":
            return Node("string", min_length=schema.get("minLength", 0), max_length=schema.get("maxLength"))
        return Node(types)

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
        return Node("object", properties=props, required=required, additional=additional)

    def _can_write(self, text: str) -> bool:
        return self._writable is None or set(text) <= self._writable


def _dump(value: Any) -> str:
    """The canonical text of a literal, the form the decoder must produce."""
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False)
    except ValueError:  # 1e400 is read as infinity, which JSON cannot write
        raise SchemaError(f"enum/const values must be finite numbers, got {value!r}") from None


def _types(node: Node) -> set[str]:
    """The JSON types a node's instances can have, integers as numbers (3.0 is an integer to a validator)."""
    if node.kind == "any":
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
    """Equal as JSON values: 1 and 1.0 are, true and 1 are not (inside arrays and objects Python's == would take
    those as equal too, which errs on the safe side: it never proves two branches disjoint that are not)."""
    return _json_type(u) == _json_type(v) and u == v


def _matches_type(value: Any, types: str | list[str]) -> bool:
    return any(_is_type(value, t) for t in ([types] if isinstance(types, str) else types))


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
        ok = _dump(value) in node.literals
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
