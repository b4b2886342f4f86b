"""The schema-budget benchmark decodes a form under a tight budget, both kinds of keys, and every decode
closes its JSON within the budget."""

import json

from latency_bench.__main__ import main


def test_schema_budget_bench_json(tmp_path, capsys):
    out = tmp_path / "bench.json"
    assert main(["schema-budget", "--fields", "4", "--slack", "2", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert set(report["cases"]) == {"closed/path", "closed/random", "free/path", "free/random"}
    for case in report["cases"].values():
        assert case["closed"] and case["tokens"] < case["budget"], case
        assert case["budget_s"] > 0 and case["grammar_s"] > 0
    assert "worst position" in capsys.readouterr().out
