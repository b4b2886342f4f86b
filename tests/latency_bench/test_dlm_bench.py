"""The dlm benchmark runs at a tiny shape and writes the report the README's table is built from."""

import json

from latency_bench.__main__ import main


def test_dlm_bench_json(tmp_path, capsys):
    out = tmp_path / "bench.json"
    assert main(["dlm", "--shape", "tiny", "--prompt-lengths", "16,24", "--repeats", "1", "--gen-tokens", "16",
                 "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert "fixed 2 passes per block" in report["note"] and "fixed 2 passes" in capsys.readouterr().out
    rows = report["rows"]
    assert {(r["prompt_length"], r["method"]) for r in rows} == {
        (n, m) for n in (16, 24) for m in ("engine", "ar", "vanilla")}
    for r in rows:
        assert r["first_block_ms"] > 0 and r["cold_first_block_ms"] > 0 and r["tokens_per_s"] > 0
    assert [q["prompt_length"] for q in report["ratios"]] == [16, 24]
    assert set(report["first_text_ms_by_schedule"]["16"]) == {"fixed", "first_block_4"}  # half the block of 8


def test_a_block_of_one_token_compares_a_first_block_of_one(tmp_path, capsys):
    """Half a block of 1 had asked the engine for a first block of 0 tokens: a ValueError."""
    out = tmp_path / "bench.json"
    assert main(["dlm", "--shape", "tiny", "--prompt-lengths", "8", "--repeats", "1", "--block-size", "1",
                 "--gen-tokens", "4", "--json", str(out)]) == 0
    assert set(json.loads(out.read_text())["first_text_ms_by_schedule"]["8"]) == {"fixed", "first_block_1"}
