"""Commands that take minutes refuse an output they could not write, or a count of nothing, before starting."""

from __future__ import annotations

from pathlib import Path

import pytest

from dlm.eval import main as eval_main
from voice.cli import main as voice_main


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
