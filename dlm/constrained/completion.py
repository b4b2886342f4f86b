"""The fewest characters that turn a JSON prefix into a whole instance of its schema.

A constrained decode with a token budget must close its JSON before the budget runs out: otherwise an open
string runs to `max_tokens` and the caller gets text no parser accepts. Every character JSON needs is a
single-byte token in byte-level vocabularies, so a prefix whose shortest completion is at most the tokens
left can always be finished, and a token is safe to commit when the state after it still fits.

Costs are exact (the tests check that a cost is zero exactly when the prefix is complete, drops by at most
one per character, and drops by one after some character, which together make it the shortest completion).
"""

from __future__ import annotations

import json

from dlm.constrained.json_prefix import NUMBER_ACCEPTING, JsonPrefixAutomaton, State
from dlm.constrained.schema import CompiledSchema

UNREACHABLE = 1 << 30  # a cost no budget meets (an unsatisfiable sub-schema)


def _key_text(key: str) -> str:
    return json.dumps(key, ensure_ascii=False)


class CompletionCost:
    """Shortest-completion lengths for one schema, cached per automaton state."""

    def __init__(self, automaton: JsonPrefixAutomaton):
        self.automaton = automaton
        self.schema: CompiledSchema = automaton.schema
        self.value = self._shortest_values()
        self._cache: dict[State, int] = {}

    def of(self, state: State) -> int:
        """The fewest characters completing `state` (UNREACHABLE for a dead state)."""
        cost = self._cache.get(state)
        if cost is None:
            cost = self._cache[state] = min((self._stack(s) for s in state), default=UNREACHABLE)
        return cost

    # --- whole values ---------------------------------------------------------------------------------
    def _shortest_values(self) -> list[int]:
        """Shortest instance length per node, by fixed point (schemas may refer to themselves)."""
        lengths = [UNREACHABLE] * len(self.schema.nodes)
        changed = True
        while changed:
            changed = False
            for node_id in range(len(lengths)):
                new = min(self._node_length(node_id, lengths), UNREACHABLE)
                if new < lengths[node_id]:
                    lengths[node_id], changed = new, True
        return lengths

    def _node_length(self, node_id: int, lengths: list[int]) -> int:
        node = self.schema.nodes[node_id]
        if node.kind in ("any", "number", "integer"):
            return 1  # 0
        if node.kind == "literal":
            return min(map(len, node.literals))
        if node.kind == "string":
            return 2 + node.min_length
        if node.kind == "anyof":
            return min(lengths[a] for a in node.alternatives)
        if node.kind == "array":
            return 2 + node.min_items * lengths[node.items] + max(0, node.min_items - 1)
        members = [self._member(node_id, key, lengths) for key in sorted(node.required)]
        return 2 + sum(members) + max(0, len(members) - 1)

    def _sub(self, node_id: int, key: str) -> int | None:
        properties, _, additional = self.automaton.object_shape(node_id)
        return properties.get(key, additional)

    def _member(self, node_id: int, key: str, lengths: list[int] | None = None) -> int:
        """Length of `"key":value` with the shortest value the object allows under that key."""
        sub = self._sub(node_id, key)
        if sub is None:
            return UNREACHABLE
        return len(_key_text(key)) + 1 + (lengths or self.value)[sub]

    # --- open frames ----------------------------------------------------------------------------------
    def _stack(self, stack: tuple) -> int:
        """The top frame's own rest, then what each enclosing frame still needs once its child is done."""
        top = stack[-1]
        if len(stack) > 1 and stack[-2][0] == "obj" and stack[-2][3] == "key":
            cost, depth = self._key_then_value(stack[-2], top), len(stack) - 2
        else:
            cost, depth = self._rest(top), len(stack) - 1
        for parent in reversed(stack[:depth]):
            cost += self._after_child(parent)
        return min(cost, UNREACHABLE)

    def _rest(self, frame: tuple) -> int:
        kind = frame[0]
        if kind == "val":
            return self.value[frame[1]]
        if kind == "lit":
            return min(len(option) - frame[2] for option in frame[1])
        if kind == "str":
            return self._string_rest(frame)
        if kind == "num":
            return 0 if frame[2] in NUMBER_ACCEPTING else 1
        if kind == "obj":
            return self._object_rest(frame)
        if kind == "arr":
            return self._array_rest(frame)
        return 0  # the finished root

    def _string_rest(self, frame: tuple) -> int:
        _, node_id, n, esc, _, closed = frame
        if closed:
            return 0
        node = self.schema.nodes[node_id]
        min_length = node.min_length if node.kind == "string" else 0
        pending = 0 if esc == 0 else 1 if esc == -1 else esc  # the rest of an escape counts as one char
        return pending + max(0, min_length - n - (1 if pending else 0)) + 1

    def _object_rest(self, frame: tuple) -> int:
        _, node_id, used, phase, key, _ = frame
        if phase == "closed":
            return 0
        if phase == "colon":
            sub = self._sub(node_id, key)
            return 1 + (self.value[sub] if sub is not None else UNREACHABLE) + self._object_after(node_id, used | {key})
        if phase == "after":
            return self._object_after(node_id, used)
        missing = self._missing_members(node_id, used)
        if missing:  # open or next: the missing members, comma-separated, then }
            return sum(missing) + len(missing) - 1 + 1
        if phase == "open":
            return 1
        return self._cheapest_extra_member(node_id, used) + 1  # after a comma one more member is owed

    def _missing_members(self, node_id: int, used: frozenset) -> list[int]:
        """The shortest `"key":value` of each required key not written yet."""
        return [self._member(node_id, k) for k in sorted(self.automaton.object_shape(node_id)[1] - used)]

    def _object_after(self, node_id: int, used: frozenset) -> int:
        """After a member: a comma before each missing member, then }."""
        return sum(1 + m for m in self._missing_members(node_id, used)) + 1

    def _cheapest_extra_member(self, node_id: int, used: frozenset) -> int:
        properties, _, additional = self.automaton.object_shape(node_id)
        options = [self._member(node_id, k) for k in properties if k not in used]
        if additional is not None:
            options.append(len('""') + 1 + self.value[additional])
        return min(options, default=UNREACHABLE)

    def _array_rest(self, frame: tuple) -> int:
        _, node_id, count, phase, _ = frame
        if phase == "closed":
            return 0
        node = self.schema.nodes[node_id]
        items, min_items = (self.schema.ANY, 0) if node.kind == "any" else (node.items, node.min_items)
        if phase == "open":
            return 1 + min_items * self.value[items] + max(0, min_items - 1)
        return max(0, min_items - count) * (1 + self.value[items]) + 1

    def _after_child(self, parent: tuple) -> int:
        """What `parent` needs once the value on top of it is complete."""
        if parent[0] == "root":
            return 0
        if parent[0] == "arr":
            _, node_id, count, _, ws = parent
            return self._array_rest(("arr", node_id, count + 1, "after", ws))
        _, node_id, used, _, key, _ = parent  # an object waiting on a member's value
        return self._object_after(node_id, used | {key})

    def _key_then_value(self, parent: tuple, key_frame: tuple) -> int:
        """A key being written, then its colon and value, then the rest of the object."""
        _, node_id, used, _, _, _ = parent
        if key_frame[0] == "lit":
            done = key_frame[2]
            return min(len(option) - done + self._object_rest(("obj", node_id, used, "colon", json.loads(option), 0))
                       for option in key_frame[1])
        return self._free_key_then_value(node_id, used, key_frame)

    def _free_key_then_value(self, node_id: int, used: frozenset, key_frame: tuple) -> int:
        """A key of an object with additionalProperties: it may still become any named key it is a prefix
        of, close as it stands, or end as a key nothing names (one more character, or the rest of an escape)."""
        properties, required, additional = self.automaton.object_shape(node_id)
        _, _, _, esc, raw, closed = key_frame
        if closed:
            key = json.loads('"' + raw + '"')
            return UNREACHABLE if key in used else self._object_rest(("obj", node_id, used, "colon", key, 0))
        typed = '"' + raw
        costs = [len(text) - len(typed) + self._object_rest(("obj", node_id, used, "colon", key, 0))
                 for key in set(properties) | required
                 if key not in used and (text := _key_text(key)).startswith(typed) and len(text) > len(typed)]
        unnamed = 1 + 1 + self.value[additional] + self._object_after(node_id, used)  # '":' + value + rest
        if esc == 0:
            now = json.loads(typed + '"')
            if now not in used:
                costs.append(1 + self._object_rest(("obj", node_id, used, "colon", now, 0)))
            costs.append(1 + unnamed)
        else:
            costs.append((1 if esc == -1 else esc) + unnamed)
        return min(costs)
