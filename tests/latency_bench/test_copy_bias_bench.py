"""The copy-bias benchmark decodes the same held-out replies bare and biased and reports time per pass."""

import json

from latency_bench.__main__ import main


def test_copy_bias_bench_json(tmp_path, capsys):
    out = tmp_path / "bench.json"
    assert main(["copy-bias", "--replies", "3", "--repeats", "1", "--threads", "1", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["replies"] == 3
    for way in ("bare", "biased"):
        assert report[way]["ms_per_pass_p50"] > 0 and report[way]["tokens_per_pass"] >= 1
    assert report["ratio"] == report["biased"]["ms_per_pass_p50"] / report["bare"]["ms_per_pass_p50"]
    assert "biased / bare time per pass" in capsys.readouterr().out
