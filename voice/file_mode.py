"""File mode: a simulated caller that speaks recordings into a pipeline and records what it hears back.

The caller lives on one timeline of 20 ms ticks, like a real transport: each tick it sends 20 ms of
its own audio (a file being spoken, or silence) and plays 20 ms of whatever assistant audio it holds,
reporting that as played. So the output WAV is the assistant's audio placed where the caller would
have heard it, flushes on barge-in included.

At real-time pace the ticks follow the clock and every latency is real. With ``fast`` the timeline
only advances once the pipeline has dealt with the audio so far and, while it is preparing a reply,
only when it has audio to play: the conversation unfolds as it would live (the VAD counts audio time),
but compute time takes no room on the timeline. The traces still measure wall-clock time from the
moment the end of speech reached the pipeline, so in fast mode they leave out the hangover wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from voice.audio_decode import AudioDecodeError, decode_audio
from voice.events import AudioCleared, AudioOut, PipelineEvent, ResponseDone
from voice.pipeline import VoicePipeline
from voice.trace import MARKS

TICK_S = 0.02
MAX_INPUT_SECONDS = 600
"""Longest recording spoken as one turn, as the transcription API's limit."""
CALLER_RATE = 16000
_TICK_IN = int(CALLER_RATE * TICK_S)


class FileModeError(ValueError):
    """An input that cannot be spoken: missing, not a WAV file, or in a format the pipeline rejects."""


def load_input(path: str | Path) -> np.ndarray:
    """A recording in any format FFmpeg reads as 16 kHz int16 mono, with an error that names the file and the
    problem."""
    path = Path(path)
    if path.is_dir():
        raise FileModeError(f"{path}: a directory, not an audio file")
    if not path.is_file():
        raise FileModeError(f"{path}: no such file")
    try:
        return decode_audio(path, CALLER_RATE, MAX_INPUT_SECONDS)
    except AudioDecodeError as err:
        raise FileModeError(f"{path}: {err}") from None


@dataclass(frozen=True)
class FileModeOptions:
    fast: bool = False
    barge_in_at: float | None = None
    """Start each next input this many seconds into the assistant's audio for the previous one."""
    lead_in_s: float = 0.5
    gap_s: float = 0.8
    """Silence the caller leaves after the assistant has finished before speaking the next input."""
    tail_s: float = 0.5
    max_wait_s: float = 120.0
    """Wall-clock limit on waiting for the pipeline, so a stuck stage fails the run instead of hanging."""


@dataclass
class FileModeResult:
    output: np.ndarray
    """The assistant's audio on the caller's timeline (time 0 = first input sample sent)."""
    output_rate: int
    traces: list[dict[str, Any]]
    events: list[PipelineEvent]
    speech_spans: list[tuple[float, float]]
    """Where each input was spoken on the timeline, in seconds."""


@dataclass
class _Caller:
    """The caller's side: the assistant audio it holds and what it played, per turn."""

    pipeline: VoicePipeline
    playback: deque[tuple[int, np.ndarray]] = field(default_factory=deque)
    played: dict[int, int] = field(default_factory=dict)
    heard: list[np.ndarray] = field(default_factory=list)
    events: list[PipelineEvent] = field(default_factory=list)
    traces: list[dict[str, Any]] = field(default_factory=list)
    first_heard_tick: dict[int, int] = field(default_factory=dict)

    async def listen(self) -> None:
        async for event in self.pipeline.events():
            self.events.append(event)
            if isinstance(event, AudioOut):
                self.playback.append((event.turn_id, event.pcm))
            elif isinstance(event, AudioCleared):
                self.playback.clear()
            elif isinstance(event, ResponseDone):
                self.traces.append(event.trace)

    def play_tick(self, samples: int, tick: int) -> None:
        """Play ``samples`` of held audio (silence where there is none) and report it as played."""
        out = np.zeros(samples, dtype=np.int16)
        filled = 0
        while filled < samples and self.playback:
            turn, pcm = self.playback[0]
            take = min(samples - filled, len(pcm))
            out[filled : filled + take] = pcm[:take]
            filled += take
            if take == len(pcm):
                self.playback.popleft()
            else:
                self.playback[0] = (turn, pcm[take:])
            self.played[turn] = self.played.get(turn, 0) + take
            self.first_heard_tick.setdefault(turn, tick)
            self.pipeline.played(turn, self.played[turn])
        self.heard.append(out)


