"""Replies the held-out check cannot fault: `python -m dlm.spoken_probe [--model DIR] [--json OUT]`.

`dlm.eval` counts an answer right when the right fact is somewhere in the reply, so a reply that says it and more
passes: "7 minus seven is minus seven" holds "minus seven", "k, n, o, w, l, e, d, g, e, d, g, e, ..." holds the
spelling. Each probe here asks a set of questions through the terminal chat (tools run, calls grounded and replies
copy-biased as the voice stage decodes them) and checks the whole reply for one such fault:

- said back: a subtraction with a negative result, said back with the request's own numbers;
- spelled: a word whose last letter occurs earlier in it, the reply ending with its last letter;
- decimals: a division whose result repeats a digit, the reply ending with the result;
- unknown: a country with no capital, answered in the reply's words, not the tool error's.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from dlm.chat import TerminalChat
from dlm.cli import DEMO_CHECKPOINT
from dlm.cli_args import ArgumentParser, checkpoint, output_path
from dlm.engine import Engine


@dataclass(frozen=True)
class Probe:
    name: str
    questions: list[str]
    right: Callable[[str, str, str], bool]  # (question, reply, the tool's spoken result) -> the reply is right


def _said_back(question: str, reply: str, spoken: str) -> bool:
    """The result said, and before it any "minus" followed by the request's own second number."""
    asked = re.search(r"minus (\d+)", question)
    at = reply.rfind(spoken) if spoken else -1
    return asked is not None and at >= 0 and all(
        word.strip(".,!?;:") == asked.group(1) for word in re.findall(r"minus (\S+)", reply[:at]))


def _ends_with_once(reply: str, ending: str) -> bool:
    """``ending`` said once, last: a copy that ran on says it again, or goes on after it."""
    return bool(ending) and reply.count(ending) == 1 and reply.endswith(ending + ".")


def _ends_with_spelling(question: str, reply: str, _: str) -> bool:
    return _ends_with_once(reply, ", ".join(question.split()[-1]))


def _ends_with_result(_: str, reply: str, spoken: str) -> bool:
    return _ends_with_once(reply, spoken)


def _unknown_answered(question: str, reply: str, _: str) -> bool:
    return reply == f"sorry, i don't know the capital of {question.split()[-1]}."


PROBES = (
    Probe("said back", [f"What is {a} minus {b}?" for a, b in
                        [(7, 14), (6, 10), (3, 11), (4, 8), (5, 9), (2, 9), (1, 6), (8, 15), (9, 12), (10, 13)]],
          _said_back),
    Probe("spelled", [f"spell {w}" for w in ["knowledge", "banana", "because", "across", "address", "achieve", "queue",
                                              "separate", "receive", "people", "temperature", "mississippi", "assesses",
                                              "hotchpotch"]],
          _ends_with_spelling),
    Probe("decimals", [f"what's {a} divided by {b}" for a, b in [(10, 3), (7, 8), (1, 3), (25, 3), (100, 3), (20, 3)]],
          _ends_with_result),
    Probe("unknown", [f"what's the capital of {c}" for c in ["atlantis", "wakanda", "narnia", "westeros", "elbonia",
                                                              "genovia", "latveria", "kelmaria", "zubistan", "mordor"]],
          _unknown_answered),
)


def run_probe(engine: Engine, probe: Probe) -> list[dict[str, object]]:
    """Each question in a fresh chat: its reply, the tool's spoken result and whether the reply is right."""
    rows = []
    for question in probe.questions:
        chat = TerminalChat(engine, io.StringIO())
        chat.turn(question)
        reply = chat.history[-1]["content"]
        results = [json.loads(m["content"]) for m in chat.history if m["role"] == "tool"]
        spoken = next((r.get("spoken", "") for r in results if isinstance(r, dict)), "")
        rows.append({"question": question, "reply": reply, "right": probe.right(question, reply, spoken)})
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = ArgumentParser(prog="python -m dlm.spoken_probe", description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=checkpoint, default=str(DEMO_CHECKPOINT), help="checkpoint directory")
    parser.add_argument("--json", type=output_path, help="also write every question, reply and verdict here")
    args = parser.parse_args(argv)
    engine = Engine.from_dir(Path(args.model))
    report = {}
    try:
        for probe in PROBES:
            rows = report[probe.name] = run_probe(engine, probe)
            right = sum(bool(row["right"]) for row in rows)
            print(f"{probe.name:<10} {right:>3} / {len(rows)} right")
            for row in rows:
                if not row["right"]:
                    print(f"    {row['question']!r} -> {str(row['reply'])[:90]!r}")
    finally:
        engine.close()
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
