"""Per-turn latency traces: monotonic stamps -> one JSON object per turn -> JSONL, Prometheus, p50/p95.

Every figure is in ms relative to the real end of the person's speech (``speech_end`` = 0), because that
is where the caller starts waiting; ``voice_to_voice_ms`` is the wait until the first non-silent
assistant sample leaves the pipeline.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import numpy as np
from prometheus_client import CollectorRegistry, Histogram

MARKS = ("speech_end", "asr_final", "lm_first_text", "tts_first_audio", "first_audio_out")
"""The stamps every turn should carry, in the order the stages reach them."""

STAGES = {
    "asr": ("speech_end", "asr_final"),
    "lm": ("asr_final", "lm_first_text"),
    "tts": ("lm_first_text", "tts_first_audio"),
    "output": ("tts_first_audio", "first_audio_out"),
}
"""Per-stage durations: the time between the stamps that bracket each stage on the critical path."""

_BUCKETS_MS = (10, 25, 50, 75, 100, 150, 200, 300, 400, 500, 700, 1000, 1500, 2000, 3000, 5000)


def _ms(later: float | None, earlier: float | None) -> float | None:
    if later is None or earlier is None:
        return None
    return round(1000 * (later - earlier), 1)


@dataclass
class TurnTrace:
    """Stamps of one turn. Stages call :meth:`mark`; the first stamp of a name wins."""

    turn: int
    stamps: dict[str, float] = field(default_factory=dict)
    transcript: str = ""
    reply: str = ""
    interrupted: bool = False

    def mark(self, name: str, at: float | None = None) -> float:
        """Record ``name`` at monotonic time ``at`` (default now) unless already recorded; return it."""
        return self.stamps.setdefault(name, time.monotonic() if at is None else at)

    def to_dict(self) -> dict[str, Any]:
        """The JSON object of the turn; absent stamps are null."""
        origin = self.stamps.get("speech_end")
        if origin is None:
            raise ValueError(f"turn {self.turn}: a trace needs a speech_end stamp")
        out: dict[str, Any] = {"turn": self.turn}
        out.update({name: _ms(self.stamps.get(name), origin) for name in MARKS})
        out["voice_to_voice_ms"] = out["first_audio_out"]
        out["durations_ms"] = {
            stage: _ms(self.stamps.get(end), self.stamps.get(start)) for stage, (start, end) in STAGES.items()
        }
        out["other_marks_ms"] = {n: _ms(t, origin) for n, t in self.stamps.items() if n not in MARKS}
        out.update(transcript=self.transcript, reply=self.reply, interrupted=self.interrupted)
        return out


class TraceWriter:
    """Appends one JSON line per turn and flushes it, so a crash loses at most the turn in flight."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._file: TextIO = self.path.open("a", encoding="utf-8")

    def write(self, trace: TurnTrace | Mapping[str, Any]) -> None:
        record = trace.to_dict() if isinstance(trace, TurnTrace) else dict(trace)
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_traces(path: str | Path) -> list[dict[str, Any]]:
    """Load a JSONL trace file."""
    with Path(path).open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


class TraceMetrics:
    """Prometheus histograms per stage, in a registry of their own (so servers and tests never collide)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.stage_ms = Histogram(
            "voice_stage_latency_ms",
            "Time spent in each pipeline stage of a turn, ms",
            ["stage"],
            buckets=_BUCKETS_MS,
            registry=self.registry,
        )
        self.voice_to_voice_ms = Histogram(
            "voice_to_voice_latency_ms",
            "End of the caller's speech to the first assistant audio out, ms",
            buckets=_BUCKETS_MS,
            registry=self.registry,
        )

    def observe(self, trace: TurnTrace | Mapping[str, Any]) -> None:
        record = trace.to_dict() if isinstance(trace, TurnTrace) else trace
        for stage, value in record["durations_ms"].items():
            if value is not None:
                self.stage_ms.labels(stage=stage).observe(value)
        if record["voice_to_voice_ms"] is not None:
            self.voice_to_voice_ms.observe(record["voice_to_voice_ms"])


SUMMARY_FIELDS = (*MARKS[1:], *(f"{stage}_ms" for stage in STAGES), "voice_to_voice_ms")


def summarize(records: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, float]]:
    """p50/p95/count per field over the turns that have it (stamps, stage durations, voice-to-voice)."""
    values: dict[str, list[float]] = {name: [] for name in SUMMARY_FIELDS}
    for record in records:
        flat = {**record, **{f"{k}_ms": v for k, v in record.get("durations_ms", {}).items()}}
        for name in SUMMARY_FIELDS:
            if flat.get(name) is not None:
                values[name].append(float(flat[name]))
    return {
        name: {"p50": float(np.percentile(v, 50)), "p95": float(np.percentile(v, 95)), "n": len(v)}
        for name, v in values.items()
        if v
    }


def format_summary(summary: Mapping[str, Mapping[str, float]]) -> str:
    """The summary as a fixed-width table."""
    lines = [f"{'field':<20} {'p50 ms':>9} {'p95 ms':>9} {'n':>5}"]
    lines += [f"{k:<20} {v['p50']:>9.1f} {v['p95']:>9.1f} {int(v['n']):>5}" for k, v in summary.items()]
    return "\n".join(lines)
