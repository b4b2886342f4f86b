import json

import pytest
from prometheus_client import generate_latest

from voice.trace import MARKS, TraceMetrics, TraceWriter, TurnTrace, format_summary, read_traces, summarize


def make_trace(turn: int = 1, offsets_ms: tuple[float, ...] = (0, 120, 250, 330, 345)) -> TurnTrace:
    trace = TurnTrace(turn, transcript="what is two plus two", reply="Four.")
    base = 1000.0
    for name, offset in zip(MARKS, offsets_ms, strict=False):
        trace.mark(name, base + offset / 1000)
    return trace


def test_trace_object_is_relative_to_the_end_of_speech() -> None:
    record = make_trace().to_dict()
    assert [record[name] for name in MARKS] == [0.0, 120.0, 250.0, 330.0, 345.0]
    assert record["voice_to_voice_ms"] == 345.0
    assert record["durations_ms"] == {"asr": 120.0, "lm": 130.0, "tts": 80.0, "output": 15.0}
    assert (record["transcript"], record["reply"], record["interrupted"]) == (
        "what is two plus two",
        "Four.",
        False,
    )
    json.dumps(record)  # plain JSON


def test_first_mark_wins_and_extra_marks_are_kept() -> None:
    trace = make_trace()
    assert trace.mark("asr_final", 5000.0) == pytest.approx(1000.12)
    trace.mark("vad_turn_end", 1000.3)
    assert trace.to_dict()["other_marks_ms"] == {"vad_turn_end": 300.0}


def test_missing_stamps_are_null_and_speech_end_is_required() -> None:
    record = make_trace(offsets_ms=(0, 120)).to_dict()
    assert record["lm_first_text"] is None and record["voice_to_voice_ms"] is None
    assert record["durations_ms"]["asr"] == 120.0 and record["durations_ms"]["lm"] is None
    with pytest.raises(ValueError, match="speech_end"):
        TurnTrace(3).to_dict()


def test_jsonl_round_trip(tmp_path) -> None:
    path = tmp_path / "trace.jsonl"
    with TraceWriter(path) as writer:
        writer.write(make_trace(1))
        writer.write(make_trace(2).to_dict())
    records = read_traces(path)
    assert [r["turn"] for r in records] == [1, 2]
    assert records[0] == make_trace(1).to_dict()


def test_prometheus_histograms_in_their_own_registry() -> None:
    first, second = TraceMetrics(), TraceMetrics()  # two registries: no duplicate-metric error
    first.observe(make_trace())
    first.observe(make_trace(offsets_ms=(0, 100)).to_dict())
    assert first.registry.get_sample_value("voice_stage_latency_ms_count", {"stage": "asr"}) == 2
    assert first.registry.get_sample_value("voice_stage_latency_ms_count", {"stage": "lm"}) == 1
    assert first.registry.get_sample_value("voice_to_voice_latency_ms_sum") == 345.0
    assert second.registry.get_sample_value("voice_to_voice_latency_ms_count") == 0
    assert b'voice_stage_latency_ms_bucket{le="200.0",stage="asr"} 2.0' in generate_latest(first.registry)


def test_summary_percentiles_and_table() -> None:
    records = [make_trace(i, (0, 100 + i, 200, 300, 400 + 10 * i)).to_dict() for i in range(1, 21)]
    summary = summarize(records)
    assert summary["voice_to_voice_ms"] == {"p50": 505.0, "p95": 590.5, "n": 20}
    assert summary["asr_ms"]["p50"] == pytest.approx(110.5)
    table = format_summary(summary)
    assert table.splitlines()[0].split() == ["field", "p50", "ms", "p95", "ms", "n"]
    assert any(line.startswith("voice_to_voice_ms") and "505.0" in line for line in table.splitlines())
