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
from dlm.train.loss_plot import main as plot_main
from dlm.train.train import check_shape

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def refusal(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    """The one line `python -m dlm.train --config <toml> <flags>` answers with, having exited 2 (an argument's
    is followed by a line saying where --help is)."""
    def refused(toml: str, *flags: str, config: Path | None = None) -> str:
        if config is None:
            config = tmp_path / "run.toml"
            config.write_text(toml)
        with pytest.raises(SystemExit) as exit_:
            main(["--config", str(config), *flags])
        assert exit_.value.code == 2
        lines = capsys.readouterr().err.strip().splitlines()  # a progress bar of an earlier run, then the line
        if lines[-1] == "(python -m dlm.train --help for usage)":
            lines.pop()
        return lines[-1]

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
    # each of these had been a traceback: a TypeError, torch's RuntimeError, AdamW's or math.floor's ValueError
    ("data = 5\n", "[data] must be a table of settings, got 5"),
    ('[curriculum]\nintents = [1]\nsteps = 2\n', "[curriculum] intents must be of type list[str], got [1]"),
    ('[data]\nintent_weights = { repeat = "x" }\n', "[data] intent_weights must be of type dict[str, float]"),
    ("[model]\nnum_heads = 2\nnum_kv_heads = 3\n", "[model] num_kv_heads (3) must divide num_heads (2)"),
    ("[train]\nlr = -1.0\n", "[train] lr must be over 0, got -1.0"),
    ("[train]\nlr = nan\n", "[train] lr must be finite, got nan"),
    ("[train]\nmax_minutes = nan\n", "[train] max_minutes must be finite, got nan"),  # had trained on, unlimited
    ("[train]\ngrad_clip = -1.0\n", "[train] grad_clip must be over 0"),  # had trained, ascending the loss
    ('[data]\ntokenizer = "t.json"\n[train]\ninit_from = "ckpt"\n', "both name a tokenizer"),
])
def test_a_bad_config_is_one_line(refusal, toml: str, message: str) -> None:
    assert message in refusal(toml)


@pytest.mark.parametrize(("saved", "message"), [
    ("state.pt", "state.pt already holds a run: pass --resume"),
    # a race's candidates always resume their own state: a fresh race had carried on from the old one's
    ("candidates/seed-0/state.pt", "candidates holds an earlier race's states: pass --resume to continue it, or clear"),
])
def test_a_fresh_run_does_not_overwrite_or_reuse_a_run_in_its_state_dir(tmp_path: Path, refusal, saved: str,
                                                                        message: str) -> None:
    state = tmp_path / "state"
    (state / saved).parent.mkdir(parents=True)
    (state / saved).write_bytes(b"a run")
    toml = f'[train]\nstate_dir = "{state}"\nout_dir = "{tmp_path / "out"}"\n'
    assert message in refusal(toml)
    assert (state / saved).read_bytes() == b"a run"


def test_bad_flags_and_paths(tmp_path: Path, refusal) -> None:
    assert "argument --steps: must be at least 1" in refusal("", "--steps", "0")  # had exported an untrained checkpoint
    assert f"argument --init-from: {tmp_path / 'nope'}: not a checkpoint directory" in refusal(
        "", "--init-from", str(tmp_path / "nope"))
    # an output directory that cannot be made had failed when the run exported, after all its steps
    (tmp_path / "file").write_text("")
    out = tmp_path / "file" / "model"
    assert f"argument --out: {out}: {tmp_path / 'file'} is not a directory" in refusal("", "--out", str(out))
    assert f"[train] out_dir {out}: {tmp_path / 'file'} is not a directory" in refusal(f'[train]\nout_dir = "{out}"\n')
    # configs/demo.toml's finish is 2000 steps: a shorter run would be finish from its first step
    assert "[finish] steps (2000) must be under [train] steps (500): lower it" in refusal(
        "", "--steps", "500", config=ROOT / "configs" / "demo.toml")
    assert "No such file" in refusal("", config=tmp_path / "missing.toml")


def test_a_config_that_cannot_be_read(tmp_path: Path, refusal) -> None:
    """Each had been a traceback: a UnicodeDecodeError, an IsADirectoryError."""
    binary = tmp_path / "binary.toml"
    binary.write_bytes(b"\xff\xfe\x00bad")
    assert refusal("", config=binary) == f"error: {binary}: not UTF-8 text, so not TOML (byte 0: invalid start byte)"
    assert refusal("", config=tmp_path) == f"error: {tmp_path}: cannot be read (Is a directory)"


TINY = """[data]
train_examples = 240
vocab_size = 2048
max_length = 256
tokenizer = "{root}/dlm/assets/demo/tokenizer.json"

[model]
hidden_size = {hidden}
num_layers = 1
num_heads = 2
num_kv_heads = 1
head_dim = 16
intermediate_size = 64
block_size = 4

[train]
out_dir = "{tmp}/out"
state_dir = "{tmp}/state"
steps = 2
batch_size = 8
checkpoint_every = 1
threads = 1
block_sizes = [4]
"""


def tiny_config(tmp: Path, hidden: int = 32, extra: str = "") -> Path:
    """A TOML config of a two-step run of a tiny model on the demo's tokenizer (no tokenizer to train)."""
    path = tmp / f"tiny-{hidden}.toml"
    path.write_text(TINY.format(root=ROOT, tmp=tmp, hidden=hidden) + extra)
    return path


