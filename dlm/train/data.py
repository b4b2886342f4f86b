"""The synthetic voice-assistant corpus: seeded dialogues with a held-out split that differs from training by
request template and by values, so evaluation measures generalisation rather than recall.

Every tool result in the corpus comes from running the real tool (`dlm.tools`) against a session whose clock
is fixed per dialogue, so the data can never disagree with what the assistant sees at run time.
"""

from __future__ import annotations

import json
import random
import zlib
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from dlm.tools import ToolSession, tool_specs

SPLITS = ("train", "heldout")
HELDOUT_EVERY = 5  # one template in five, and about one value in five, belongs to the held-out split
SYSTEM_PROMPTS = [
    "you are a helpful voice assistant. keep answers short.",
    "you are a friendly voice assistant. answer in one short sentence.",
    "you are a voice assistant running on this device.",
]
# The share of full-mix dialogues whose final request follows an unrelated earlier one, as in a conversation:
# without them a model trained on one request per dialogue calls the previous turn's tool again ("what time is
# it" after a capital's turn became a `country_capital` call). The held-out split always draws this share.
EARLIER_TURN = 0.3


@dataclass
class Example:
    """One dialogue. The final turn is what evaluation asks about: `call` is its expected tool call (or None)
    and `facts` the strings one of which its spoken reply must contain."""

    intent: str
    messages: list[dict[str, Any]]
    call: dict[str, Any] | None
    facts: tuple[str, ...]
    tools: list[dict[str, Any]] | None = None

    def reply_is_correct(self, reply: str) -> bool:
        return any(fact in reply for fact in self.facts)

    def last_user_index(self) -> int:
        return max(i for i, m in enumerate(self.messages) if m["role"] == "user")


class Context:
    """What an intent generator needs: the split, a seeded RNG, a tool session on a fixed clock."""

    def __init__(self, split: str, rng: random.Random):
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
        self.split = split
        self.rng = rng
        start = datetime(2024, 1, 1, tzinfo=timezone.utc)
        self.now = start + timedelta(minutes=rng.randrange(4 * 365 * 24 * 60))
        self.session = ToolSession(clock=lambda: self.now)
        self.messages: list[dict[str, Any]] = []

    def template(self, templates: list[str]) -> str:
        """A template from this split's share of the list (every fifth one is held out)."""
        held = self.split == "heldout"
        pool = [t for i, t in enumerate(templates) if (i % HELDOUT_EVERY == HELDOUT_EVERY - 1) == held]
        return self.rng.choice(pool or templates)

    def value(self, sample: Callable[[random.Random], Any], key: Callable[[Any], str] = str) -> Any:
        """Draw values until one falls in this split (by a stable hash of its key)."""
        v = self.try_value(sample, key)
        if v is None:
            raise RuntimeError("value sampler cannot reach the requested split")
        return v

    def try_value(self, sample: Callable[[random.Random], Any], key: Callable[[Any], str] = str) -> Any:
        """Like `value`, but None when a thousand draws all fall in the other split."""
        for _ in range(1000):
            v = sample(self.rng)
            if (zlib.crc32(key(v).encode()) % HELDOUT_EVERY == 0) == (self.split == "heldout"):
                return v
        return None

    def choice(self, options: list[Any]) -> Any:
        return self.rng.choice(options)

    def user(self, text: str) -> None:
        self.messages.append({"role": "user", "content": text})

    def say(self, text: str) -> None:
        self.messages.append({"role": "assistant", "content": text})

    def call(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """Record an assistant tool call and the real tool's result; returns the parsed result."""

        self.messages.append({"role": "assistant", "content": "",
                              "tool_calls": [{"type": "function",
                                              "function": {"name": name, "arguments": arguments}}]})
        result = self.session.run_safely(name, arguments)
        self.messages.append({"role": "tool", "name": name, "content": result})
        return json.loads(result)


def check_mix(intents: Collection[str], weights: Mapping[str, float]) -> None:
    """Refuse intents the generator does not know and negative weights (a ValueError naming them)."""
    from dlm.train.intents import INTENTS

    unknown = (set(intents) | set(weights)) - set(INTENTS)
    if unknown:
        raise ValueError(f"unknown intents {', '.join(sorted(unknown))}; known: {', '.join(INTENTS)}")
    if any(w < 0 for w in weights.values()):
        raise ValueError("intent weights must not be negative")


def generate(split: str, count: int, seed: int, intents: Collection[str] = (),
             weights: Mapping[str, float] | None = None, earlier_turn: float = EARLIER_TURN) -> list[Example]:
    """`count` dialogues of `split`, the same for the same seed; `intents` narrows the final turn's intent
    (for probes that isolate one skill), empty means the full mix; `weights` overrides the mix's weights
    of some intents and `earlier_turn` the share of full-mix dialogues that hold an unrelated request before
    the final one (a training run's emphasis; evaluation keeps the defaults)."""
    from dlm.train.intents import INTENTS

    weights = weights or {}
    check_mix(intents, weights)
    rng = random.Random(f"{seed}:{split}")
    names = list(intents or INTENTS)
    mix = [weights.get(n, INTENTS[n][0]) for n in names]
    examples = []
    for _ in range(count):
        ctx = Context(split, random.Random(rng.getrandbits(64)))
        if ctx.rng.random() < 0.3:
            ctx.messages.append({"role": "system", "content": ctx.choice(SYSTEM_PROMPTS)})
        if ctx.rng.random() < 0.12:
            INTENTS["greeting"][1](ctx)
        if not intents and ctx.rng.random() < earlier_turn:
            INTENTS[ctx.rng.choices(names, mix)[0]][1](ctx)
        intent = ctx.rng.choices(names, mix)[0]
        call, fact = INTENTS[intent][1](ctx)
        tools = tool_specs() if ctx.rng.random() < 0.3 else None
        facts = (fact,) if isinstance(fact, str) else tuple(fact)
        examples.append(Example(intent, ctx.messages, call, facts, tools))
    return examples
