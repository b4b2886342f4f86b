"""The copy probe: a one-intent corpus, and a score that tells a trained checkpoint from an untrained one."""

from __future__ import annotations

from pathlib import Path

import pytest

from dlm.eval import DEFAULT_MODEL
from dlm.train.copy_probe import copy_accuracy, main
from dlm.train.data import generate

DEMO_CONFIG = Path(__file__).resolve().parents[2] / "configs" / "demo.toml"


def test_intents_narrow_the_final_turn_and_unknown_ones_are_refused() -> None:
    examples = generate("train", 40, seed=3, intents=["repeat"])
    assert {e.intent for e in examples} == {"repeat"}
    assert all(e.reply_is_correct(e.messages[-1]["content"]) for e in examples)
    with pytest.raises(ValueError, match="unknown intents weather"):
        generate("train", 1, seed=3, intents=["weather"])


def test_shipped_checkpoint_copies_far_better_than_an_untrained_one(tmp_path, capsys) -> None:
    main(["--train", "0", "--config", str(DEMO_CONFIG), "--examples", "300", "--out", str(tmp_path), "--dialogues", "8"])
    printed = capsys.readouterr().out
    untrained = [float(line.split()[-1].rstrip("%")) / 100 for line in printed.splitlines() if "copy accuracy" in line]
    shipped = copy_accuracy(DEFAULT_MODEL, dialogues=8)
    assert len(untrained) == 2 and max(untrained) < 0.05
    assert min(shipped.values()) > 0.25
