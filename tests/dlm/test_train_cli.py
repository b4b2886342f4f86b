"""`python -m dlm.train` refuses a bad config, path or value in one line, before any work and before it could
overwrite anything (each had been a traceback, some minutes into a run, or a silent overwrite)."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest

from dlm.checkpoint import load_config
from dlm.train.__main__ import main
from dlm.train.config import from_dict, load_run_config
from dlm.train.train import check_shape


@pytest.fixture
def refusal(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    """The one line `python -m dlm.train --config <toml> <flags>` answers with, having exited 2."""
    def refused(toml: str, *flags: str, config: Path | None = None) -> str:
        if config is None:
            config = tmp_path / "run.toml"
            config.write_text(toml)
        with pytest.raises(SystemExit) as exit_:
            main(["--config", str(config), *flags])
        assert exit_.value.code == 2
        (line,) = capsys.readouterr().err.strip().splitlines()[-1:]
        return line

    return refused


@pytest.mark.parametrize(("toml", "message"), [
    ("[train]\nbatch_size = 0\n", "[train] batch_size must be at least 1"),  # had been a ZeroDivisionError
    ('[train]\nsteps = "five"\n', "[train] steps must be of type int, got 'five'"),
    ('[train]\ncompile = "no"\n', "[train] compile must be of type bool"),  # a truthy string had compiled
    ("[train]\nblock_sizes = []\n", "block_sizes must be a non-empty list"),
    ("[train\n", "not valid TOML"),
    ('[data]\nintents = ["weather"]\n', "[data] unknown intents weather"),  # had failed after the tokenizer
    ("[data]\nintent_weights = { repeat = -1 }\n", "[data] intent weights must not be negative"),
    ('[curriculum]\nintents = ["repaet"]\nsteps = 10\n', "[curriculum] unknown intents repaet"),
])
def test_a_bad_config_is_one_line(refusal, toml: str, message: str) -> None:
    assert message in refusal(toml)


def test_a_fresh_run_does_not_overwrite_a_run_in_its_state_dir(tmp_path: Path, refusal) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (state / "state.pt").write_bytes(b"a run")
    toml = f'[train]\nstate_dir = "{state}"\nout_dir = "{tmp_path / "out"}"\n'
    assert "already holds a run: pass --resume" in refusal(toml)
    assert (state / "state.pt").read_bytes() == b"a run"


def test_bad_flags_and_paths(tmp_path: Path, refusal) -> None:
    assert "argument --steps: must be at least 1" in refusal("", "--steps", "0")  # had exported an untrained checkpoint
    assert "no such checkpoint directory" in refusal("", "--init-from", str(tmp_path / "nope"))
    # configs/demo.toml's finish is 2000 steps: a shorter run would be finish from its first step
    assert "[finish] steps (2000) must be under [train] steps (500): lower it" in refusal(
        "", "--steps", "500", config=Path(__file__).resolve().parents[2] / "configs" / "demo.toml")
    assert "No such file" in refusal("", config=tmp_path / "missing.toml")


def test_a_config_that_cannot_be_read(tmp_path: Path, refusal) -> None:
    """Each had been a traceback: a UnicodeDecodeError, an IsADirectoryError."""
    binary = tmp_path / "binary.toml"
    binary.write_bytes(b"\xff\xfe\x00bad")
    assert refusal("", config=binary) == f"error: {binary}: not UTF-8 text, so not TOML (byte 0: invalid start byte)"
    assert refusal("", config=tmp_path) == f"error: {tmp_path}: cannot be read (Is a directory)"


def test_the_fine_tune_example_fits_the_shipped_checkpoint() -> None:
    """configs/demo-finetune.toml starts from dlm/assets/demo: its [model] must be the shipped checkpoint's
    shape, or the command its header gives would be refused."""
    root = Path(__file__).resolve().parents[2]
    run = load_run_config(root / "configs/demo-finetune.toml")
    assert run.train.init_from == "dlm/assets/demo" and not run.curriculum.steps
    check_shape(run, load_config(root / run.train.init_from))


def test_the_default_output_is_not_the_shipped_checkpoint() -> None:
    assert "dlm/assets/demo" not in (from_dict({}).train.out_dir, from_dict({}).train.state_dir)


def test_make_demo_model_trains_the_shipped_recipe_beside_it_and_scores_it_on_the_samples() -> None:
    """The shipped checkpoint is one run of configs/demo.toml; `make demo-model` reruns it into runs/ (never
    over dlm/assets/demo) and scores it as the README scores the shipped one: the four held-out samples."""
    root = Path(__file__).resolve().parents[2]
    dry = subprocess.run(["make", "-n", "-B", "demo-model"], cwd=root, capture_output=True, text=True, check=True).stdout
    steps = [shlex.split(line) for line in dry.splitlines() if " -m dlm." in line]
    assert [s[2] for s in steps] == ["dlm.train", "dlm.eval"]
    train, evaluate = steps
    out = train[train.index("--out") + 1]
    assert train[train.index("--config") + 1] == "configs/demo.toml" and not out.startswith("dlm/assets")
    assert evaluate[evaluate.index("--model") + 1] == out and "--samples" in evaluate
    assert load_run_config(root / "configs/demo.toml").train.out_dir == "dlm/assets/demo"
