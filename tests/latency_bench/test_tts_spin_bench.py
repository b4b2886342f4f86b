"""The tts-spin benchmark times the demo engine beside both Piper sessions and writes every figure."""

import json

from latency_bench.__main__ import main
from latency_bench.tts_spin_bench import VOICES


def test_tts_spin_bench_json(tmp_path, capsys):
    out = tmp_path / "bench.json"
    assert main(["tts-spin", "--rounds", "1", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert set(report["voices"]) == set(VOICES) and report["rounds"] == 1
    for figures in report["voices"].values():
        assert set(figures) == {"clause_alone_ms", "turn_after_clause_ms", "clause_beside_turns_ms",
                                "turn_beside_clause_ms"}
        assert all(value > 0 for value in figures.values())
    assert "spinning vs sleeping" in capsys.readouterr().out
