"""TEMPORARY stand-in Conversation for wiring tests, until voice/pipeline.py lands.

Energy-threshold turn detection; every turn is answered with a fixed 24 kHz tone. It exists only so the
transports can be exercised before the real pipeline exists; the final tests use the real pipeline.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import numpy as np

from voice.events import (
    AudioCleared,
    AudioOut,
    PipelineEvent,
    ReplyTextDelta,
    ResponseDone,
    SpeechStarted,
    SpeechStopped,
    TranscriptCompleted,
)


class StandInConversation:
    output_rate = 24000

    def __init__(self) -> None:
        self._events: asyncio.Queue[PipelineEvent | None] = asyncio.Queue()
        self._loud_ms = 0.0
        self._quiet_ms = 0.0
        self._speaking = False
        self._turn = 0
        self.played_log: list[tuple[int, int]] = []
        self.closed = False
        self.pushed_samples = 0

    async def push_audio(self, pcm: np.ndarray, sample_rate: int) -> None:
        self.pushed_samples += len(pcm)
        ms = 1000 * len(pcm) / sample_rate
        loud = float(np.sqrt(np.mean(pcm.astype(np.float64) ** 2))) > 500 if len(pcm) else False
        if loud:
            self._loud_ms += ms
            self._quiet_ms = 0
            if not self._speaking and self._loud_ms >= 100:
                self._speaking = True
                await self._events.put(SpeechStarted(time.monotonic()))
        else:
            self._quiet_ms += ms
            if self._quiet_ms > 100:
                self._loud_ms = 0
            if self._speaking and self._quiet_ms >= 400:
                self._speaking = False
                await self._events.put(SpeechStopped(time.monotonic()))
                await self.respond("(speech)")

    async def events(self) -> AsyncIterator[PipelineEvent]:
        while (ev := await self._events.get()) is not None:
            yield ev

    def played(self, turn_id: int, samples: int) -> None:
        self.played_log.append((turn_id, samples))

    async def commit_turn(self) -> None:
        await self.respond("(committed)")

    async def clear_input(self) -> None:
        self._loud_ms = self._quiet_ms = 0

    async def respond(self, text: str | None = None) -> None:
        self._turn += 1
        t = self._turn
        await self._events.put(TranscriptCompleted(t, text or ""))
        await self._events.put(ReplyTextDelta(t, "a tone."))
        tone = (8000 * np.sin(2 * np.pi * 440 * np.arange(self.output_rate) / self.output_rate)).astype(np.int16)
        await self._events.put(AudioOut(t, tone, self.output_rate))
        await self._events.put(ResponseDone(t, "a tone.", False, {"voice_to_voice_ms": 1.0}))

    async def cancel_response(self) -> None:
        await self._events.put(AudioCleared(self._turn))

    async def close(self) -> None:
        self.closed = True
        await self._events.put(None)
