"""Constrained decoding under a tight token budget: what checking the budget costs a position, against the
grammar alone, on a form of N required strings.

A `response_format` or tool schema with a small `max_tokens` must still close its JSON, so every position
keeps only the tokens after which the rest still fits (`TokenGrammar.allowed_within`), and that takes walks
to the end of the JSON. Where they are slow, one caller's request holds the model for everyone. The form is
decoded twice per kind of keys (closed: `additionalProperties: false`; free: `additionalProperties: true`): picking
the token the shortest completion starts with (a model filling the form tersely) and picking at random among
the allowed ones (a model that wanders, the costly case: every key it invents is a new state). The same
tokens are then replayed through a fresh grammar asking only what the schema allows, the baseline.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from dlm.cli_args import at_least_one, at_least_zero, checkpoint, output_path
from dlm.config import CheckpointError
from dlm.constrained.json_prefix import State
from dlm.constrained.token_constraint import TokenGrammar, vocab_strings


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--checkpoint", type=checkpoint, default=None, help="whose vocabulary (default: the demo's)")
    parser.add_argument("--fields", type=at_least_one, default=30, help="required string fields of the form")
    parser.add_argument("--slack", type=at_least_zero, default=8,
                        help="budget = the tokens the shortest instance needs + this many")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random picks")
    parser.add_argument("--json", type=output_path, help="also write the figures here")


def form_schema(fields: int, free_keys: bool) -> dict[str, Any]:
    names = [f"field_{i}" for i in range(fields)]
    schema: dict[str, Any] = {"type": "object", "properties": {n: {"type": "string"} for n in names},
                              "required": names}
    schema["additionalProperties"] = free_keys  # unsaid, the decoder writes the keys listed alone
    return schema


def decode(grammar: TokenGrammar, budget: int, pick: str, rng: random.Random) -> tuple[list[int], list[float]]:
    """Token ids picked under the budget until the stop, and the seconds each position's allowed set took."""
    state: State = grammar.automaton.initial()
    picked, seconds = [], []
    for left in range(budget, 0, -1):
        started = time.perf_counter()
        allowed = grammar.allowed_within(state, left)
        seconds.append(time.perf_counter() - started)
        path = grammar.path_token(state)
        token = path if pick == "path" and path in allowed else rng.choice(allowed)
        if token in grammar.stop_token_ids:
            break
        picked.append(token)
        state = grammar.feed(state, grammar.vocab[token])
    return picked, seconds


def replay(grammar: TokenGrammar, picked: list[int]) -> list[float]:
    """The seconds the grammar alone takes at each position of the same decode."""
    state, seconds = grammar.automaton.initial(), []
    for token in picked:
        started = time.perf_counter()
        grammar.allowed(state)
        seconds.append(time.perf_counter() - started)
        state = grammar.feed(state, grammar.vocab[token])
    return seconds


def checkpoint_tokenizer(root: Path) -> Tokenizer:
    """The checkpoint's tokenizer.json; one missing or malformed is refused in one line (the tokenizers library
    raises a bare Exception)."""
    try:
        return Tokenizer.from_file(str(root / "tokenizer.json"))
    except Exception as err:
        raise CheckpointError(f"{root / 'tokenizer.json'}: not a tokenizer ({err})") from None


def run(args: argparse.Namespace) -> int:
    from dlm.cli import DEMO_CHECKPOINT
    from dlm.train.tokenizer import IM_END

    tokenizer = checkpoint_tokenizer(Path(args.checkpoint or DEMO_CHECKPOINT))
    vocab, stop = vocab_strings(tokenizer), [tokenizer.token_to_id(IM_END)]
    report: dict[str, Any] = {"fields": args.fields, "slack": args.slack, "cases": {}}
    print(f"{'keys':6s} {'picks':6s} {'budget':>6s} {'tokens':>6s} {'closed':>6s} {'budget s':>9s} "
          f"{'grammar s':>9s} {'ratio':>6s} {'worst position':>15s}")
    for free_keys in (False, True):
        schema = form_schema(args.fields, free_keys)
        probe = TokenGrammar(schema, vocab, stop)
        need = probe.tokens_to_finish(probe.automaton.initial())
        budget = need + 1 + args.slack  # the stop takes a token too
        for pick in ("path", "random"):
            grammar = TokenGrammar(schema, vocab, stop)
            picked, checked = decode(grammar, budget, pick, random.Random(args.seed))
            text = "".join(grammar.vocab[t] for t in picked)
            closed = grammar.automaton.is_complete(grammar.feed(grammar.automaton.initial(), text))
            baseline = replay(TokenGrammar(schema, vocab, stop), picked)
            name = f"{'free' if free_keys else 'closed'}/{pick}"
            case = {"budget": budget, "tokens": len(picked), "closed": closed, "budget_s": sum(checked),
                    "grammar_s": sum(baseline), "worst_position_s": max(checked),
                    "median_position_s": statistics.median(checked)}
            case["ratio"] = case["budget_s"] / max(case["grammar_s"], 1e-9)
            report["cases"][name] = case
            print(f"{name.split('/')[0]:6s} {pick:6s} {budget:6d} {len(picked):6d} {str(closed):>6s} "
                  f"{case['budget_s']:9.2f} {case['grammar_s']:9.2f} {case['ratio']:6.1f} "
                  f"{case['worst_position_s']:13.3f} s")
            if closed:
                json.loads(text)  # the bench's own check that the closed text is JSON
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0