def test_documented_zero_defaults_are_taken(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """0 means none for [finish] and [curriculum] steps and the run's batch for [curriculum] batch_size: each
    had been refused as "must be at least 1", the rule for [train]'s keys of those names."""
    extra = "\n[curriculum]\nsteps = 0\nbatch_size = 0\n\n[finish]\nsteps = 0\n"
    main(["--config", str(tiny_config(tmp_path, extra=extra))])
    assert capsys.readouterr().out.startswith("trained 2 steps")


def test_init_from_trains_with_the_checkpoints_tokenizer(tmp_path: Path) -> None:
    """README's `--config configs/demo.toml --init-from DIR`: the config names a tokenizer, the checkpoint has
    its own, and the fine-tune is the checkpoint's (it had exported the config's)."""
    base = tmp_path / "base"
    base.mkdir()
    own = tiny_config(base).read_text().replace('tokenizer = "', '# tokenizer = "').replace("2048", "400")
    (base / "own.toml").write_text(own)
    main(["--config", str(base / "own.toml")])
    tuned = tmp_path / "tuned"
    tuned.mkdir()
    main(["--config", str(tiny_config(tuned)), "--init-from", str(base / "out")])
    assert (tuned / "out" / "tokenizer.json").read_text() == (base / "out" / "tokenizer.json").read_text()


def test_a_resume_under_another_config_or_from_a_truncated_state_is_one_line(tmp_path: Path, refusal) -> None:
    main(["--config", str(tiny_config(tmp_path)), "--stop-after", "1"])
    assert not list((tmp_path / "state").glob("*.partial"))  # written aside, then moved over state.pt
    state = tmp_path / "state" / "state.pt"
    assert refusal("", "--resume", config=tiny_config(tmp_path, hidden=48)) == (
        f"error: {state} holds a model of another shape than [model] (hidden_size 32, not 48): resume with the "
        "config it was started with")  # had been torch's traceback of every tensor
    state.write_bytes(state.read_bytes()[:1000])
    assert refusal("", "--resume", config=tiny_config(tmp_path)).startswith(
        f"error: {state}: not a readable run state, truncated or corrupt (PytorchStreamReader")


def test_loss_plot_draws_a_race_in_progress_and_refuses_a_truncated_state(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """During a race the state_dir holds only its candidates' states: their race is drawn (it had said "no
    run state there"). A truncated state is one line, not torch's traceback."""
    candidate = tmp_path / "run" / "state" / "candidates" / "seed-0"
    candidate.mkdir(parents=True)
    toml = tiny_config(candidate).read_text().replace(f"{candidate}/state", str(candidate))
    (candidate / "run.toml").write_text(toml)
    main(["--config", str(candidate / "run.toml")])
    capsys.readouterr()
    plot_main([str(tmp_path / "run" / "state")])
    assert capsys.readouterr().out.split() == [str(tmp_path / "run" / "state" / "race.svg")]
    state = candidate / "state.pt"
    state.write_bytes(state.read_bytes()[:1000])
    with pytest.raises(SystemExit) as exit_:
        plot_main([str(tmp_path / "run" / "state")])
    assert exit_.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"error: {state}: not a readable run state, truncated or corrupt")


def test_the_fine_tune_example_fits_the_shipped_checkpoint() -> None:
    """configs/demo-finetune.toml starts from dlm/assets/demo: its [model] must be the shipped checkpoint's
    shape, or the command its header gives would be refused."""
    run = load_run_config(ROOT / "configs/demo-finetune.toml")
    assert run.train.init_from == "dlm/assets/demo" and not run.curriculum.steps
    check_shape(run, load_config(ROOT / run.train.init_from))


def test_the_default_output_is_not_the_shipped_checkpoint() -> None:
    assert "dlm/assets/demo" not in (from_dict({}).train.out_dir, from_dict({}).train.state_dir)


def test_make_demo_model_trains_the_shipped_recipe_beside_it_and_scores_it_on_the_samples() -> None:
    """The shipped checkpoint is one run of configs/demo.toml; `make demo-model` reruns it into runs/ (never
    over dlm/assets/demo) and scores it as the README scores the shipped one: the four held-out samples."""
    dry = subprocess.run(["make", "-n", "-B", "demo-model"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    steps = [shlex.split(line) for line in dry.splitlines() if " -m dlm." in line]
    assert [s[2] for s in steps] == ["dlm.train", "dlm.eval"]
    train, evaluate = steps
    out = train[train.index("--out") + 1]
    assert train[train.index("--config") + 1] == "configs/demo.toml" and not out.startswith("dlm/assets")
    assert evaluate[evaluate.index("--model") + 1] == out and "--samples" in evaluate
    # the command the README and docs/demo-model.md give, run alone, trains where make does: never over the
    # shipped checkpoint (its out_dir had been dlm/assets/demo)
    assert load_run_config(ROOT / "configs/demo.toml").train.out_dir == out


def test_a_resume_with_nothing_saved_is_one_line(tmp_path: Path, refusal) -> None:
    """--resume in a state_dir that holds no run, nor a race's candidates, had started a fresh run silently."""
    (tmp_path / "state").mkdir()  # a tokenizer or a race's empty folders are no state to resume either
    (tmp_path / "state" / "tokenizer.json").write_text((ROOT / "dlm/assets/demo/tokenizer.json").read_text())
    (tmp_path / "state" / "candidates" / "seed-0").mkdir(parents=True)
    assert refusal("", "--resume", config=tiny_config(tmp_path)) == (
        f"error: --resume: nothing is saved in {tmp_path / 'state'} to resume (no state.pt, nor a race's "
        "candidates/seed-N/state.pt): start the run without --resume")
    assert not (tmp_path / "out").exists()
