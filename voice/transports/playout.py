"""Assistant audio waiting to be played, and who gets told what of each turn has gone out.

The WebRTC track and the desktop speaker both pull fixed-size chunks at their own clock; both need
the same three things: resample the pipeline's audio statefully to the device rate, drop everything
at once on barge-in, and report per turn how many samples (in the turn's own rate) were played, which
is what the pipeline keeps in its history when the caller interrupts.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable

import numpy as np

from voice.audio import AudioBuffer, Resampler

OnPlayed = Callable[[int, int], None]


class Playout:
    """A bounded queue of assistant audio at ``rate``; safe to write and read from different threads."""

    def __init__(self, rate: int, on_played: OnPlayed | None = None, max_seconds: float = 120.0) -> None:
        self.rate = rate
        self._buffer = AudioBuffer(int(max_seconds * rate))
        self._segments: deque[list[int]] = deque()  # [turn_id, samples at `rate` left, source rate]
        self._played: dict[int, float] = {}
        self._written: dict[int, float] = {}  # per turn, source samples written less those a clear dropped
        self._resampler: Resampler | None = None
        self._on_played = on_played
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._buffer)

    def write(self, turn_id: int, pcm: np.ndarray, sample_rate: int) -> None:
        with self._lock:
            if self._resampler is None or self._resampler.in_rate != sample_rate:
                self._resampler = Resampler(sample_rate, self.rate)
            out = self._resampler.process(pcm)
            self._written[turn_id] = self._written.get(turn_id, 0.0) + len(pcm)
            if len(out) == 0:
                return
            self._buffer.write(out)
            if self._segments and self._segments[-1][0] == turn_id:
                self._segments[-1][1] += len(out)
            else:
                self._segments.append([turn_id, len(out), sample_rate])

    def read(self, n: int) -> np.ndarray:
        """Exactly ``n`` samples: queued audio, then silence."""
        with self._lock:
            pcm = self._buffer.read(n, pad=True)
            reports = self._account(n)
        if self._on_played is not None:
            for turn, samples in reports:
                self._on_played(turn, samples)
        return pcm

    def clear(self) -> int:
        """Drop all queued audio (barge-in); return how many samples were never played."""
        with self._lock:
            self._segments.clear()
            self._resampler = None
            self._written = dict(self._played)  # what was dropped was never heard
            return self._buffer.clear()

    def _account(self, samples: int) -> list[tuple[int, int]]:
        reports = []
        while samples and self._segments:
            segment = self._segments[0]
            take = min(samples, segment[1])
            segment[1] -= take
            samples -= take
            turn, source_rate = segment[0], segment[2]
            self._played[turn] = self._played.get(turn, 0.0) + take * source_rate / self.rate
            if segment[1] == 0:
                self._segments.popleft()
                if not any(queued[0] == turn for queued in self._segments):
                    # all of the turn written has played: the resampler's last few samples, held back for the
                    # next write, count too, or the count would stay short of the reply and it would never end
                    self._played[turn] = max(self._played[turn], self._written[turn])
            reports.append((turn, int(self._played[turn])))
        return reports
