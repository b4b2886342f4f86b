"""``python -m dlm generate`` prints streamed text, or one JSON object with the timing fields."""

import json
import subprocess
import sys

import pytest

from dlm.cli import build_parser, main


def test_generate_json(fixtures_dir, capsys):
    code = main(["generate", "--model", str(fixtures_dir / "fast_dllm_v2" / "checkpoint"), "--raw", "Hello",
                 "--max-tokens", "6", "--threshold", "0.5", "--json"])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert {"text", "token_ids", "tokens", "first_block_ms", "total_ms", "forward_passes",
            "tokens_per_forward"} <= set(out)
    assert 0 < len(out["token_ids"]) <= 6 and len(out["tokens"]) == len(out["token_ids"])
    assert out["tokens_per_forward"] == pytest.approx(len(out["token_ids"]) / out["forward_passes"])


def test_generate_streams_text(fixtures_dir, capsys):
    code = main(["generate", "--model", str(fixtures_dir / "sdar" / "checkpoint"), "--prompt", "Hi",
                 "--max-tokens", "8", "--effort", "high"])
    text = capsys.readouterr().out
    assert code == 0 and text.endswith("\n") and len(text) > 1


def test_prompt_and_raw_are_exclusive_and_knobs_too():
    parser = build_parser()
    with pytest.raises(SystemExit):
        parser.parse_args(["generate", "--model", "x", "--prompt", "a", "--raw", "b"])
    with pytest.raises(SystemExit):
        parser.parse_args(["generate", "--model", "x", "--raw", "b", "--threshold", "0.5", "--passes-per-block", "2"])


def test_bad_checkpoint_is_a_clear_error(tmp_path, capsys):
    assert main(["generate", "--model", str(tmp_path), "--raw", "x"]) == 2
    assert "config.json: file not found" in capsys.readouterr().err


def test_module_entry_point(fixtures_dir):
    proc = subprocess.run([sys.executable, "-m", "dlm", "generate", "--model",
                           str(fixtures_dir / "sdar" / "checkpoint"), "--raw", "ab", "--max-tokens", "4", "--json"],
                          capture_output=True, text=True, timeout=120, check=True)
    assert len(json.loads(proc.stdout)["token_ids"]) == 4
