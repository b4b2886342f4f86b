"""The neighbours benchmark times the demo engine after and beside both Piper sessions and after Whisper's
features on both BLAS settings, and writes every figure."""

import json

from latency_bench.__main__ import main
from latency_bench.neighbours_bench import BLAS, PIPER


def test_neighbours_bench_json(tmp_path, capsys):
    out = tmp_path / "bench.json"
    assert main(["neighbours", "--rounds", "1", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert set(report["piper"]) == set(PIPER) and set(report["openblas"]) == set(BLAS) and report["rounds"] == 1
    for figures in report["piper"].values():
        assert set(figures) == {"clause_alone_ms", "turn_after_clause_ms", "clause_beside_turns_ms",
                                "turn_beside_clause_ms"}
        assert all(value > 0 for value in figures.values())
    for figures in report["openblas"].values():
        assert figures["features_alone_ms"] > 0 and figures["turn_after_features_ms"] > 0
    out_text = capsys.readouterr().out
    assert "Piper sleeping" in out_text and "OpenBLAS 1 thread" in out_text
