"""The shortest text that turns a JSON prefix into a whole instance of its schema.

A constrained decode with a token budget must close its JSON before the budget runs out: otherwise an open
string runs to `max_tokens` and the caller gets text no parser accepts. Every character JSON needs is a
single-byte token in byte-level vocabularies, so a prefix whose shortest completion is at most the tokens
left can always be finished, and a token is safe to commit when the state after it still fits.

The completion is built as text, not only counted: the token-level walk that bounds the tokens still needed
(`TokenGrammar.tokens_to_finish`) reads its next piece straight off it, where searching for a character
that shortens the completion cost a cost evaluation per character tried (seconds a position on an object of
30 free-keyed members). The tests check that it is exact: its length is zero exactly when the prefix is
complete, drops by at most one per character, and the automaton accepts it as a whole instance.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from functools import lru_cache

from dlm.constrained.json_prefix import NUMBER_ACCEPTING, JsonPrefixAutomaton, State
from dlm.constrained.schema import CompiledSchema

UNREACHABLE = 1 << 30  # a cost no budget meets (an unsatisfiable sub-schema)
_MAX_CACHED_STATES = 200_000
_FILLER = "a"  # a string character every string schema takes: minLength is the only constraint on content
_FRESH_KEY_CHARS = "abcdefghijklmnopqrstuvwxyz"

Text = str | None  # None: no completion exists


def _join(*parts: Text) -> Text:
    return None if any(part is None for part in parts) else "".join(parts)  # type: ignore[arg-type]


def _shortest(options: Iterable[Text]) -> Text:
    """The shortest text, the first in character order among equals: the same whatever order `options` come
    in (a state's stacks are a set), so decoding under a budget does not change from one process to the next."""
    return min((option for option in options if option is not None), key=lambda t: (len(t), t), default=None)


@lru_cache(maxsize=1 << 14)
def _key_text(key: str) -> str:
    return json.dumps(key, ensure_ascii=False)


def admits_a_value(schema: CompiledSchema) -> bool:
    """Whether any JSON value is an instance: not when a minimum exceeds its maximum, or a required key's
    schema admits nothing. A decoder given such a schema would find no token to commit, midway."""
    return CompletionCost(JsonPrefixAutomaton(schema)).value[0] is not None


class CompletionCost:
    """Shortest completions for one schema, cached per automaton state."""

    def __init__(self, automaton: JsonPrefixAutomaton):
        self.automaton = automaton
        self.schema: CompiledSchema = automaton.schema
        self._members: dict[tuple[int, str], Text] = {}
        self.value = self._shortest_values()
        self._cache: dict[State, Text] = {}
        self._missing: dict[tuple[int, frozenset], str | None] = {}

    def of(self, state: State) -> int:
        """The fewest characters completing `state` (UNREACHABLE for a dead state)."""
        text = self.text(state)
        return UNREACHABLE if text is None else len(text)

    def text(self, state: State) -> Text:
        """A shortest completion of `state` (None for a dead state)."""
        if state in self._cache:
            return self._cache[state]
        if len(self._cache) > _MAX_CACHED_STATES:
            self._cache.clear()
        text = self._cache[state] = _shortest(self._stack(stack) for stack in state)
        return text

    # --- whole values ---------------------------------------------------------------------------------
    def _shortest_values(self) -> list[Text]:
        """A shortest instance per node, by fixed point (schemas may refer to themselves)."""
        texts: list[Text] = [None] * len(self.schema.nodes)
        changed = True
        while changed:
            changed = False
            for node_id in range(len(texts)):
                new = self._node_text(node_id, texts)
                if new is not None and (texts[node_id] is None or len(new) < len(texts[node_id])):
                    texts[node_id], changed = new, True
        return texts

    def _node_text(self, node_id: int, texts: list[Text]) -> Text:
        node = self.schema.nodes[node_id]
        if node.kind in ("any", "number", "integer"):
            return "0"
        if node.kind == "literal":
            return min(node.literals, key=len)
        if node.kind == "string":
            if node.max_length is not None and node.max_length < node.min_length:
                return None
            return '"' + _FILLER * node.min_length + '"'
        if node.kind == "anyof":
            return _shortest(texts[a] for a in node.alternatives)
        if node.kind == "array":
            if node.max_items is not None and node.max_items < node.min_items:
                return None
            item = texts[node.items] if node.min_items else ""
            return None if item is None else "[" + ",".join([item] * node.min_items) + "]"
        members = [self._member(node_id, key, texts) for key in sorted(node.required)]
        return None if None in members else "{" + ",".join(members) + "}"  # type: ignore[arg-type]

    def _sub(self, node_id: int, key: str) -> int | None:
        properties, _, additional = self.automaton.object_shape(node_id)
        return properties.get(key, additional)

    def _member(self, node_id: int, key: str, texts: list[Text] | None = None) -> Text:
        """`"key":value` with the shortest value the object allows under that key (`texts`: the shortest
        values found so far, while they are being found; cached once they are known)."""
        if texts is None and (node_id, key) in self._members:
            return self._members[node_id, key]
        sub = self._sub(node_id, key)
        member = None if sub is None else _join(_key_text(key), ":", (self.value if texts is None else texts)[sub])
        if texts is None:
            self._members[node_id, key] = member
        return member

    # --- open frames ----------------------------------------------------------------------------------
    def _stack(self, stack: tuple) -> Text:
        """The top frame's own rest, then what each enclosing frame still needs once its child is done."""
        top = stack[-1]
        if len(stack) > 1 and stack[-2][0] == "obj" and stack[-2][3] == "key":
            rest, depth = self._key_then_value(stack[-2], top), len(stack) - 2
        else:
            rest, depth = self._rest(top), len(stack) - 1
        return _join(rest, *(self._after_child(parent) for parent in reversed(stack[:depth])))

    def _rest(self, frame: tuple) -> Text:
        kind = frame[0]
        if kind == "val":
            return self.value[frame[1]]
        if kind == "lit":
            return _shortest(option[frame[2]:] for option in frame[1])
        if kind == "str":
            return self._string_rest(frame)
        if kind == "num":
            return "" if frame[2] in NUMBER_ACCEPTING else "0"  # every unfinished number takes a digit
        if kind == "obj":
            return self._object_rest(frame)
        if kind == "arr":
            return self._array_rest(frame)
        return ""  # the finished root

    def _string_rest(self, frame: tuple) -> str:
        _, node_id, n, esc, _, closed = frame
        if closed:
            return ""
        node = self.schema.nodes[node_id]
        min_length = node.min_length if node.kind == "string" else 0
        pending = "" if esc == 0 else "n" if esc == -1 else "0" * esc  # an escape's rest: one character
        return pending + _FILLER * max(0, min_length - n - (1 if pending else 0)) + '"'

    def _object_rest(self, frame: tuple) -> Text:
        _, node_id, used, phase, key, _ = frame
        if phase == "closed":
            return ""
        if phase == "colon":
            sub = self._sub(node_id, key)
            return _join(":", None if sub is None else self.value[sub], self._object_after(node_id, used | {key}))
        if phase == "after":
            return self._object_after(node_id, used)
        missing = self._missing_members(node_id, used)
        if missing != "":  # open or next: the missing members, comma-separated, then }
            return None if missing is None else missing[1:] + "}"
        if phase == "open":
            return "}"
        return _join(self._cheapest_extra_member(node_id, used), "}")  # after a comma one more member is owed

    def _missing_members(self, node_id: int, used: frozenset) -> Text:
        """`,"key":value` with the shortest value for each required key not written yet. Cached per object
        and required keys used: the cost of every state inside the object asks for it."""
        required = self.automaton.object_shape(node_id)[1]
        cache_key = (node_id, used & required)
        if cache_key not in self._missing:
            if len(self._missing) > _MAX_CACHED_STATES:
                self._missing.clear()
            owed = sorted(required - used)
            self._missing[cache_key] = _join(*(_join(",", self._member(node_id, k)) for k in owed))
        return self._missing[cache_key]

    def _object_after(self, node_id: int, used: frozenset) -> Text:
        """After a member: a comma before each missing member, then }."""
        return _join(self._missing_members(node_id, used), "}")

    def _cheapest_extra_member(self, node_id: int, used: frozenset) -> Text:
        properties, _, additional = self.automaton.object_shape(node_id)
        options = [self._member(node_id, k) for k in properties if k not in used]
        if additional is not None:
            options.append(_join('"":', self.value[additional]))
        return _shortest(options)

    def _array_rest(self, frame: tuple) -> Text:
        _, node_id, count, phase, _ = frame
        if phase == "closed":
            return ""
        node = self.schema.nodes[node_id]
        items, min_items = (self.schema.ANY, 0) if node.kind == "any" else (node.items, node.min_items)
        owed = min_items if phase == "open" else max(0, min_items - count)
        if not owed:
            return "]"
        item = self.value[items]
        if item is None:
            return None
        return ("," * (phase != "open") + ",".join([item] * owed)) + "]"

    def _after_child(self, parent: tuple) -> Text:
        """What `parent` needs once the value on top of it is complete."""
        if parent[0] == "root":
            return ""
        if parent[0] == "arr":
            _, node_id, count, _, ws = parent
            return self._array_rest(("arr", node_id, count + 1, "after", ws))
        _, node_id, used, _, key, _ = parent  # an object waiting on a member's value
        return self._object_after(node_id, used | {key})

    def _key_then_value(self, parent: tuple, key_frame: tuple) -> Text:
        """A key being written, then its colon and value, then the rest of the object."""
        _, node_id, used, _, _, _ = parent
        if key_frame[0] == "lit":
            done = key_frame[2]
            return _shortest(_join(option[done:], self._object_rest(("obj", node_id, used, "colon", json.loads(option), 0)))
                             for option in key_frame[1])
        return self._free_key_then_value(node_id, used, key_frame)

    def _free_key_then_value(self, node_id: int, used: frozenset, key_frame: tuple) -> Text:
        """A key of an object with additionalProperties: it may still become any named key it is a prefix
        of, close as it stands, or end as a key nothing names (one more character, or the rest of an escape)."""
        properties, required, additional = self.automaton.object_shape(node_id)
        _, _, _, esc, raw, closed = key_frame

        def then_value(key: str) -> Text:
            return self._object_rest(("obj", node_id, used, "colon", key, 0))

        if closed:
            key = json.loads('"' + raw + '"')
            return None if key in used else then_value(key)
        typed = '"' + raw
        options = [_join(text[len(typed):], then_value(key)) for key in set(properties) | required
                   if key not in used and (text := _key_text(key)).startswith(typed) and len(text) > len(typed)]
        unnamed = _join('":', self.value[additional], self._object_after(node_id, used))  # close, value, rest
        if esc == 0:
            now = json.loads(typed + '"')
            if now not in used:
                options.append(_join('"', then_value(now)))
            fresh = next((c for c in _FRESH_KEY_CHARS if json.loads(typed + c + '"') not in used), None)
            if fresh is not None:  # the key as it stands may be taken: one more character makes a new one
                options.append(_join(fresh, unnamed))
        else:
            options.append(_join("n" if esc == -1 else "0" * esc, unnamed))
        return _shortest(options)
