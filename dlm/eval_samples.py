"""Held-out figures over several samples at once (`python -m dlm.eval --samples`).

One sample of 200 dialogues moves by a point or two with its draw, more than most data or decoding changes
do, so docs/demo-model.md judges them on the mean over four samples. `--samples` evaluates them in one
command and prints each sample's headline figures, their mean (of the samples' rates, so each sample counts
once whatever its size) and the mean answer rate of each intent.
"""

from __future__ import annotations

import argparse
import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

# the four samples docs/demo-model.md averages over: `--limit 200`, `600 --seed 11`, `300 --seed 23`, `300 --seed 37`
DOCS_SAMPLES = "200:1,600:11,300:23,300:37"
HEADLINE = ("tool_call_exact", "answer_correct", "tool_call_exact_grounded", "answer_correct_grounded",
            "valid_json_unconstrained", "valid_json_constrained", "stuttered_replies", "unended_replies")
BY_INTENT = ("answer_correct_by_intent", "tool_call_exact_by_intent", "answer_correct_grounded_by_intent")


@dataclass(frozen=True)
class Sample:
    limit: int  # held-out dialogues
    seed: int  # the sample's seed (`python -m dlm.eval --seed`)

    def __str__(self) -> str:
        return f"{self.limit}:{self.seed}"


def parse_samples(text: str) -> list[Sample]:
    """`LIMIT:SEED` pairs separated by commas (an argparse type: a bad one is a usage error, not a traceback)."""
    samples = []
    for part in text.split(","):
        limit, _, seed = part.strip().partition(":")
        try:
            sample = Sample(int(limit), int(seed))
        except ValueError:
            sample = None
        if sample is None or sample.limit < 1:
            raise argparse.ArgumentTypeError(f"samples are LIMIT:SEED pairs separated by commas, such as "
                                             f"{DOCS_SAMPLES}; got {text!r}")
        samples.append(sample)
    if len(set(samples)) < len(samples):
        raise argparse.ArgumentTypeError(f"a sample is named twice in {text!r}")
    return samples


def _mean(values: Iterable[float]) -> float:
    """The mean of the defined rates (NaN: a sample without that kind of question), NaN if none is."""
    defined = [v for v in values if not math.isnan(v)]
    return sum(defined) / len(defined) if defined else math.nan


def mean_report(reports: list[dict[str, Any]]) -> dict[str, Any]:
    """The samples' mean of each headline rate, of the headline effort's tokens per pass and of each intent's
    rates; the wrong free calls' kinds summed over the samples."""
    mean: dict[str, Any] = {key: _mean(r[key] for r in reports) for key in HEADLINE}
    mean["tokens_per_forward"] = _mean(r["tokens_per_forward"][r["effort"]] for r in reports)
    for key in BY_INTENT:
        intents = sorted({intent for r in reports for intent in r[key]})
        mean[key] = {intent: _mean(r[key][intent] for r in reports if intent in r[key]) for intent in intents}
    errors: Counter[str] = Counter()
    for report in reports:
        errors.update(report["tool_call_errors"])
    mean["tool_call_errors"] = dict(errors.most_common())
    return mean


def intent_rows(report: dict[str, Any], width: int = 26) -> list[str]:
    """Each intent's answers, tool calls (intents that make one) and grounded answers, a line each."""
    calls, grounded = report["tool_call_exact_by_intent"], report["answer_correct_grounded_by_intent"]
    return [f"  {k:<{width}}{v:>10.1%}" + (f"{calls[k]:>10.1%}" if k in calls else f"{'':>10}") + f"{grounded[k]:>10.1%}"
            for k, v in report["answer_correct_by_intent"].items()]


def call_errors_line(effort: str, errors: dict[str, int], scope: str = "") -> str:
    """The wrong free calls counted by what is wrong with each, most common first."""
    kinds = ", ".join(f"{kind} {count}" for kind, count in errors.items()) or "none"
    return f"wrong free tool calls ({effort}){scope}, by what is wrong: {kinds}"


def format_summary(samples: list[Sample], reports: list[dict[str, Any]], mean: dict[str, Any]) -> str:
    effort = reports[0]["effort"]
    header = f"{'sample':<10}{'dialogues':>10}{'calls':>9}{'answers':>9}{'grounded calls':>16}{'answers':>9}{'tok/pass':>10}{'stutter':>9}"

    def row(name: str, dialogues: str, figures: dict[str, Any], tokens: float) -> str:
        return (f"{name:<10}{dialogues:>10}{figures['tool_call_exact']:>9.1%}{figures['answer_correct']:>9.1%}"
                f"{figures['tool_call_exact_grounded']:>16.1%}{figures['answer_correct_grounded']:>9.1%}{tokens:>10.2f}"
                f"{figures['stuttered_replies']:>9.1%}")

    lines = [f"held-out samples at {effort} (calls and answers free, then grounded as the voice stage decodes):",
             header]
    lines += [row(str(s), str(r["examples"]), r, r["tokens_per_forward"][effort]) for s, r in zip(samples, reports, strict=True)]
    lines += [row("mean", str(sum(r["examples"] for r in reports)), mean, mean["tokens_per_forward"]), "",
              f"by intent, mean over the samples:{'answer':>12}{'tool call':>10}{'grounded':>10}"]
    lines += intent_rows(mean, width=31)
    lines += ["", call_errors_line(effort, mean["tool_call_errors"], " over the samples")]
    return "\n".join(lines)
