"""A character-level pushdown automaton over a compiled JSON schema: can this prefix still become a valid
instance, and is it one already?

A state is a frozenset of stacks (several at once because anyOf and literal/number endings branch). Each
stack is a tuple of hashable frames, so states can key the token-level cache. Whitespace is allowed where
JSON allows it, but at most `max_whitespace` characters in a row, so a constrained model cannot stall
forever on blanks. Literals (enum/const values, the keys of closed objects) are matched in their canonical
spelling, json.dumps(value, ensure_ascii=False): a generator needs one way to write them, not every escape.
"""

from __future__ import annotations

import json

from dlm.constrained.schema import CompiledSchema

State = frozenset
_DIGITS = "0123456789"
_HEX = "0123456789abcdefABCDEF"
_WS = " \n\t\r"
_NUM_NEXT = {
    "sign": {**{d: "int" for d in "123456789"}, "0": "zero"},
    "zero": {".": "dot", "e": "e", "E": "e"},
    "int": {**{d: "int" for d in _DIGITS}, ".": "dot", "e": "e", "E": "e"},
    "dot": {d: "frac" for d in _DIGITS},
    "frac": {**{d: "frac" for d in _DIGITS}, "e": "e", "E": "e"},
    "e": {"+": "esign", "-": "esign", **{d: "exp" for d in _DIGITS}},
    "esign": {d: "exp" for d in _DIGITS},
    "exp": {d: "exp" for d in _DIGITS},
}
NUMBER_ACCEPTING = {"zero", "int", "frac", "exp"}
_ROOT_DONE = ("root", "done")