async def run_files(
    pipeline: VoicePipeline, inputs: Sequence[np.ndarray], options: FileModeOptions | None = None
) -> FileModeResult:
    """Speak ``inputs`` (16 kHz PCM) as successive turns of one conversation; see the module docstring."""
    opts = options or FileModeOptions()
    caller = _Caller(pipeline)
    listener = asyncio.get_running_loop().create_task(caller.listen())
    out_tick = int(pipeline.output_rate * TICK_S)
    silence = np.zeros(_TICK_IN, dtype=np.int16)
    spans: list[tuple[float, float]] = []
    clock = _Clock(opts)
    tick = 0

    async def step(chunk: np.ndarray) -> None:
        nonlocal tick
        await clock.wait_tick(tick, pipeline, caller)
        await pipeline.push_audio(chunk, CALLER_RATE, timestamp=clock.stamp(tick))
        caller.play_tick(out_tick, tick)
        tick += 1

    async def speak(clip: np.ndarray) -> None:
        start = tick * TICK_S
        for i in range(0, len(clip), _TICK_IN):
            chunk = clip[i : i + _TICK_IN]
            await step(np.pad(chunk, (0, _TICK_IN - len(chunk))))
        spans.append((start, start + len(clip) / CALLER_RATE))

    async def wait_for_reply(barge_in: bool) -> None:
        """Silence until the assistant is done and ``gap_s`` has passed, or until it is time to barge in."""
        replies_before = len(caller.first_heard_tick)
        quiet_ticks = 0
        while quiet_ticks * TICK_S < opts.gap_s:
            if barge_in and len(caller.first_heard_tick) > replies_before:
                turn = max(caller.first_heard_tick)
                if (tick - caller.first_heard_tick[turn]) * TICK_S >= opts.barge_in_at:
                    return
            await step(silence)
            busy = pipeline.in_turn or pipeline.thinking() or bool(caller.playback)
            quiet_ticks = 0 if busy else quiet_ticks + 1

    try:
        for _ in range(round(opts.lead_in_s / TICK_S)):
            await step(silence)
        for i, clip in enumerate(inputs):
            await speak(clip)
            last = i == len(inputs) - 1
            await wait_for_reply(barge_in=opts.barge_in_at is not None and not last)
        for _ in range(round(opts.tail_s / TICK_S)):
            await step(silence)
        await pipeline.settle()
    finally:
        listener.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await listener
    output = np.concatenate(caller.heard) if caller.heard else np.zeros(0, dtype=np.int16)
    return FileModeResult(output, pipeline.output_rate, caller.traces, caller.events, spans)


class _Clock:
    """Real-time pacing, or (fast) waiting on the pipeline instead of the clock."""

    def __init__(self, opts: FileModeOptions) -> None:
        self.opts = opts
        self.t0 = time.monotonic()

    def stamp(self, tick: int) -> float:
        """Audio time of a tick's first sample (live, the tick is sent once its 20 ms have been spoken)."""
        return self.t0 + tick * TICK_S

    async def wait_tick(self, tick: int, pipeline: VoicePipeline, caller: _Caller) -> None:
        if not self.opts.fast:
            delay = self.t0 + (tick + 1) * TICK_S - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            return
        await pipeline.settle()
        deadline = time.monotonic() + self.opts.max_wait_s
        while pipeline.thinking() and not caller.playback:
            if time.monotonic() > deadline:
                raise TimeoutError(f"the pipeline produced nothing for {self.opts.max_wait_s:.0f} s")
            await asyncio.sleep(0.002)


def format_turn_table(traces: Sequence[dict[str, Any]]) -> str:
    """One line per turn: the stage stamps (ms after the end of speech), voice-to-voice and the words."""
    cols = [m for m in MARKS if m != "speech_end"]
    header = f"{'turn':>4} " + " ".join(f"{c:>15}" for c in cols) + f" {'v2v ms':>8}  transcript -> reply"

    def cell(value: float | None) -> str:
        return "-" if value is None else f"{value:.0f}"

    lines = [header]
    for t in traces:
        stamps = " ".join(f"{cell(t.get(c)):>15}" for c in cols)
        words = f"{t.get('transcript', '')!r} -> {t.get('reply', '')[:60]!r}"
        flag = " (interrupted)" if t.get("interrupted") else ""
        lines.append(f"{t['turn']:>4} {stamps} {cell(t.get('voice_to_voice_ms')):>8}  {words}{flag}")
    return "\n".join(lines)
