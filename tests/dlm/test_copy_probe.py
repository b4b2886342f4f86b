"""The copy probe: a one-intent corpus, and a score that tells a trained checkpoint from an untrained one."""

from __future__ import annotations

from pathlib import Path

import pytest
from tokenizers import Tokenizer

from dlm.cli import DEMO_CHECKPOINT
from dlm.train.copy_probe import copy_accuracy, copy_positions, main
from dlm.train.data import generate
from dlm.train.encode import DialogueEncoder
from dlm.train.tokenizer import SPACE

DEMO_CONFIG = Path(__file__).resolve().parents[2] / "configs" / "demo.toml"


def test_intents_narrow_the_final_turn_and_unknown_ones_are_refused() -> None:
    examples = generate("train", 40, seed=3, intents=["repeat"])
    assert {e.intent for e in examples} == {"repeat"}
    assert all(e.reply_is_correct(e.messages[-1]["content"]) for e in examples)
    with pytest.raises(ValueError, match="unknown intents weather"):
        generate("train", 1, seed=3, intents=["weather"])


def test_the_probe_scores_the_replys_copy_of_the_heard_phrase_and_nothing_else() -> None:
    tokenizer = Tokenizer.from_file(str(DEMO_CHECKPOINT / "tokenizer.json"))
    space = tokenizer.token_to_id(SPACE)
    for example in generate("heldout", 20, seed=5, intents=["repeat"]):
        ids = DialogueEncoder(tokenizer).encode(example).ids
        positions = copy_positions(ids, tokenizer.encode(example.facts[0]).ids, space)
        reply_start = len(ids) - 1 - ids[::-1].index(tokenizer.token_to_id("<|im_start|>"))
        assert positions.min() > reply_start  # the reply's copy, not the request's
        copied = tokenizer.decode([ids[p] for p in positions])
        assert copied == example.facts[0].replace(" ", "")
    with pytest.raises(ValueError, match="does not repeat the heard phrase"):
        copy_positions([5, 6, 7], [6, 8], space)


def test_shipped_checkpoint_copies_heard_words_and_an_untrained_one_does_not(tmp_path, capsys) -> None:
    main(["--train", "0", "--config", str(DEMO_CONFIG), "--examples", "300", "--out", str(tmp_path), "--dialogues", "8"])
    printed = capsys.readouterr().out
    untrained = [float(line.split()[-1].rstrip("%")) / 100 for line in printed.splitlines() if "copy accuracy" in line]
    shipped = copy_accuracy(DEMO_CHECKPOINT, dialogues=20)
    assert len(untrained) == 2 and max(untrained) < 0.05
    # measured 16.8% / 26.9%; the checkpoint trained without the copying curriculum scored 1.0% / 2.5%
    assert min(shipped.values()) > 0.12
