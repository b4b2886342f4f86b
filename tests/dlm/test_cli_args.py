"""Commands that take minutes refuse an output they could not write, or a count of nothing, before starting."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from dlm.api.server import build_parser as serve_parser
from dlm.eval import main as eval_main
from voice.cli import main as voice_main
from voice.server import InsecureBindError, add_arguments, check_bind, server_config


@pytest.mark.parametrize("flags", [
    ["--json", "{tmp}/missing/e.json"],  # had failed with a traceback after the whole eval
    ["--failures", "{tmp}"],  # a directory
    ["--limit", "0"],  # had evaluated nothing, exit 0, and written NaN
])
def test_eval_refuses_before_it_starts(tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str]) -> None:
    with pytest.raises(SystemExit) as exit_:  # argparse refuses: the model is never loaded
        eval_main([flag.format(tmp=tmp_path) for flag in flags])
    assert exit_.value.code == 2 and "error: argument" in capsys.readouterr().err


@pytest.mark.parametrize("flag", ["--out", "--trace"])
def test_voice_run_refuses_an_output_it_could_not_write(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                        flag: str) -> None:
    clip = tmp_path / "in.wav"
    clip.write_bytes(b"")
    with pytest.raises(SystemExit) as exit_:
        voice_main(["run", str(clip), flag, str(tmp_path / "missing" / "x")])
    assert exit_.value.code == 2 and "there is no directory" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [
    ["--port", "99999"],  # had been an OverflowError at bind
    ["--max-concurrent", "0"],  # had started a server that refused every request
    ["--copy-bias", "nan"],  # had started, and garbled every copied reply
])
def test_dlm_serve_refuses_values_it_cannot_use(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """Checked on the serve options alone: were they accepted, nothing here starts a server."""
    with pytest.raises(SystemExit) as exit_:
        serve_parser().parse_args(argv)
    assert exit_.value.code == 2 and "error: argument" in capsys.readouterr().err


def test_dlm_generate_refuses_a_nan_temperature(capsys: pytest.CaptureFixture[str]) -> None:
    """It had reached torch.multinomial."""
    from dlm.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["generate", "--prompt", "hi", "--temperature", "nan"])
    assert exit_.value.code == 2 and "must be a finite number" in capsys.readouterr().err


def test_dlm_generate_names_an_unknown_dtype(capsys: pytest.CaptureFixture[str]) -> None:
    from dlm.cli import main

    assert main(["generate", "--prompt", "hi", "--dtype", "bogus"]) == 2
    assert "unknown dtype 'bogus'" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["--port", "0"], ["--max-sessions", "0"]])
def test_voice_serve_refuses_values_it_cannot_use(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """Checked on the serve options alone: were they accepted, nothing here starts a server."""
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    with pytest.raises(SystemExit) as exit_:
        parser.parse_args(argv)
    assert exit_.value.code == 2 and "error: argument" in capsys.readouterr().err


def test_a_blank_token_is_no_token() -> None:
    """'   ' had been accepted off loopback, and no client could ever send it (checked without serving)."""
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    config = server_config(parser.parse_args(["--host", "0.0.0.0", "--token", "   "]))
    assert config.token is None
    with pytest.raises(InsecureBindError, match="without a bearer token"):
        check_bind(config)


@pytest.mark.parametrize("argv", [
    ["generate", "--prompt", "hi", "--block-size", "0"],  # had been silently the checkpoint's block size
    ["generate", "--prompt", "hi", "--passes-per-block", "0"],  # had blamed a missing rule
])
def test_dlm_generate_refuses_counts_of_nothing(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    from dlm.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2 and "must be at least 1" in capsys.readouterr().err
