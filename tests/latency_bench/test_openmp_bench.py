"""The openmp benchmark runs each way of building the demo engine (and Whisper beside it) in processes of its
own; the model built on the caller shows its second OpenMP team as one more OS thread."""

import json

from latency_bench.__main__ import main
from latency_bench.openmp_bench import CALLER, ONE_TEAM, WAYS


def test_openmp_bench_json(tmp_path, capsys):
    out = tmp_path / "bench.json"
    assert main(["openmp", "--repeats", "1", "--turns", "1", "--threads", "2", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert list(report["ways"]) == list(WAYS)
    for way, figures in report["ways"].items():
        assert figures["turn_ms"] >= figures["first_block_ms"] > 0 and 0 < figures["ms_per_pass"] <= figures["turn_ms"]
        assert (figures["asr_pass_ms"] is not None) == ("Whisper" in way)
        if "Whisper" in way:
            assert figures["asr_pass_ms"] > 0
    assert 0 < report["ways"][ONE_TEAM]["os_threads"] < report["ways"][CALLER]["os_threads"]
    for way, ratio in report["turn_over_one_team"].items():
        assert ratio == round(report["ways"][way]["turn_ms"] / report["ways"][ONE_TEAM]["turn_ms"], 3)
    assert "one team" in capsys.readouterr().out
