"""The shortest text that turns a JSON prefix into a whole instance of its schema.

A constrained decode with a token budget must close its JSON before the budget runs out: otherwise an open
string runs to `max_tokens` and the caller gets text no parser accepts. Every character JSON needs is a
single-byte token in byte-level vocabularies, so a prefix whose shortest completion is at most the tokens
left can always be finished, and a token is safe to commit when the state after it still fits.

The completion is built as text, not only counted: the token-level bound on the tokens still needed
(`TokenGrammar.tokens_to_finish`) cuts it into tokens, where searching for a character that shortens the
completion cost a cost evaluation per character tried (seconds a position on an object of 30 free-keyed
members). Only its length is cached per state: a text runs to the shortest instance of what is still open,
thousands of characters under a large minItems, and caching one per state weighed had filled gigabytes. The
tests check that it is exact: its length is zero exactly when the prefix is complete, drops by at most one per
character, and the automaton accepts it as a whole instance.
"""

from __future__ import annotations

import json
from functools import lru_cache

from dlm.constrained.json_prefix import NUMBER_ACCEPTING, JsonPrefixAutomaton, State
from dlm.constrained.schema import FILLER, CompiledSchema, shortest_text

UNREACHABLE = 1 << 30  # a cost no budget meets (an unsatisfiable sub-schema)
_MAX_CACHED_STATES = 200_000
_FRESH_KEY_CHARS = "abcdefghijklmnopqrstuvwxyz"

Text = str | None  # None: no completion exists


def _join(*parts: Text) -> Text:
    return None if any(part is None for part in parts) else "".join(parts)  # type: ignore[arg-type]


@lru_cache(maxsize=1 << 14)
def _key_text(key: str) -> str:
    return json.dumps(key, ensure_ascii=False)


def admits_a_value(schema: CompiledSchema) -> bool:
    """Whether any JSON value is an instance: not when a minimum exceeds its maximum, or a required key's
    schema admits nothing. A decoder given such a schema would find no token to commit, midway."""
    return schema.shortest[0] is not None


class CompletionCost:
    """Shortest completions for one schema, their lengths cached per automaton state."""

    def __init__(self, automaton: JsonPrefixAutomaton):
        self.automaton = automaton
        self.schema: CompiledSchema = automaton.schema
        self.value = self.schema.shortest
        self._members: dict[tuple[int, str], Text] = {}
        self._lengths: dict[State, int] = {}
        self._missing: dict[tuple[int, frozenset], str | None] = {}

    def of(self, state: State) -> int:
        """The fewest characters completing `state` (UNREACHABLE for a dead state)."""
        cost = self._lengths.get(state)
        if cost is None:
            if len(self._lengths) > _MAX_CACHED_STATES:
                self._lengths.clear()
            text = self.text(state)
            cost = self._lengths[state] = UNREACHABLE if text is None else len(text)
        return cost

    def text(self, state: State) -> Text:
        """A shortest completion of `state` (None for a dead state)."""
        return shortest_text(self._stack(stack) for stack in state)

    def _sub(self, node_id: int, key: str) -> int | None:
        properties, _, additional = self.automaton.object_shape(node_id)
        return properties.get(key, additional)

    def _member(self, node_id: int, key: str) -> Text:
        """`"key":value` with the shortest value the object allows under that key."""
        if (node_id, key) not in self._members:
            sub = self._sub(node_id, key)
            self._members[node_id, key] = None if sub is None else _join(_key_text(key), ":", self.value[sub])
        return self._members[node_id, key]

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
            return shortest_text(option[frame[2]:] for option in frame[1])
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
        return pending + FILLER * max(0, min_length - n - (1 if pending else 0)) + '"'

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
        return shortest_text(options)

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
            return shortest_text(_join(option[done:], self._object_rest(("obj", node_id, used, "colon", json.loads(option), 0)))
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
        return shortest_text(options)
