"""Audio primitives shared by every stage: PCM frames, resampling, G.711 mu-law, buffers, WAV files.

Everything that flows between stages is 16-bit signed mono PCM in a numpy ``int16`` array, so a stage
never has to guess the format; anything else is rejected at the edge with a message that says what
was expected.
"""

from __future__ import annotations

import time
import wave
from dataclasses import dataclass, field
from pathlib import Path

import av
import numpy as np

SUPPORTED_RATES = (8000, 16000, 22050, 24000, 44100, 48000)
"""Rates in play: phone (8k), ASR/VAD (16k), Piper (22.05k), OpenAI Realtime (24k), files and WebRTC."""


class AudioFormatError(ValueError):
    """Audio that is not 16-bit mono PCM at a supported rate."""


def check_rate(sample_rate: int) -> int:
    """Return ``sample_rate`` if it is one of :data:`SUPPORTED_RATES`, else raise AudioFormatError."""
    if sample_rate not in SUPPORTED_RATES:
        expected = ", ".join(map(str, SUPPORTED_RATES))
        raise AudioFormatError(f"unsupported sample rate {sample_rate} Hz; expected one of {expected}")
    return sample_rate


def as_pcm16(samples: np.ndarray) -> np.ndarray:
    """Validate mono int16 PCM and return it as a contiguous 1-D array (a ``(n, 1)`` column is accepted)."""
    arr = np.asarray(samples)
    if arr.dtype != np.int16:
        raise AudioFormatError(f"expected int16 PCM samples, got dtype {arr.dtype}")
    if arr.ndim == 2 and 1 in arr.shape:
        arr = arr.reshape(-1)
    if arr.ndim != 1:
        raise AudioFormatError(f"expected mono PCM (1-D array), got shape {arr.shape}")
    return np.ascontiguousarray(arr)


def rms(samples: np.ndarray) -> float:
    """Root-mean-square level in int16 units (0 for no samples)."""
    return float(np.sqrt(np.mean(samples.astype(np.float64) ** 2))) if len(samples) else 0.0


def pcm_from_bytes(data: bytes) -> np.ndarray:
    """Decode little-endian 16-bit PCM bytes (the wire format of WebRTC, Realtime and WAV)."""
    if len(data) % 2:
        raise AudioFormatError(f"PCM16 data must have an even number of bytes, got {len(data)}")
    return np.frombuffer(data, dtype="<i2").astype(np.int16)


@dataclass(frozen=True)
class PcmFrame:
    """A piece of mono PCM with the monotonic time of its first sample, so latency can be measured."""

    samples: np.ndarray
    sample_rate: int
    timestamp: float = field(default_factory=time.monotonic)

    def __post_init__(self) -> None:
        object.__setattr__(self, "samples", as_pcm16(self.samples))
        check_rate(self.sample_rate)

    @classmethod
    def from_bytes(cls, data: bytes, sample_rate: int, timestamp: float | None = None) -> PcmFrame:
        """Build a frame from PCM16 bytes; ``timestamp`` defaults to now."""
        return cls(pcm_from_bytes(data), sample_rate, time.monotonic() if timestamp is None else timestamp)

    def to_bytes(self) -> bytes:
        return self.samples.astype("<i2").tobytes()

    @property
    def duration(self) -> float:
        """Length in seconds."""
        return len(self.samples) / self.sample_rate

    @property
    def end_time(self) -> float:
        """Monotonic time just after the last sample."""
        return self.timestamp + self.duration


