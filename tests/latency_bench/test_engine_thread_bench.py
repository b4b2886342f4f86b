"""The engine-thread benchmark runs each way of building the demo engine in a process of its own, and the
caller's way shows its second OpenMP team as one more OS thread."""

import json

from latency_bench.__main__ import main
from latency_bench.engine_thread_bench import WAYS


def test_engine_thread_bench_json(tmp_path, capsys):
    out = tmp_path / "bench.json"
    assert main(["engine-thread", "--repeats", "1", "--turns", "1", "--threads", "2", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert set(report["ways"]) == set(WAYS)
    for figures in report["ways"].values():
        assert figures["turn_ms"] >= figures["first_block_ms"] > 0 and 0 < figures["ms_per_pass"] <= figures["turn_ms"]
    workers, callers = (report["ways"][way]["os_threads"] for way in WAYS)
    assert 0 < workers < callers  # one team (the worker's) against two (the caller's and the worker's)
    want = round(report["ways"][WAYS[1]]["turn_ms"] / report["ways"][WAYS[0]]["turn_ms"], 3)
    assert report["caller_over_worker_turn"] == want
    assert "built on the caller / on the worker" in capsys.readouterr().out
