"""`python -m latency_bench` refuses a bad value, checkpoint or config in one line, exit status 2, before it
measures anything (each had been a traceback: a ValueError, a CheckpointError, an IsADirectoryError, or an
openai.RateLimitError from a server started for 0 clients)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from dlm.cli import DEMO_CHECKPOINT
from latency_bench.__main__ import main


def _refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """The line on stderr of `python -m latency_bench <argv>` (an argument's, then where --help is), having
    exited 2 without a traceback."""
    try:
        code, lines = main(argv), 1
    except SystemExit as exit_:  # argparse's refusal: the line, then where --help is
        code, lines = exit_.code, 2
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert len(err.strip().splitlines()) == lines
    return err.strip().splitlines()[0]


@pytest.mark.parametrize(("argv", "message"), [
    (["api", "--clients", "a,b"], "argument --clients: must be comma-separated whole numbers, each at least 1"),
    (["api", "--clients", ""], "argument --clients: must be comma-separated whole numbers, each at least 1"),
    (["api", "--clients", "0"], "argument --clients: must be comma-separated whole numbers, each at least 1"),
    (["api", "--dtype", "bogus"], "argument --dtype: invalid choice: 'bogus'"),
    (["dlm", "--prompt-lengths", "0"], "argument --prompt-lengths: must be comma-separated whole numbers"),
    (["asr-window", "--windows", "30,x"], "argument --windows: must be comma-separated whole numbers"),
    # each had been a traceback, or (a slack of -3) a run whose every case failed to close its JSON
    (["asr-window", "--windows", "30,45"], "argument --windows: must be windows of 1 to 30 s (Whisper's own)"),
    (["schema-budget", "--slack", "-3"], "argument --slack: must be at least 0, got '-3'"),
    (["schema-budget", "--checkpoint", "/nonexistent"], "argument --checkpoint: /nonexistent: not a checkpoint"),
    (["dlm", "--device", "foo"], "argument --device: must be auto, cpu, cuda or cuda:N, got 'foo'"),
    (["dlm", "--device", f"cuda:{torch.cuda.device_count()}"], "CUDA device(s)"),  # one past those torch sees
])
def test_bad_values(capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    assert message in _refused(argv, capsys)


@pytest.mark.parametrize("bench", ["api", "copy-bias"])
def test_a_directory_that_is_no_checkpoint(tmp_path: Path, capsys: pytest.CaptureFixture[str], bench: str) -> None:
    line = _refused([bench, "--model", str(tmp_path)], capsys)
    assert line.endswith(f"error: argument --model: {tmp_path}/config.json: file not found")


@pytest.mark.parametrize("bench", ["voice", "train-step"])
def test_a_config_that_cannot_be_read(tmp_path: Path, capsys: pytest.CaptureFixture[str], bench: str) -> None:
    binary = tmp_path / "binary.toml"
    binary.write_bytes(b"\xff\xfe\x00bad")
    folder = tmp_path / "folder.toml"
    folder.mkdir()
    threads = ["--threads", str(torch.get_num_threads())] if bench == "train-step" else []  # it sets torch's
    for config, problem in ((binary, "not UTF-8 text"), (folder, "cannot be read (Is a directory)")):
        line = _refused([bench, "--config", str(config), *threads], capsys)
        assert line.startswith("error: ") and str(config) in line and problem in line


def test_a_checkpoint_without_a_tokenizer(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """schema-budget reads only the vocabulary: a checkpoint without one had been the tokenizers library's bare
    Exception."""
    (tmp_path / "config.json").write_text((DEMO_CHECKPOINT / "config.json").read_text())
    line = _refused(["schema-budget", "--checkpoint", str(tmp_path)], capsys)
    assert line.startswith(f"error: {tmp_path / 'tokenizer.json'}: not a tokenizer (")


@pytest.mark.parametrize(("module", "argv", "prog"), [
    ("latency_bench.__main__", ["api", "--clients", "0"], "python -m latency_bench api"),
    ("latency_bench.__main__", ["warp"], "python -m latency_bench"),
    ("latency_bench.kernels_compile", ["--arch", "x"], "python -m latency_bench.kernels_compile"),
    ("latency_bench.gpu_check", ["--sections", "warp drive"], "python -m latency_bench.gpu_check"),
])
def test_an_argument_error_is_one_line_and_a_pointer_to_help(capsys: pytest.CaptureFixture[str], module: str,
                                                             argv: list[str], prog: str) -> None:
    """argparse had printed the whole usage first; kernels_compile's and gpu_check's named their .py file."""
    import importlib

    with pytest.raises(SystemExit) as exit_:
        importlib.import_module(module).main(argv)
    assert exit_.value.code == 2
    error, hint = capsys.readouterr().err.splitlines()
    assert error.startswith("error: argument ") and hint == f"({prog} --help for usage)"


@pytest.mark.parametrize(("module", "prog"), [
    ("latency_bench.kernels_compile", "python -m latency_bench.kernels_compile"),
    ("latency_bench.gpu_check", "python -m latency_bench.gpu_check"),
])
def test_help_names_the_command_to_type(capsys: pytest.CaptureFixture[str], module: str, prog: str) -> None:
    import importlib

    with pytest.raises(SystemExit) as exit_:
        importlib.import_module(module).main(["--help"])
    assert exit_.value.code == 0 and capsys.readouterr().out.startswith(f"usage: {prog} ")