class Resampler:
    """Stateful resampler (libswresample through PyAV) for a continuous stream cut into chunks.

    The filter state is carried across calls, so feeding a signal in pieces gives the same samples as
    feeding it whole: no clicks at chunk boundaries. The filter delays output by a few samples; call
    :meth:`flush` at the end of a stream to get them.
    """

    def __init__(self, in_rate: int, out_rate: int) -> None:
        self.in_rate = check_rate(in_rate)
        self.out_rate = check_rate(out_rate)
        self._resampler = (
            None if in_rate == out_rate else av.AudioResampler(format="s16", layout="mono", rate=out_rate)
        )

    def process(self, samples: np.ndarray) -> np.ndarray:
        """Resample the next chunk of the stream."""
        pcm = as_pcm16(samples)
        if self._resampler is None:
            return pcm.copy()
        if len(pcm) == 0:
            return pcm.copy()
        frame = av.AudioFrame.from_ndarray(pcm.reshape(1, -1), format="s16", layout="mono")
        frame.sample_rate = self.in_rate
        return self._collect(self._resampler.resample(frame))

    def flush(self) -> np.ndarray:
        """Drain the samples still held in the filter; the resampler is then ready for a new stream."""
        if self._resampler is None:
            return np.zeros(0, dtype=np.int16)
        tail = self._collect(self._resampler.resample(None))
        self._resampler = av.AudioResampler(format="s16", layout="mono", rate=self.out_rate)
        return tail

    @staticmethod
    def _collect(frames: list[av.AudioFrame]) -> np.ndarray:
        if not frames:
            return np.zeros(0, dtype=np.int16)
        return np.concatenate([f.to_ndarray().reshape(-1) for f in frames]).astype(np.int16)


def resample(samples: np.ndarray, in_rate: int, out_rate: int) -> np.ndarray:
    """Resample a complete signal (one stream: process then flush)."""
    resampler = Resampler(in_rate, out_rate)
    return np.concatenate([resampler.process(samples), resampler.flush()])


# G.711 mu-law and A-law. Tables are built once from the standard segment formulas, so encoding and decoding
# are single numpy lookups; ``audioop`` is gone from Python 3.13.
_MULAW_BIAS = 0x84
_MULAW_CLIP = 32635
_LINEAR = np.arange(-32768, 32768, dtype=np.int32)


def _encode_table(codes: np.ndarray) -> np.ndarray:
    """The code of every int16 sample (``codes`` in the order of ``_LINEAR``), indexed by its bit pattern read as
    uint16."""
    encode = np.empty(65536, dtype=np.uint8)
    encode[_LINEAR.astype(np.int16).view(np.uint16)] = codes.astype(np.uint8)
    return encode


def _build_mulaw_tables() -> tuple[np.ndarray, np.ndarray]:
    codes = np.arange(256, dtype=np.int32)
    inverted = ~codes & 0xFF
    exponent = (inverted >> 4) & 0x07
    mantissa = inverted & 0x0F
    magnitude = (((mantissa << 3) + _MULAW_BIAS) << exponent) - _MULAW_BIAS
    decode = np.where(inverted & 0x80, -magnitude, magnitude).astype(np.int16)

    sign = (_LINEAR < 0).astype(np.int32) << 7
    mag = np.minimum(np.abs(_LINEAR), _MULAW_CLIP) + _MULAW_BIAS
    exp = np.floor(np.log2(mag)).astype(np.int32) - 7
    mant = (mag >> (exp + 3)) & 0x0F
    return _encode_table(~(sign | (exp << 4) | mant) & 0xFF), decode


def _build_alaw_tables() -> tuple[np.ndarray, np.ndarray]:
    """A-law on the 13-bit magnitude (the sample >> 3): a segment per octave above 32, four mantissa bits, even
    bits inverted (XOR 0x55), sign bit set for positive samples."""
    codes = np.arange(256, dtype=np.int32) ^ 0x55
    mantissa, segment = codes & 0x0F, (codes >> 4) & 0x07
    magnitude = np.where(segment == 0, (mantissa << 4) + 8, ((mantissa << 4) + 0x108) << np.maximum(segment - 1, 0))
    decode = np.where(codes & 0x80, magnitude, -magnitude).astype(np.int16)

    value = _LINEAR >> 3
    mask = np.where(value >= 0, 0xD5, 0x55)
    value = np.where(value >= 0, value, -value - 1)
    seg = np.maximum(np.floor(np.log2(np.maximum(value, 1))).astype(np.int32) - 4, 0)
    mant = np.where(seg < 2, value >> 1, value >> seg) & 0x0F
    return _encode_table(((seg << 4) | mant) ^ mask), decode


