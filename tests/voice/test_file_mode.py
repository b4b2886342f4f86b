"""``python -m voice run``: bad inputs fail with a clear message; a real run writes the heard audio and traces."""

from __future__ import annotations

import wave
from pathlib import Path

import numpy as np
import pytest

from dlm.cli import DEMO_CHECKPOINT
from tests.conftest import NOISE_FREE_VOICE, read_wav
from voice.audio import write_wav
from voice.cli import main
from voice.file_mode import CALLER_RATE, FileModeError, format_turn_table, load_input
from voice.pipeline import first_audible
from voice.trace import MARKS, read_traces


def test_inputs_are_resampled_to_the_caller_rate(tmp_path: Path) -> None:
    path = tmp_path / "q.wav"
    write_wav(path, np.zeros(48000, dtype=np.int16), 48000)
    assert len(load_input(path)) == CALLER_RATE


def test_missing_and_malformed_inputs_are_named(tmp_path: Path) -> None:
    with pytest.raises(FileModeError, match="nope.wav: no such file"):
        load_input(tmp_path / "nope.wav")
    text = tmp_path / "text.wav"
    text.write_text("hello")
    with pytest.raises(FileModeError, match="text.wav: not a readable audio file"):
        load_input(text)
    empty = tmp_path / "empty.wav"
    write_wav(empty, np.zeros(0, dtype=np.int16), 16000)
    with pytest.raises(FileModeError, match="empty.wav: the audio file contains no samples"):
        load_input(empty)
    with pytest.raises(FileModeError, match="a directory, not an audio file"):  # had said "no such file"
        load_input(tmp_path)
    zero = tmp_path / "zero.wav"
    zero.write_bytes(b"")
    with pytest.raises(FileModeError, match="zero.wav: not a readable audio file"):
        load_input(zero)


def test_recordings_as_people_make_them_are_spoken(tmp_path: Path) -> None:
    """Stereo and recordings cut mid-sample are read as a player reads them: Python's `wave` had refused stereo,
    and a WAV a byte short had been refused whole."""
    stereo = tmp_path / "stereo.wav"
    with wave.open(str(stereo), "wb") as w:
        w.setnchannels(2)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(np.tile(np.int16(1000), 2 * 1600).astype("<i2").tobytes())
    assert np.abs(load_input(stereo).astype(int) - 1000).max() <= 1  # both channels 1000: their mix is 1000
    odd = tmp_path / "odd.wav"
    write_wav(odd, np.zeros(100, dtype=np.int16), 16000)
    odd.write_bytes(odd.read_bytes()[:-1])  # a byte short: the last sample is cut in half
    assert len(load_input(odd)) == 99


def test_cli_reports_bad_input_without_loading_models(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", str(tmp_path / "missing.wav")]) == 2
    assert "missing.wav: no such file" in capsys.readouterr().err
    assert main(["run", str(tmp_path / "missing.wav"), "--barge-in-at", "-1"]) == 2
    bad = tmp_path / "bad.toml"
    bad.write_text("[lm]\nbogus = 1\n")
    write_wav(tmp_path / "q.wav", np.zeros(1600, dtype=np.int16), 16000)
    assert main(["run", str(tmp_path / "q.wav"), "--config", str(bad)]) == 2
    assert "unknown setting(s) bogus" in capsys.readouterr().err


def test_turn_table_has_one_row_per_turn() -> None:
    trace = {"turn": 3, **{m: float(i * 100) for i, m in enumerate(MARKS)}, "voice_to_voice_ms": 400.0,
             "transcript": "hi", "reply": "hello", "interrupted": True}
    header, row = format_turn_table([trace]).splitlines()
    assert "asr_final" in header and "v2v ms" in header
    assert row.split()[:6] == ["3", "100", "200", "300", "400", "400"]
    assert "'hi' -> 'hello' (interrupted)" in row


def test_run_writes_time_aligned_audio_and_traces(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from voice.tts import PiperTts, TtsConfig

    question = tmp_path / "question.wav"
    write_wav(question, PiperTts(TtsConfig(**NOISE_FREE_VOICE)).synthesize("What is twelve times four?", 22050), 22050)
    config = tmp_path / "test.toml"
    config.write_text(f'[lm]\ncheckpoint = "{DEMO_CHECKPOINT}"\n')
    out, traces = tmp_path / "heard.wav", tmp_path / "traces.jsonl"

    rc = main(["run", str(question), "--out", str(out), "--trace", str(traces), "--fast", "--config", str(config)])

    assert rc == 0
    [trace] = read_traces(traces)
    assert trace["voice_to_voice_ms"] is not None
    table = capsys.readouterr().out
    assert repr(trace["transcript"]) in table and "voice_to_voice_ms" in table
    heard, rate = read_wav(out)
    assert rate == 24000
    spoken, spoken_rate = read_wav(question)
    speech_end = 0.5 + (len(spoken) - first_audible(spoken[::-1])) / spoken_rate  # after the 0.5 s lead-in
    start = first_audible(heard)
    assert start is not None and start / rate > speech_end
