"""Turn detection: webrtcvad on 30 ms frames at 16 kHz, driven by a small state machine.

webrtcvad says speech / not speech per frame and flickers; the detector turns that into turn events:
speech starts only after ``min_speech_ms`` of consecutive speech (a click is not a turn), the audio from
``preroll_ms`` before that is handed over so the first syllable reaches ASR, a pause is announced early
(``silence_started``, so the final ASR pass can run speculatively during the hangover), and the turn ends
only after ``hangover_ms`` of silence.

webrtcvad keeps saying "speech" for ~60-120 ms after speech stops (its own overhang). Latency is
measured from the real end of speech, so when it finally reports silence, the end is moved back to
where the signal energy actually fell away (10 ms resolution, never later than webrtcvad's own).

All times are audio times: the monotonic timestamps carried by the frames, so file mode at any speed
and live input give the same boundaries.
"""

from __future__ import annotations

import collections
import enum
from dataclasses import dataclass, field

import numpy as np
import webrtcvad

from voice.audio import AudioFormatError, PcmFrame, rms

VAD_RATE = 16000
FRAME_MS = 30
FRAME_SAMPLES = VAD_RATE * FRAME_MS // 1000
_END_LOOKBACK_FRAMES = 5
_SUBFRAME = VAD_RATE // 100


@dataclass(frozen=True)
class VadConfig:
    """Turn detector settings; every duration is rounded up to whole 30 ms frames."""

    aggressiveness: int = 2
    """webrtcvad mode 0 (least aggressive about filtering out non-speech) to 3 (most)."""
    min_speech_ms: int = 200
    """Consecutive speech needed before a turn starts (webrtcvad stretches a 40 ms click to ~150 ms)."""
    hangover_ms: int = 300
    """Silence after speech that ends the turn."""
    preroll_ms: int = 300
    """Audio kept from before the detected start."""
    silence_start_ms: int = 60
    """Silence after which ``silence_started`` is announced (shorter gaps are part of speech)."""
    resume_ms: int = 60
    """Consecutive speech during the hangover that counts as the person resuming."""
    max_turn_ms: int = 25_000
    """A turn is cut here: Whisper sees at most 30 s at once."""
    end_drop_db: float = 30.0
    """The real end of speech is the last 10 ms whose level is within this of the turn's loudest frame."""
    ends_turns: bool = True
    """False: silence never ends a turn, only :meth:`TurnDetector.force_end` (or ``max_turn_ms``) does, as a
    push-to-talk client commits its turns itself."""

    def __post_init__(self) -> None:
        if self.aggressiveness not in (0, 1, 2, 3):
            raise ValueError(f"VAD aggressiveness must be 0..3, got {self.aggressiveness}")
        for name in ("min_speech_ms", "hangover_ms", "silence_start_ms", "resume_ms", "max_turn_ms"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.preroll_ms < 0:
            raise ValueError(f"preroll_ms must be >= 0, got {self.preroll_ms}")
        if self.silence_start_ms > self.hangover_ms:
            raise ValueError("silence_start_ms must not exceed hangover_ms")


def _frames(ms: int) -> int:
    return -(-ms // FRAME_MS)


class VadEventKind(str, enum.Enum):
    SPEECH_STARTED = "speech_started"
    """A turn began; ``audio`` holds the pre-roll plus the speech that triggered it."""
    AUDIO = "audio"
    """One 30 ms frame inside a turn (speech or hangover silence), for the ASR buffer."""
    SILENCE_STARTED = "silence_started"
    """The person paused; ``timestamp`` is where the silence began."""
    SPEECH_RESUMED = "speech_resumed"
    """Speech came back before the hangover ran out; a speculative final is stale."""
    TURN_ENDED = "turn_ended"
    """The hangover ran out (or the turn was cut); ``speech_end`` is the real end of speech."""


@dataclass(frozen=True)
class VadEvent:
    kind: VadEventKind
    timestamp: float
    """Monotonic audio time of the moment the event refers to."""
    audio: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int16))
    audio_start: float | None = None
    """Monotonic time of ``audio[0]`` (speech_started: earlier than ``timestamp`` by the pre-roll)."""
    speech_end: float | None = None


class _State(enum.Enum):
    IDLE = "idle"
    SPEAKING = "speaking"
    TRAILING = "trailing"


