"""Recordings in any format FFmpeg reads (WAV of any width or layout, FLAC, MP3, Ogg, ...) as mono int16 PCM.

The transcription API and file mode both take recordings people made with whatever tool they had: a 24-bit
stereo WAV (WAVE_FORMAT_EXTENSIBLE), a phone's MP3, a FLAC. Decoding goes through PyAV, which aiortc already
brings, and every bound is checked before or while decoding, because a header can claim anything.
"""

from __future__ import annotations

import io
import itertools
from collections.abc import Iterable, Iterator
from pathlib import Path

import av
import numpy as np

from voice.audio import AudioFormatError

PLAUSIBLE_RATES = (8000, 192000)
"""Sample rates decoded, telephone to studio audio. Below them a header is lying: 32 KB of samples said to be
at 1 Hz had decoded to 4.4 hours at 16 kHz (22 GB, 3 minutes of CPU)."""


class AudioDecodeError(AudioFormatError):
    """A recording that cannot be decoded, holds no audio, or is out of bounds; the message says which."""


def decode_audio(source: bytes | Path, rate: int, max_seconds: float) -> np.ndarray:
    """The first audio stream of `source` (a file's bytes or its path) as mono int16 PCM at `rate`, of at most
    `max_seconds`: multichannel audio is mixed down, any sample width or rate converted."""
    opened = io.BytesIO(source) if isinstance(source, bytes) else str(source)
    try:
        with av.open(opened, metadata_errors="ignore") as container:
            stream = _audio_stream(container, max_seconds)
            pcm = _resampled(_frames(container, stream), rate, int(max_seconds * rate))
    except av.FFmpegError as exc:
        detail = exc.strerror or str(exc)  # strerror leaves out the path, which a caller's message names already
        raise AudioDecodeError(f"not a readable audio file ({type(exc).__name__}: {detail})") from None
    if pcm.size == 0:
        raise AudioDecodeError("the audio file contains no samples")
    return pcm


def _audio_stream(container: av.container.InputContainer, max_seconds: float) -> av.AudioStream:
    """The first audio stream, refused before decoding when its sample rate or the length it declares is out of
    bounds: decoding costs what the header claims, whatever the size of the file."""
    if not container.streams.audio:
        raise AudioDecodeError("the file holds no audio stream")
    stream = container.streams.audio[0]
    low, high = PLAUSIBLE_RATES
    if not low <= stream.sample_rate <= high:
        raise AudioDecodeError(f"the audio's sample rate is {stream.sample_rate} Hz; {low} to {high} Hz is read")
    if stream.duration is not None and stream.time_base is not None:
        seconds = float(stream.duration * stream.time_base)
    else:
        seconds = (container.duration or 0) / av.time_base
    if seconds > max_seconds:
        raise _too_long(f"{seconds:.0f} s long", max_seconds)
    return stream


def _too_long(what: str, max_seconds: float) -> AudioDecodeError:
    return AudioDecodeError(f"the audio is {what}; at most {max_seconds:g} s is read")


def _frames(container: av.container.InputContainer, stream: av.AudioStream) -> Iterator[av.AudioFrame]:
    """The stream's frames, less those that fail to decode (as faster-whisper does: one damaged MP3 frame should
    not lose the recording)."""
    for packet in container.demux(stream):
        try:
            yield from packet.decode()
        except av.InvalidDataError:
            continue


def _resampled(frames: Iterable[av.AudioFrame], rate: int, max_samples: int) -> np.ndarray:
    """Mono int16 at `rate`, refused as soon as it passes `max_samples`: a header can understate the length."""
    pieces: list[np.ndarray] = []
    total = 0
    for out in _converted(frames, rate):
        pieces.append(out.to_ndarray().reshape(-1))
        total += len(pieces[-1])
        if total > max_samples:
            raise _too_long(f"over {max_samples / rate:g} s long once decoded", max_samples / rate)
    return np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.int16)


def _converted(frames: Iterable[av.AudioFrame], rate: int) -> Iterator[av.AudioFrame]:
    """The frames as mono s16 at `rate`, with a fresh resampler wherever their rate, layout or sample format
    changes: recordings joined end to end (44.1 kHz then 8 kHz, mono then stereo) had failed one fixed
    resampler midway, a 500."""
    resampler, setup = None, None
    for frame in itertools.chain(frames, [None]):  # None: the end, which flushes the last resampler
        here = None if frame is None else (frame.sample_rate, frame.layout.name, frame.format.name)
        if resampler is not None and here != setup:
            yield from resampler.resample(None)
            resampler = None
        if frame is not None:
            if resampler is None:
                resampler, setup = av.AudioResampler(format="s16", layout="mono", rate=rate), here
            yield from resampler.resample(frame)
