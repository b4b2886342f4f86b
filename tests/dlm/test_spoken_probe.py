"""`python -m dlm.spoken_probe`: each probe's check faults what the held-out check passes, on real replies."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dlm.spoken_probe import PROBES, main


def probe(name: str):
    return next(p for p in PROBES if p.name == name)


@pytest.mark.parametrize(("name", "question", "reply", "spoken", "right"), [
    ("said back", "What is 7 minus 14?", "7 minus 14 is minus seven.", "minus seven", True),
    ("said back", "What is 7 minus 14?", "it's minus seven.", "minus seven", True),
    ("said back", "What is 7 minus 14?", "7 minus seven is minus seven.", "minus seven", False),
    ("said back", "What is 7 minus 14?", "seven minus seven is minus seven.", "minus seven", False),
    ("said back", "What is 7 minus 14?", "7 minus 14 is minus eight.", "minus seven", False),
    ("said back", "What is 7 minus 14?", "7 minus 14, that's minus seven.", "minus seven", True),
    ("spelled", "spell queue", "it's spelled q, u, e, u, e.", "", True),
    ("spelled", "spell queue", "it's spelled q, u, e, u, e, u, e, u, e", "", False),
    ("spelled", "spell queue", "q, u, e, u, e, q, u, e, u, e.", "", False),
    ("decimals", "what's 1 divided by 3", "it's zero point three three.", "zero point three three", True),
    ("decimals", "what's 1 divided by 3", "it's zero point three three three three", "zero point three three", False),
    ("decimals", "what's 1 divided by 3", "zero point three three. zero point three three.", "zero point three three",
     False),
    ("unknown", "what's the capital of narnia", "sorry, i don't know the capital of narnia.", "", True),
    ("unknown", "what's the capital of narnia", "sorry, i don't know the capital known for 'narnia'", "", False),
])
def test_each_check_faults_the_whole_reply(name: str, question: str, reply: str, spoken: str, right: bool) -> None:
    assert probe(name).right(question, reply, spoken) is right


def test_the_probes_run_on_the_shipped_checkpoint(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "probe.json"
    main(["--json", str(out)])
    report = json.loads(out.read_text())
    assert set(report) == {p.name for p in PROBES}
    printed = capsys.readouterr().out
    for p in PROBES:
        right = sum(row["right"] for row in report[p.name])
        assert f"{p.name:<10} {right:>3} / {len(p.questions)} right" in printed
    assert all(row["right"] for row in report["spelled"] + report["said back"]), report  # 0/12 and 3/10 before