class JsonPrefixAutomaton:
    """Steps a set of parser stacks one character at a time for one compiled schema."""

    def __init__(self, schema: CompiledSchema, max_whitespace: int = 1):
        self.schema = schema
        self.max_ws = max_whitespace

    def initial(self) -> State:
        return frozenset([(("root", "value"), ("val", 0, 0))])

    def step(self, state: State, char: str) -> State:
        """The state after `char`; empty when no valid completion remains."""
        out = set()
        for stack in state:
            for reachable in self._closure(stack):
                for new_top in self._consume(reachable[-1], char):
                    new = reachable[:-1] + new_top
                    if not self._dead_end(new):
                        out.add(new)
        return frozenset(out)

    def feed(self, state: State, text: str) -> State:
        for char in text:
            state = self.step(state, char)
            if not state:
                break
        return state

    def is_complete(self, state: State) -> bool:
        return any(s[-1] == _ROOT_DONE for stack in state for s in self._closure(stack))

    # --- frames -------------------------------------------------------------------------------------
    def _closure(self, stack: tuple) -> list[tuple]:
        """The stack plus every stack reached by closing values that may end here."""
        out = [stack]
        while len(stack) > 1 and self._accepting(stack[-1]):
            parent = self._after_value(stack[-2], stack[-1])
            if parent is None:
                break
            stack = stack[:-2] + (parent,)
            out.append(stack)
        return out

    def _dead_end(self, stack: tuple) -> bool:
        """A finished value its parent refuses (a duplicate key): prune it now, not one character later."""
        top = stack[-1]
        finished = (top[0] == "str" and top[5]) or (top[0] in ("obj", "arr") and top[3] == "closed")
        return finished and len(self._closure(stack)) == 1

    @staticmethod
    def _accepting(frame: tuple) -> bool:
        kind = frame[0]
        if kind == "lit":
            return any(len(option) == frame[2] for option in frame[1])
        if kind == "str":
            return frame[5]
        if kind == "num":
            return frame[2] in NUMBER_ACCEPTING
        if kind in ("obj", "arr"):
            return frame[3] == "closed"
        return False

    def _after_value(self, parent: tuple, child: tuple) -> tuple | None:
        kind = parent[0]
        if kind == "root":
            return _ROOT_DONE
        if kind == "arr":
            _, node, count, _, _ = parent
            return ("arr", node, count + 1, "after", 0)
        _, node, used, phase, key, _ = parent
        if phase == "key":
            key = json.loads(self._key_text(child))
            return None if key in used else ("obj", node, used, "colon", key, 0)
        return ("obj", node, used | {key}, "after", None, 0)

    @staticmethod
    def _key_text(child: tuple) -> str:
        if child[0] == "lit":
            return next(option for option in child[1] if len(option) == child[2])
        return '"' + child[4] + '"'

    def _consume(self, frame: tuple, c: str) -> list[tuple]:
        kind = frame[0]
        if kind == "val":
            return self._value(frame, c)
        if kind == "lit":
            options = tuple(o for o in frame[1] if len(o) > frame[2] and o[frame[2]] == c)
            return [(("lit", options, frame[2] + 1),)] if options else []
        if kind == "str":
            return self._string(frame, c)
        if kind == "num":
            nxt = _NUM_NEXT[frame[2]].get(c)
            if nxt is None or (frame[1] and nxt in ("dot", "e")):
                return []
            return [(("num", frame[1], nxt),)]
        if kind == "obj":
            return self._object(frame, c)
        if kind == "arr":
            return self._array(frame, c)
        return []

    def _value(self, frame: tuple, c: str) -> list[tuple]:
        _, node_id, ws = frame
        if c in _WS:
            return [(("val", node_id, ws + 1),)] if ws < self.max_ws else []
        if self.schema.shortest[node_id] is None:  # no instance: a value begun here could never be finished
            return []
        node = self.schema.nodes[node_id]
        if node.kind == "anyof":
            return [new for alt in node.alternatives for new in self._value(("val", alt, ws), c)]
        kind = node.kind
        out = []
        literals = node.literals if kind == "literal" else ("true", "false", "null") if kind == "any" else ()
        options = tuple(o for o in literals if o[0] == c)
        if options:
            out.append((("lit", options, 1),))
        if c == '"' and kind in ("string", "any"):
            out.append((("str", node_id, 0, 0, None, False),))
        if kind in ("number", "integer", "any") and (c == "-" or c in _DIGITS):
            state = "sign" if c == "-" else "zero" if c == "0" else "int"
            out.append((("num", kind == "integer", state),))
        if c == "{" and kind in ("object", "any"):
            out.append((("obj", node_id, frozenset(), "open", None, 0),))
        if c == "[" and kind in ("array", "any"):
            out.append((("arr", node_id, 0, "open", 0),))
        return out

    def _string(self, frame: tuple, c: str) -> list[tuple]:
        _, node_id, n, esc, raw, closed = frame
        if closed:
            return []
        node = self.schema.nodes[node_id]
        counted = node.kind == "string" and (node.min_length > 0 or node.max_length is not None)
        grow = n + 1 if counted else n
        new_raw = None if raw is None else raw + c
        if esc == -1:
            if c == "u":
                return [(("str", node_id, n, 4, new_raw, False),)]
            return [(("str", node_id, grow, 0, new_raw, False),)] if c in '"\\/bfnrt' else []
        if esc > 0:
            if c not in _HEX:
                return []
            return [(("str", node_id, grow if esc == 1 else n, esc - 1, new_raw, False),)]
        if c == '"':
            return [(("str", node_id, n, 0, raw, True),)] if not counted or n >= node.min_length else []
        if ord(c) < 0x20 or (counted and node.max_length is not None and n >= node.max_length):
            return []
        if c == "\\":
            return [(("str", node_id, n, -1, new_raw, False),)]
        return [(("str", node_id, grow, 0, new_raw, False),)]

    def object_shape(self, node_id: int) -> tuple[dict[str, int], frozenset[str], int | None]:
        """Properties, required keys and the schema of other keys, as decoded: an unconstrained value's object takes
        any, one that lists its keys alone (`Node.listed_only`) none."""
        node = self.schema.nodes[node_id]
        if node.kind == "any":
            return {}, frozenset(), self.schema.ANY
        return node.properties, node.required, None if node.listed_only else node.additional

    def _object(self, frame: tuple, c: str) -> list[tuple]:
        _, node_id, used, phase, key, ws = frame
        if phase in ("key", "value", "closed"):
            return []
        if c in _WS:
            return [(("obj", node_id, used, phase, key, ws + 1),)] if ws < self.max_ws else []
        props, required, additional = self.object_shape(node_id)
        free_keys = [k for k in props if k not in used]
        can_add = additional is not None or bool(free_keys)
        if phase == "colon":
            if c != ":":
                return []
            sub = props.get(key, additional)
            return [(("obj", node_id, used, "value", key, 0), ("val", sub, 0))]
        if c == "}" and phase in ("open", "after") and required <= used:
            return [(("obj", node_id, used, "closed", None, 0),)]
        if c == "," and phase == "after" and can_add:
            return [(("obj", node_id, used, "next", None, 0),)]
        if c == '"' and phase in ("open", "next") and can_add:
            waiting = ("obj", node_id, used, "key", None, 0)
            if additional is None:
                options = tuple(json.dumps(k, ensure_ascii=False) for k in free_keys)
                return [(waiting, ("lit", options, 1))]
            return [(waiting, ("str", self.schema.ANY, 0, 0, "", False))]
        return []

    def _array(self, frame: tuple, c: str) -> list[tuple]:
        _, node_id, count, phase, ws = frame
        if phase in ("value", "closed"):
            return []
        node = self.schema.nodes[node_id]
        items = self.schema.ANY if node.kind == "any" else node.items
        min_items = 0 if node.kind == "any" else node.min_items
        max_items = None if node.kind == "any" else node.max_items
        room = max_items is None or count < max_items
        if c in _WS and phase == "after":
            return [(("arr", node_id, count, phase, ws + 1),)] if ws < self.max_ws else []
        if c == "]" and phase in ("open", "after") and count >= min_items:
            return [(("arr", node_id, count, "closed", 0),)]
        if c == "," and phase == "after" and room:
            return [(("arr", node_id, count, "value", 0), ("val", items, 0))]
        if phase == "open" and room:
            waiting = ("arr", node_id, count, "value", 0)
            return [(waiting, *new) for new in self._value(("val", items, ws), c)]
        return []