class TurnDetector:
    """Feed 16 kHz frames of any length; get :class:`VadEvent` lists back."""

    def __init__(self, config: VadConfig | None = None) -> None:
        self._vad = webrtcvad.Vad()
        self._history: collections.deque[np.ndarray] = collections.deque()
        self.retune(config or VadConfig())
        self._recent: collections.deque[tuple[float, np.ndarray]] = collections.deque(
            maxlen=_END_LOOKBACK_FRAMES
        )
        self._pending = np.zeros(0, dtype=np.int16)
        self._pending_ts = 0.0
        self._reset_turn()

    def retune(self, config: VadConfig) -> None:
        """Take ``config`` from the next frame on, keeping the turn in progress: a Realtime client tunes turn
        detection with session.update whenever it likes, mid-turn too."""
        self.config = config
        self._vad.set_mode(config.aggressiveness)
        self._min_speech = _frames(config.min_speech_ms)
        self._resume = _frames(config.resume_ms)
        self._history = collections.deque(self._history, maxlen=_frames(config.preroll_ms) + self._min_speech)

    def _reset_turn(self) -> None:
        self._state = _State.IDLE
        self._history.clear()
        self._run = 0  # consecutive speech frames (idle: towards a start; trailing: towards a resume)
        self._run_start = 0.0
        self._silent = 0  # consecutive silent frames while speaking
        self._silence_ts = 0.0  # where the current silence began
        self._turn_start = 0.0
        self._peak_rms = 0.0  # loudest speech frame of the turn, the reference for the end of speech
        self._recent.clear()  # the last frames before the current one, to place the end of speech

    @property
    def in_turn(self) -> bool:
        return self._state is not _State.IDLE

    def process(self, frame: PcmFrame) -> list[VadEvent]:
        """Consume audio; events come out in audio order."""
        if frame.sample_rate != VAD_RATE:
            raise AudioFormatError(f"the VAD needs {VAD_RATE} Hz audio, got {frame.sample_rate} Hz")
        if len(self._pending) == 0:
            self._pending_ts = frame.timestamp
        self._pending = np.concatenate([self._pending, frame.samples])
        events: list[VadEvent] = []
        while len(self._pending) >= FRAME_SAMPLES:
            chunk, self._pending = self._pending[:FRAME_SAMPLES], self._pending[FRAME_SAMPLES:]
            ts = self._pending_ts
            self._pending_ts += FRAME_MS / 1000
            events.extend(self._step(chunk, ts))
        return events

    def force_end(self, timestamp: float) -> list[VadEvent]:
        """End the current turn now (a client committed its input buffer); nothing if no turn is open."""
        if not self.in_turn:
            return []
        speech_end = self._silence_ts if self._state is _State.TRAILING else timestamp
        self._reset_turn()
        return [VadEvent(VadEventKind.TURN_ENDED, timestamp, speech_end=speech_end)]

    def _step(self, chunk: np.ndarray, ts: float) -> list[VadEvent]:
        speech = self._vad.is_speech(chunk.tobytes(), VAD_RATE)
        end = ts + FRAME_MS / 1000
        if self._state is _State.IDLE:
            return self._step_idle(chunk, ts, speech)
        events = [VadEvent(VadEventKind.AUDIO, ts, chunk, audio_start=ts)]
        if (end - self._turn_start) * 1000 >= self.config.max_turn_ms - 1e-6:
            return events + self.force_end(end)
        if speech:
            self._peak_rms = max(self._peak_rms, rms(chunk))
        if self._state is _State.SPEAKING:
            events += self._step_speaking(ts, end, speech)
        else:
            events += self._step_trailing(ts, end, speech)
        self._recent.append((ts, chunk))
        return events

    def _step_idle(self, chunk: np.ndarray, ts: float, speech: bool) -> list[VadEvent]:
        self._history.append(chunk)
        if not speech:
            self._run = 0
            return []
        if self._run == 0:
            self._run_start = ts
        self._run += 1
        if self._run < self._min_speech:
            return []
        audio = np.concatenate(list(self._history))
        self._state, self._turn_start, self._silent, self._run = _State.SPEAKING, self._run_start, 0, 0
        self._history.clear()
        audio_start = ts + FRAME_MS / 1000 - len(audio) / VAD_RATE
        return [VadEvent(VadEventKind.SPEECH_STARTED, self._run_start, audio, audio_start=audio_start)]

    def _step_speaking(self, ts: float, end: float, speech: bool) -> list[VadEvent]:
        if speech:
            self._silent = 0
            return []
        if self._silent == 0:
            self._silence_ts = self._real_speech_end(ts)
        self._silent += 1
        if (end - self._silence_ts) * 1000 < self.config.silence_start_ms - 1e-6:
            return []
        self._state, self._run = _State.TRAILING, 0
        return [VadEvent(VadEventKind.SILENCE_STARTED, self._silence_ts)]

    def _real_speech_end(self, vad_end: float) -> float:
        """Where the energy fell away in the frames webrtcvad still called speech (at most ``vad_end``)."""
        if not self._recent or self._peak_rms == 0:
            return vad_end
        audio = np.concatenate([chunk for _, chunk in self._recent])
        levels = [rms(audio[i : i + _SUBFRAME]) for i in range(0, len(audio), _SUBFRAME)]
        floor = self._peak_rms * 10 ** (-self.config.end_drop_db / 20)
        loud = [i for i, level in enumerate(levels) if level >= floor]
        start = self._recent[0][0]
        return min(vad_end, start + (loud[-1] + 1 if loud else 0) * _SUBFRAME / VAD_RATE)

    def _step_trailing(self, ts: float, end: float, speech: bool) -> list[VadEvent]:
        if speech:
            if self._run == 0:
                self._run_start = ts
            self._run += 1
            if self._run >= self._resume:
                self._state, self._silent, self._run = _State.SPEAKING, 0, 0
                return [VadEvent(VadEventKind.SPEECH_RESUMED, self._run_start)]
        else:
            self._run = 0
        if self.config.ends_turns and (end - self._silence_ts) * 1000 >= self.config.hangover_ms - 1e-6:
            speech_end = self._silence_ts
            self._reset_turn()
            return [VadEvent(VadEventKind.TURN_ENDED, end, speech_end=speech_end)]
        return []
