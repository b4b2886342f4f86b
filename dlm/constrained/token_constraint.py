"""Token-level JSON-schema constraint: which vocabulary entries keep a valid completion possible.

The diffusion engine commits, inside a constrained span, only the leftmost masked position, with the
argmax over `allowed_token_ids()`. Allowed sets are cached per automaton state (many positions share a
state, e.g. the inside of a free string) and tokens are prefiltered by their first character.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from functools import lru_cache
from typing import Any

from dlm.constrained.completion import UNREACHABLE, CompletionCost
from dlm.constrained.json_prefix import JsonPrefixAutomaton, State
from dlm.constrained.schema import CompiledSchema

_MAX_CACHED_STEPS = 500_000
COUNTED_TOKENS = 8  # tokens whose completion is counted in tokens when their characters do not fit the budget


class TokenGrammar:
    """A schema bound to a vocabulary; shared by every constraint over that pair (it holds the caches)."""

    def __init__(self, schema: dict[str, Any] | bool, vocab: Sequence[str],
                 stop_token_ids: Iterable[int] = (), max_whitespace: int = 1):
        self.vocab = list(vocab)
        self.automaton = JsonPrefixAutomaton(CompiledSchema(schema, writable_characters(self.vocab)), max_whitespace)
        self.stop_token_ids = tuple(sorted(set(stop_token_ids)))
        self._by_first: dict[str, list[int]] = {}
        self._ids_by_text: dict[str, int] = {}
        for token_id, text in enumerate(self.vocab):
            if text and token_id not in self.stop_token_ids:
                self._by_first.setdefault(text[0], []).append(token_id)
                self._ids_by_text.setdefault(text, token_id)
        self._longest_text = max(map(len, self._ids_by_text), default=0)
        self._steps: dict[tuple[State, str], State] = {}
        self._allowed: dict[State, tuple[int, ...]] = {}
        self.cost = CompletionCost(self.automaton)
        self._chars_after: dict[State, tuple[int, ...]] = {}
        self._to_finish: dict[State, int] = {}

    def step(self, state: State, char: str) -> State:
        key = (state, char)
        nxt = self._steps.get(key)
        if nxt is None:
            if len(self._steps) > _MAX_CACHED_STEPS:
                self._steps.clear()
            nxt = self._steps[key] = self.automaton.step(state, char)
        return nxt

    def feed(self, state: State, text: str) -> State:
        for char in text:
            state = self.step(state, char)
            if not state:
                break
        return state

    def allowed(self, state: State) -> tuple[int, ...]:
        """Token ids whose text keeps `state` completable, plus the stop ids once it is complete."""
        cached = self._allowed.get(state)
        if cached is not None:
            return cached
        ids: list[int] = []
        for first, candidates in self._by_first.items():
            after_first = self.step(state, first)
            if not after_first:
                continue
            ids.extend(t for t in candidates if self.feed(after_first, self.vocab[t][1:]))
        if self.automaton.is_complete(state):
            ids.extend(self.stop_token_ids)
        result = self._allowed[state] = tuple(sorted(ids))
        return result

    def tokens_to_finish(self, state: State) -> int:
        """Tokens that surely complete `state`: a walk along one of its shortest completions (in characters)
        taking the longest token that stays on it at every step. An upper bound, so a budget checked with it
        is always met; counting each character as a token overstates it several times over (a unit
        conversion's required arguments are 70 characters, and a budget of 64 tokens ruled that tool out).
        The walk keeps to the text it starts on, which is the rest's shortest completion at every step too:
        taking each next state's own completion rebuilt one a token, 9 s for 40 tokens under minItems 10000."""
        if (known := self._to_finish.get(state)) is not None:
            return known
        text, start, path = self.cost.text(state), 0, []
        while (known := self._to_finish.get(state)) is None:
            end = None if text is None else self._token_end(text, start)
            if end is None:  # complete, dead, or (never for byte-level vocabularies) no token on the path
                known = self._to_finish[state] = UNREACHABLE if text is None else len(text) - start
                break
            path.append(state)
            state, start = self.feed(state, text[start:end]), end
        for steps, visited in enumerate(reversed(path), start=1):
            self._to_finish[visited] = min(known + steps, UNREACHABLE)
        return min(known + len(path), UNREACHABLE)

    def _token_end(self, text: str, start: int) -> int | None:
        """Where the longest token that spells `text` from `start` on ends."""
        return next((end for end in range(min(len(text), start + self._longest_text), start, -1)
                     if text[start:end] in self._ids_by_text), None)

    def path_token(self, state: State) -> int | None:
        """The longest token that spells the start of a shortest completion of `state`."""
        text = self.cost.text(state) or ""
        end = self._token_end(text, 0)
        return None if end is None else self._ids_by_text[text[:end]]

    def allowed_within(self, state: State, budget: int) -> tuple[int, ...]:
        """The allowed ids after which the JSON can still be finished and ended within `budget` tokens, this
        one included: a non-stop token must leave a state that :meth:`tokens_to_finish` completes in at most
        `budget` - 2 tokens, so one token always remains for the stop.

        Characters first: each is a token, so a token whose next state's shortest completion has fewer
        characters than the budget surely fits. Counting tokens walks a token's whole way to the end, and for
        every token of a free string that was a minute a position (json_object at max_tokens 8). So tokens
        are counted only for the ones the characters leave in doubt: the token on the shortest completion's
        path (which keeps the JSON closable: it finishes in one token fewer than this state) and the
        :data:`COUNTED_TOKENS` longest others that the longest tokens could finish in time; the rest of the
        doubtful ones are left out."""
        ids = self.allowed(state)
        chars = self._chars_after.get(state)
        if chars is None:
            chars = self._chars_after[state] = tuple(
                -1 if t in self.stop_token_ids else self.cost.of(self.feed(state, self.vocab[t])) for t in ids)
        if budget - 1 > max(chars, default=0):
            return ids
        sure = [t for t, cost in zip(ids, chars, strict=True) if cost < budget - 1]
        hopeless = min((budget - 1) * self._longest_text, UNREACHABLE)  # too long even in the longest tokens
        doubtful = sorted((t for t, cost in zip(ids, chars, strict=True) if budget - 1 <= cost < hopeless),
                          key=lambda t: len(self.vocab[t]), reverse=True)[:COUNTED_TOKENS]
        path = self.path_token(state)
        if path is not None and path not in doubtful and path not in sure:
            doubtful.append(path)
        counted = [t for t in doubtful if self.tokens_to_finish(self.feed(state, self.vocab[t])) < budget - 1]
        return tuple(sorted(sure + counted)) or ids  # no completion fits any more: the caller reports the length stop


@lru_cache(maxsize=32)
def _grammar(schema_json: str, vocab: tuple[str, ...], stop_ids: tuple[int, ...], max_ws: int) -> TokenGrammar:
    return TokenGrammar(json.loads(schema_json), vocab, stop_ids, max_ws)


class JsonSchemaConstraint:
    """The decoding state of one constrained span: feed it committed tokens, ask what may come next.

    `instead_ids` may stand first in place of the whole JSON, and end the span at once: a tool call's opening
    tag, where an answer is either a call or JSON under response_format. `stopped_by` tells which id ended it."""

    def __init__(self, schema: dict[str, Any] | bool, vocab: Sequence[str],
                 stop_token_ids: Iterable[int] = (), max_whitespace: int = 1, instead_ids: Iterable[int] = ()):
        self.grammar = _grammar(json.dumps(schema, sort_keys=True), tuple(vocab),
                                tuple(sorted(set(stop_token_ids))), max_whitespace)
        self.instead_ids = tuple(instead_ids)
        self.state = self.grammar.automaton.initial()
        self.text = ""
        self.stopped = False
        self.stopped_by: int | None = None

    def allowed_token_ids(self, budget: int | None = None) -> tuple[int, ...]:
        """What may come next; with `budget` (tokens left, this one included) only what can still close the
        JSON in time."""
        if self.stopped:
            return ()
        ids = self.grammar.allowed(self.state) if budget is None else self.grammar.allowed_within(self.state, budget)
        return ids if self.text else ids + self.instead_ids

    def is_allowed(self, token_id: int) -> bool:
        if self.stopped:
            return False
        if token_id in self.instead_ids:
            return not self.text
        if token_id in self.grammar.stop_token_ids:
            return self.is_complete()
        return bool(self.grammar.feed(self.state, self.grammar.vocab[token_id]))

    def advance(self, token_id: int) -> None:
        """Commit one token; raises ValueError when it breaks the schema."""
        if not self.is_allowed(token_id):
            raise ValueError(f"token {token_id} ({self.grammar.vocab[token_id]!r}) breaks the schema after "
                             f"{self.text!r}")
        if token_id in self.grammar.stop_token_ids or token_id in self.instead_ids:
            self.stopped, self.stopped_by = True, token_id
            return
        self.state = self.grammar.feed(self.state, self.grammar.vocab[token_id])
        self.text += self.grammar.vocab[token_id]

    def is_complete(self) -> bool:
        """The text so far is a whole instance of the schema."""
        return self.grammar.automaton.is_complete(self.state)

    def copy(self) -> JsonSchemaConstraint:
        clone = object.__new__(JsonSchemaConstraint)
        clone.__dict__.update(self.__dict__)  # all immutable: the grammar is shared, the rest replaced on advance
        return clone


def writable_characters(vocab: Sequence[str]) -> frozenset[str]:
    """The characters some token's text holds whole (a byte-level token of part of one decodes to U+FFFD)."""
    return frozenset("".join(vocab)) - {"\ufffd"}


def vocab_strings(tokenizer: Any) -> list[str]:
    """Decoded text per id of a `tokenizers.Tokenizer`; special tokens map to '' so they are never allowed."""
    return [tokenizer.decode([i], skip_special_tokens=True) for i in range(tokenizer.get_vocab_size())]