_MULAW_ENCODE, _MULAW_DECODE = _build_mulaw_tables()
_ALAW_ENCODE, _ALAW_DECODE = _build_alaw_tables()


def _encode(table: np.ndarray, samples: np.ndarray) -> bytes:
    return table[as_pcm16(samples).view(np.uint16)].tobytes()


def mulaw_encode(samples: np.ndarray) -> bytes:
    """Encode int16 PCM to G.711 mu-law bytes (8 bits per sample; the phone wire format)."""
    return _encode(_MULAW_ENCODE, samples)


def mulaw_decode(data: bytes) -> np.ndarray:
    """Decode G.711 mu-law bytes to int16 PCM."""
    return _MULAW_DECODE[np.frombuffer(data, dtype=np.uint8)]


def alaw_encode(samples: np.ndarray) -> bytes:
    """Encode int16 PCM to G.711 A-law bytes (the European phone wire format)."""
    return _encode(_ALAW_ENCODE, samples)


def alaw_decode(data: bytes) -> np.ndarray:
    """Decode G.711 A-law bytes to int16 PCM."""
    return _ALAW_DECODE[np.frombuffer(data, dtype=np.uint8)]


class AudioBuffer:
    """A bounded FIFO of PCM samples: a ring that drops the oldest audio rather than growing without end.

    Used where a producer can outrun a consumer (queued playback, a stalled reader); :meth:`clear`
    reports how much was thrown away so barge-in can tell what was never played.
    """

    def __init__(self, capacity: int) -> None:
        if capacity <= 0:
            raise ValueError(f"buffer capacity must be positive, got {capacity}")
        self._ring = np.zeros(capacity, dtype=np.int16)
        self._start = 0
        self._size = 0

    @property
    def capacity(self) -> int:
        return len(self._ring)

    def __len__(self) -> int:
        return self._size

    def write(self, samples: np.ndarray) -> int:
        """Append samples; return how many of the oldest samples were dropped to make room."""
        pcm = as_pcm16(samples)
        cap = self.capacity
        if len(pcm) >= cap:
            dropped = self._size + len(pcm) - cap
            self._ring[:] = pcm[-cap:]
            self._start, self._size = 0, cap
            return dropped
        dropped = max(0, self._size + len(pcm) - cap)
        if dropped:
            self._start = (self._start + dropped) % cap
            self._size -= dropped
        end = (self._start + self._size) % cap
        first = min(len(pcm), cap - end)
        self._ring[end : end + first] = pcm[:first]
        self._ring[: len(pcm) - first] = pcm[first:]
        self._size += len(pcm)
        return dropped

    def read(self, n: int, pad: bool = False) -> np.ndarray:
        """Take up to ``n`` samples; with ``pad`` always return ``n``, filling with silence (paced output)."""
        take = min(n, self._size)
        idx = (self._start + np.arange(take)) % self.capacity
        out = self._ring[idx]
        self._start = (self._start + take) % self.capacity
        self._size -= take
        if pad and take < n:
            out = np.concatenate([out, np.zeros(n - take, dtype=np.int16)])
        return out

    def clear(self) -> int:
        """Drop everything; return the number of samples discarded."""
        dropped, self._start, self._size = self._size, 0, 0
        return dropped


def write_wav(path: str | Path, samples: np.ndarray, sample_rate: int) -> None:
    """Write int16 mono PCM as a WAV file."""
    pcm = as_pcm16(samples)
    with wave.open(str(path), "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(check_rate(sample_rate))
        wav.writeframes(pcm.astype("<i2").tobytes())
