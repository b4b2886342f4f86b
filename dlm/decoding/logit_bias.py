"""Copy biases: additive logit biases that steer a reply toward the phrases it is expected to repeat.

A small model copies a rare name from its context imperfectly: it writes "cohelhares" for the "copenhagen" a
tool just returned, or "scheelye" for the "schedule" the caller asked it to say back. Copy biasing is the text
counterpart of a speech recogniser's contextual biasing (hotwords): the phrases the context offers (a tool
result's values, the caller's words) are tokenized, and a position whose left neighbours are already committed
as the start of such a phrase gets the phrase's next token favoured by ``follow``. The longest committed run
(up to :data:`CONTEXT` tokens) that some phrase contains picks the continuation, so a token that occurs in a
phrase more than once ("," in "f, a, m, i, l, y") favours the token after *this* occurrence. Within one pass
the rows are biased left to right, each seeing its masked left neighbours as their likeliest tokens, so a run
of positions committed together copies as one.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # annotations only: voice.config reads COPY_FOLLOW without loading torch
    import torch

CONTEXT = 3  # committed tokens to the left that pick a phrase's continuation
# The copy bias a reply gets (a logit, so e^4 = 55 times the odds): on the demo checkpoint, held-out answers
# 80.3% -> 82.8% with calls grounded, "say back" 40% -> 70%, at the same 3.8 tokens per pass (following
# committed neighbours only, factor 0.4); 8 gained one dialogue more after tool results and lost two after the
# caller's words (python -m dlm.eval --limit 200, README).
COPY_FOLLOW = 4.0
# After a tool's result, a reply nearly always says it: the first token of each of the result's phrases gets this
# wherever no phrase is being followed, so the copy can start right ("sor, a, m, i, l, y" -> "f, a, m, ...").
# Held-out answers with calls grounded 84.3% -> 85.9%, 87.8% -> 89.2%, 82.7% -> 84.1% on the three samples
# (README) at +2. Only where a word may begin (after a space or a line break): 90.9% -> 91.4%, 91.7% -> 91.9%,
# 86.1% unchanged, with today's grounding; and then +3 rather than +2: 92.4% and 87.1% on the 200 and the 300
# (+4 the same). Not after the caller's words: those a reply repeats only when asked to.
COPY_START = 3.0


@dataclass(frozen=True)
class LogitBias:
    """What to add to a generation's logits: ``follow`` to a copy phrase's next token, ``start`` to a phrase's
    first token where no phrase is being followed and a word may begin (after one of ``word_breaks``)."""

    follow: float = 0.0
    continuations: Mapping[tuple[int, ...], frozenset[int]] = field(default_factory=dict)
    start: float = 0.0
    starts: frozenset[int] = frozenset()
    word_breaks: frozenset[int] = frozenset()

    @classmethod
    def copying(cls, phrases: Iterable[str], encode: Callable[[str], list[int]], follow: float,
                start: float = 0.0) -> LogitBias:
        """Copy biases toward ``phrases``, each tokenized as it reads mid-sentence (after a space) and at the
        start of one. A run of spaces alone picks no continuation: it would favour every word of every phrase
        wherever a word starts. A phrase starts after a space or a line break only: favoured right after a word,
        its first piece would be glued to it ("you havefif-")."""
        spaces = set(encode(" "))
        continuations: dict[tuple[int, ...], set[int]] = defaultdict(set)
        starts: set[int] = set()
        for phrase in phrases:
            for ids in (encode(" " + phrase), encode(phrase)):
                first = next((t for t in ids if t not in spaces), None)  # the phrase's first piece
                if first is not None:
                    starts.add(first)
                for i in range(1, len(ids)):
                    for n in range(1, min(CONTEXT, i) + 1):
                        if not spaces.issuperset(ids[i - n:i]):
                            continuations[tuple(ids[i - n:i])].add(ids[i])
        return cls(follow, {k: frozenset(v) for k, v in continuations.items()}, start, frozenset(starts),
                   frozenset([*spaces, *encode("\n")]))

    def __bool__(self) -> bool:
        return bool(self.follow and self.continuations) or bool(self.start and self.starts)

    def apply(self, logits: torch.Tensor, line: list[int | None], positions: Sequence[int]) -> torch.Tensor:
        """``logits`` [rows, V] biased in place. ``line`` holds the tokens up to and across the rows' positions
        (None where masked) and ``positions[r]`` is row r's index in it, rows left to right. A masked left
        neighbour that is itself a row counts as that row's likeliest token once biased: a pass that commits
        a run of positions together then follows a phrase along the whole run, not just from its first one."""
        line = list(line)
        likeliest = logits.argmax(-1).tolist()
        for row, at in enumerate(positions):
            nexts = self.continuation(line[max(0, at - CONTEXT):at]) if self.follow else frozenset()
            word_begins = at > 0 and line[at - 1] in self.word_breaks
            favoured, value = (nexts, self.follow) if nexts else (self.starts if word_begins else (), self.start)
            if favoured and value:
                logits[row, list(favoured)] += value
                likeliest[row] = int(logits[row].argmax())
            if line[at] is None:
                line[at] = likeliest[row]
        return logits

    def continuation(self, context: Sequence[int | None]) -> frozenset[int]:
        """The next tokens of the phrases that contain the longest committed tail of ``context``."""
        best: frozenset[int] = frozenset()
        for n in range(1, min(CONTEXT, len(context)) + 1):
            tail = tuple(context[len(context) - n:])
            if None in tail:
                break
            best = self.continuations.get(tail, best)  # type: ignore[arg-type]
        return best


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict | list):
        for item in value.values() if isinstance(value, dict) else value:
            yield from _strings(item)


def copy_phrases(messages: Sequence[dict[str, Any]]) -> list[str]:
    """What a reply to ``messages`` is expected to repeat: a tool result's string values when it follows one (a
    capital, a spelling); the caller's words when it answers them (a name to look up, words to say back), and
    the latest tool result's values too, which a follow-up may ask for again ("spell it again")."""
    if not messages:
        return []
    last = messages[-1]
    content = last.get("content")
    if not isinstance(content, str) or not content.strip():
        return []
    if last.get("role") == "user":
        earlier = next((m for m in reversed(messages) if m.get("role") == "tool"), None)
        return [content, *(copy_phrases([earlier]) if earlier is not None else [])]
    if last.get("role") == "tool":
        try:
            return [s for s in _strings(json.loads(content)) if s.strip()]
        except json.JSONDecodeError:
            return [content]
    return []


def reply_copy_bias(messages: Sequence[dict[str, Any]], encode: Callable[[str], list[int]],
                    follow: float = COPY_FOLLOW) -> LogitBias | None:
    """The copy bias of the reply to ``messages`` (None: nothing to copy, or ``follow`` is 0, which turns the
    start bias off too); after a tool's result it starts its phrases too (:data:`COPY_START`)."""
    phrases = copy_phrases(messages)
    if not phrases or not follow:
        return None
    return LogitBias.copying(phrases, encode, follow, COPY_START if messages[-1].get("role") == "tool" else 0.0)
