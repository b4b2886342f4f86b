"""The speaking stage of one reply: clauses in, assistant audio out, and a log of which text is in which samples.

The log is what makes barge-in honest: the transport reports how many samples the caller actually
heard, and :meth:`SpokenLog.heard` turns that back into the words that reached them, so the history
keeps only those.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import numpy as np

from voice.tts import PiperTts

END_OF_REPLY = None
"""Put on a clause queue after the last clause."""


@dataclass
class _Segment:
    start: int
    samples: int
    text: str


@dataclass
class SpokenLog:
    """Which clause occupies which samples of a reply's audio, counted the way the transport counts them."""

    segments: list[_Segment] = field(default_factory=list)
    next_offset: int = 0
    in_flight: str | None = None
    """The clause being synthesised: off the clause queue but not yet in the audio, so a barge-in that cancels
    its synthesis must not lose it."""

    @property
    def total(self) -> int:
        """Samples handed to the transport so far."""
        return self.next_offset

    def add(self, text: str, samples: int) -> None:
        self.segments.append(_Segment(self.next_offset, samples, text))
        self.next_offset += samples

    def heard(self, played: int) -> str:
        """The text of the first ``played`` samples; a clause cut off counts its words in proportion."""
        words: list[str] = []
        for seg in self.segments:
            if played >= seg.start + seg.samples:
                words += seg.text.split()
            elif played > seg.start:
                clause = seg.text.split()
                words += clause[: int(len(clause) * (played - seg.start) / max(seg.samples, 1))]
        return " ".join(words)

    def rewind(self, played: int) -> list[str]:
        """Forget the clauses not fully played and the one in flight (they will be spoken again); return their
        texts in order.

        Samples past ``played`` were flushed and never reached the caller; the ones of a clause cut
        half-way did, so the next audio starts counting after them.
        """
        kept = [s for s in self.segments if s.start + s.samples <= played]
        dropped = [s.text for s in self.segments[len(kept) :]]
        if self.in_flight is not None:
            dropped.append(self.in_flight)
            self.in_flight = None
        self.segments, self.next_offset = kept, max(played, kept[-1].start + kept[-1].samples if kept else 0)
        return dropped


AudioSink = Callable[[np.ndarray], Awaitable[None]]


async def speak_clauses(
    clauses: asyncio.Queue[str | None],
    tts: PiperTts,
    out_rate: int,
    log: SpokenLog,
    sink: AudioSink,
    on_first_audio: Callable[[], None],
) -> None:
    """Synthesise each clause as it arrives and hand its audio to ``sink`` until :data:`END_OF_REPLY`.

    Cancelling the task stops it between clauses or abandons the clause being synthesised, which stays
    :attr:`SpokenLog.in_flight` for :meth:`SpokenLog.rewind`.
    """
    first = True
    while (clause := await clauses.get()) is not END_OF_REPLY:
        log.in_flight = clause
        pcm = await tts.synthesize_async(clause, out_rate)
        log.in_flight = None
        if len(pcm) == 0:
            continue
        if first:
            on_first_audio()
            first = False
        log.add(clause, len(pcm))
        await sink(pcm)
