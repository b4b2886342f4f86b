"""Recordings as people make them (24-bit stereo WAVE_FORMAT_EXTENSIBLE, float WAV, FLAC, MP3) decode to the
pipeline's mono int16, and every bound holds whatever a header claims."""

from __future__ import annotations

import io
import struct

import av
import numpy as np
import pytest

from voice.audio_decode import AudioDecodeError, _frames, _resampled, decode_audio

RATE = 44100
TONE_HZ = 440.0


def _tone(seconds: float = 0.5) -> np.ndarray:
    """A 440 Hz tone at half scale, float in [-1, 1]."""
    t = np.arange(int(RATE * seconds)) / RATE
    return 0.5 * np.sin(2 * np.pi * TONE_HZ * t)


def _extensible_wav(mono: np.ndarray, channels: int = 2) -> bytes:
    """24-bit PCM in a WAVE_FORMAT_EXTENSIBLE header (format tag 0xFFFE, PCM sub-format), which Python's `wave`
    refuses with "unknown format: 65534"; audio editors write it for anything past 16-bit stereo."""
    ints = np.round(mono * (2**23 - 1)).astype("<i4")
    frames = np.repeat(ints[:, None], channels, axis=1).reshape(-1)
    data = b"".join(int(v).to_bytes(4, "little", signed=True)[:3] for v in frames)
    pcm_guid = bytes.fromhex("0100000000001000800000aa00389b71")
    fmt = struct.pack("<HHIIHHHHI", 0xFFFE, channels, RATE, RATE * channels * 3, channels * 3, 24, 22, 24,
                      (1 << channels) - 1) + pcm_guid
    body = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt + b"data" + struct.pack("<I", len(data)) + data
    return b"RIFF" + struct.pack("<I", len(body)) + body


def _encoded(mono: np.ndarray, container_format: str, codec: str, sample_format: str) -> bytes:
    """`mono` encoded by FFmpeg into `container_format` with `codec`, as a recorder or converter writes it."""
    out = io.BytesIO()
    with av.open(out, "w", format=container_format) as container:
        stream = container.add_stream(codec, rate=RATE, layout="mono")
        samples = mono.astype(np.float32) if sample_format == "flt" else np.round(mono * 32767).astype(np.int16)
        frame = av.AudioFrame.from_ndarray(samples[None], format=sample_format, layout="mono")
        frame.sample_rate = RATE
        for packet in [*stream.encode(frame), *stream.encode(None)]:
            container.mux(packet)
    return out.getvalue()


def _peak_hz(pcm: np.ndarray, rate: int) -> float:
    spectrum = np.abs(np.fft.rfft(pcm.astype(np.float64)))
    return float(np.fft.rfftfreq(len(pcm), 1 / rate)[np.argmax(spectrum)])


@pytest.mark.parametrize("recording", [
    pytest.param(lambda: _extensible_wav(_tone()), id="wav-extensible-24bit-stereo"),
    pytest.param(lambda: _encoded(_tone(), "wav", "pcm_f32le", "flt"), id="wav-float32"),
    pytest.param(lambda: _encoded(_tone(), "flac", "flac", "s16"), id="flac"),
    pytest.param(lambda: _encoded(_tone(), "mp3", "mp3", "s16p"), id="mp3"),
])
def test_common_recordings_decode_to_the_same_tone(recording) -> None:
    pcm = decode_audio(recording(), 16000, 600)
    assert pcm.dtype == np.int16
    assert abs(len(pcm) - 8000) <= 1200  # 0.5 s at 16 kHz; MP3 adds its encoder delay and padding
    assert abs(_peak_hz(pcm, 16000) - TONE_HZ) < 5
    assert 0.3 * 32767 < np.abs(pcm).max() < 0.7 * 32767  # half scale kept: stereo averaged, not summed


def test_a_path_decodes_as_its_bytes(tmp_path) -> None:
    path = tmp_path / "take.wav"
    path.write_bytes(_extensible_wav(_tone()))
    np.testing.assert_array_equal(decode_audio(path, 16000, 600), decode_audio(path.read_bytes(), 16000, 600))


@pytest.mark.parametrize(("recording", "fragment"), [
    (b"hello", "not a readable audio file (InvalidDataError: Invalid data found"),
    (_extensible_wav(np.zeros(0)), "contains no samples"),
    (_extensible_wav(_tone(2.0)), "the audio is 2 s long; at most 1 s is read"),
])
def test_bad_recordings_are_named(recording: bytes, fragment: str) -> None:
    with pytest.raises(AudioDecodeError, match=fragment.replace("(", r"\(")):
        decode_audio(recording, 16000, 1)


def test_decoding_stops_at_the_cap_whatever_the_header_says() -> None:
    """Headers can understate a stream's length (a WAV's is taken from the file size); the decoder counts."""
    with (av.open(io.BytesIO(_extensible_wav(_tone(2.0)))) as container,
          pytest.raises(AudioDecodeError, match="over 1 s long once decoded")):
        _resampled(_frames(container, container.streams.audio[0]), 16000, 16000)
