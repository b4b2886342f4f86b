"""`python -m voice` answers a config it cannot read or use, or an address it must not or cannot serve, in one
line with exit status 2, before any model loads (each had been a traceback, or exit status 1)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from voice.audio import write_wav
from voice.cli import main


def _one_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    (line,) = err.strip().splitlines()
    return line


@pytest.fixture
def clip(tmp_path: Path) -> Path:
    path = tmp_path / "tone.wav"
    write_wav(path, (np.sin(np.arange(1600) / 16000 * 2 * np.pi * 300) * 8000).astype(np.int16), 16000)
    return path


@pytest.mark.parametrize("command", ["serve", "run"])
def test_a_config_that_cannot_be_read(tmp_path: Path, clip: Path, capsys: pytest.CaptureFixture[str],
                                      command: str) -> None:
    binary = tmp_path / "binary.toml"
    binary.write_bytes(b"\xff\xfe\x00bad")  # had been a UnicodeDecodeError traceback
    folder = tmp_path / "folder.toml"
    folder.mkdir()  # had been an IsADirectoryError traceback
    inputs = [str(clip), "--fast"] if command == "run" else []
    for config, problem in ((binary, "not UTF-8 text"), (folder, "cannot be read (Is a directory)")):
        assert main([command, *inputs, "--config", str(config)]) == 2
        line = _one_line(capsys)
        assert line.startswith("error: ") and str(config) in line and problem in line


@pytest.mark.parametrize("rate", ["0", "-24000", "100000000000000000000"])
@pytest.mark.parametrize("command", ["serve", "run"])
def test_an_output_rate_the_audio_cannot_have(tmp_path: Path, clip: Path, capsys: pytest.CaptureFixture[str],
                                              command: str, rate: str) -> None:
    """`serve` had started with it and `run` had died in the pipeline with an AudioFormatError traceback."""
    config = tmp_path / "rate.toml"
    config.write_text(f"output_rate = {rate}\n")
    inputs = [str(clip), "--fast"] if command == "run" else []
    assert main([command, *inputs, "--config", str(config)]) == 2
    assert f"output_rate: unsupported sample rate {rate} Hz" in _one_line(capsys)


def test_serve_refuses_a_network_address_without_a_token(monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("VOICE_TOKEN", raising=False)
    assert main(["serve", "--host", "0.0.0.0"]) == 2  # had been exit status 1
    assert _one_line(capsys).startswith("error: refusing to bind 0.0.0.0 (not loopback) without a bearer token")


@pytest.mark.parametrize("host", ["not a host", "", "exa mple.org"])
def test_serve_refuses_what_is_no_host(capsys: pytest.CaptureFixture[str], host: str) -> None:
    """Even with a token, before its models load (had been exit status 1, or a failed bind after loading)."""
    assert main(["serve", "--host", host, "--token", "t"]) == 2
    assert _one_line(capsys) == f"error: argument --host: must be an IP address or a host name, got {host!r}"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal of a GPU that is not there")
@pytest.mark.parametrize(("lm", "problem"), [
    ('device = "cuda:1"', "sees 0 CUDA device(s)"),
    ('device = "tpu"', "unknown device 'tpu'"),
    ('dtype = "float8"', "unknown dtype 'float8'"),
])
def test_an_lm_placement_this_machine_cannot_give(tmp_path: Path, clip: Path, capsys: pytest.CaptureFixture[str],
                                                  lm: str, problem: str) -> None:
    """The default profile's `device = "auto"` lands on the CPU here; a named GPU that is not there is one line."""
    config = tmp_path / "gpu.toml"
    config.write_text(f"[lm]\n{lm}\n")
    assert main(["run", str(clip), "--fast", "--config", str(config)]) == 2
    line = _one_line(capsys)
    assert line.startswith("error: lm.device / lm.dtype in config") and problem in line


@pytest.mark.parametrize(("argv", "prog", "message"), [
    (["run", "--fast"], "python -m voice run", "error: the following arguments are required: INPUT"),
    (["serve", "--port", "0"], "python -m voice serve", "error: argument --port: must be a port, 1 to 65535"),
])
def test_an_argument_error_is_one_line_and_a_pointer_to_help(capsys: pytest.CaptureFixture[str], argv: list[str],
                                                             prog: str, message: str) -> None:
    """argparse had printed the subcommand's whole usage first."""
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    error, hint = capsys.readouterr().err.splitlines()
    assert error.startswith(message) and hint == f"({prog} --help for usage)"
