import numpy as np
import pytest

from tests.conftest import read_wav
from voice.audio import (
    AudioBuffer,
    AudioFormatError,
    PcmFrame,
    Resampler,
    alaw_decode,
    alaw_encode,
    mulaw_decode,
    mulaw_encode,
    resample,
    write_wav,
)

RATE_PAIRS = [(48000, 16000), (16000, 48000), (22050, 16000), (22050, 24000), (8000, 16000), (16000, 8000)]


def sine(rate: int, seconds: float = 0.5, freq: float = 440.0, amplitude: float = 12000.0) -> np.ndarray:
    t = np.arange(int(rate * seconds)) / rate
    return (amplitude * np.sin(2 * np.pi * freq * t)).astype(np.int16)


def test_frame_validates_format() -> None:
    with pytest.raises(AudioFormatError, match="int16"):
        PcmFrame(np.zeros(10, dtype=np.float32), 16000)
    with pytest.raises(AudioFormatError, match="mono"):
        PcmFrame(np.zeros((10, 2), dtype=np.int16), 16000)
    with pytest.raises(AudioFormatError, match="11025 Hz"):
        PcmFrame(np.zeros(10, dtype=np.int16), 11025)
    with pytest.raises(AudioFormatError, match="even number of bytes"):
        PcmFrame.from_bytes(b"\x00\x01\x02", 16000)


def test_frame_bytes_round_trip_and_timing() -> None:
    samples = np.array([0, 1, -1, 32767, -32768], dtype=np.int16)
    frame = PcmFrame.from_bytes(PcmFrame(samples, 8000, 1.0).to_bytes(), 8000, timestamp=5.0)
    np.testing.assert_array_equal(frame.samples, samples)
    assert frame.to_bytes()[:4] == b"\x00\x00\x01\x00"  # little-endian on the wire
    column = PcmFrame(np.zeros((320, 1), dtype=np.int16), 16000, timestamp=2.0)
    assert column.samples.shape == (320,)
    assert column.duration == pytest.approx(0.02)
    assert column.end_time == pytest.approx(2.02)


@pytest.mark.parametrize(("in_rate", "out_rate"), RATE_PAIRS)
def test_resampler_chunked_equals_whole(in_rate: int, out_rate: int) -> None:
    signal = sine(in_rate)
    whole = resample(signal, in_rate, out_rate)

    rng = np.random.default_rng(in_rate + out_rate)
    cuts = np.sort(rng.choice(np.arange(1, len(signal)), size=60, replace=False))
    resampler = Resampler(in_rate, out_rate)
    pieces = [resampler.process(part) for part in np.split(signal, cuts)]
    chunked = np.concatenate([*pieces, resampler.flush()])

    assert abs(len(whole) - len(signal) * out_rate / in_rate) <= 2
    np.testing.assert_array_equal(chunked, whole)


@pytest.mark.parametrize(("in_rate", "out_rate"), RATE_PAIRS)
def test_resampled_sine_keeps_pitch_and_has_no_clicks(in_rate: int, out_rate: int) -> None:
    out = resample(sine(in_rate, seconds=1.0), in_rate, out_rate).astype(np.float64)
    body = out[len(out) // 10 : -len(out) // 10]  # away from the filter's start-up and tail
    spectrum = np.abs(np.fft.rfft(body * np.hanning(len(body))))
    peak_hz = np.argmax(spectrum) * out_rate / len(body)
    assert peak_hz == pytest.approx(440, abs=3)
    # A click is a jump no 440 Hz sine of this amplitude can make between two samples.
    max_step = 12000 * 2 * np.pi * 440 / out_rate
    assert np.abs(np.diff(body)).max() <= 1.05 * max_step
    assert np.abs(body).max() == pytest.approx(12000, rel=0.03)


def test_resampler_same_rate_and_reuse_after_flush() -> None:
    signal = sine(16000, 0.1)
    np.testing.assert_array_equal(Resampler(16000, 16000).process(signal), signal)
    resampler = Resampler(24000, 8000)
    first = np.concatenate([resampler.process(signal), resampler.flush()])
    second = np.concatenate([resampler.process(signal), resampler.flush()])
    np.testing.assert_array_equal(first, second)
    assert len(resampler.process(np.zeros(0, dtype=np.int16))) == 0


def test_resampler_rejects_unsupported_rate() -> None:
    with pytest.raises(AudioFormatError, match="unsupported sample rate 12345"):
        Resampler(12345, 16000)


def test_mulaw_known_values() -> None:
    linear = np.array([0, -1, 32767, -32768, 100, -100], dtype=np.int16)
    assert mulaw_encode(linear) == bytes([0xFF, 0x7F, 0x80, 0x00, 0xF2, 0x72])
    np.testing.assert_array_equal(
        mulaw_decode(bytes([0xFF, 0x80, 0x00, 0xF2, 0x72])), [0, 32124, -32124, 104, -104]
    )


def test_alaw_known_values() -> None:
    """ITU-T G.711 A-law: 0 is 0xD5 (its negative twin 0x55), full scale 0xAA / 0x2A, decoded to segment middles."""
    linear = np.array([0, -1, 32767, -32768, 100, -100], dtype=np.int16)
    assert alaw_encode(linear) == bytes([0xD5, 0x55, 0xAA, 0x2A, 0xD3, 0x53])
    np.testing.assert_array_equal(
        alaw_decode(bytes([0xD5, 0x55, 0xAA, 0x2A, 0xD3, 0x53])), [8, -8, 32256, -32256, 104, -104]
    )


def test_alaw_round_trip_error_is_within_g711_step_and_codes_are_stable() -> None:
    linear = np.arange(-32768, 32768, dtype=np.int32)
    error = np.abs(alaw_decode(alaw_encode(linear.astype(np.int16))).astype(np.int32) - linear)
    assert np.all(error <= np.maximum(np.abs(linear) / 32, 16) + 8)  # half a step: 1/32 of the magnitude, or 8
    codes = np.arange(256, dtype=np.uint8)
    assert alaw_encode(alaw_decode(codes.tobytes())) == codes.tobytes()


def test_mulaw_round_trip_error_is_within_g711_step() -> None:
    linear = np.arange(-32768, 32768, dtype=np.int32)
    decoded = mulaw_decode(mulaw_encode(linear.astype(np.int16))).astype(np.int32)
    error = np.abs(decoded - linear)
    inside = np.abs(linear) <= 32124
    # Each segment doubles the step; half a step of error is at most ~1/32 of the magnitude (+ bias).
    assert np.all(error[inside] <= np.abs(linear[inside]) / 32 + 8)
    assert np.all(decoded[~inside] == np.sign(linear[~inside]) * 32124)


def test_mulaw_codes_are_stable() -> None:
    codes = np.array([c for c in range(256) if c != 0x7F], dtype=np.uint8)  # 0x7F is "negative zero"
    assert mulaw_encode(mulaw_decode(codes.tobytes())) == codes.tobytes()


def test_buffer_matches_a_list_model_under_random_use() -> None:
    rng = np.random.default_rng(1)
    buffer, model = AudioBuffer(100), []
    counter = 0
    for _ in range(500):
        if rng.random() < 0.5:
            n = int(rng.integers(0, 130))
            samples = np.arange(counter, counter + n, dtype=np.int64).astype(np.int16)
            counter += n
            model.extend(samples.tolist())
            expected_drop = max(0, len(model) - 100)
            del model[:expected_drop]
            assert buffer.write(samples) == expected_drop
        else:
            n = int(rng.integers(0, 80))
            assert buffer.read(n).tolist() == model[:n]
            del model[:n]
        assert len(buffer) == len(model)


def test_buffer_pads_with_silence_and_reports_clear() -> None:
    buffer = AudioBuffer(10)
    buffer.write(np.array([1, 2, 3], dtype=np.int16))
    assert buffer.read(5, pad=True).tolist() == [1, 2, 3, 0, 0]
    buffer.write(np.ones(4, dtype=np.int16))
    assert buffer.clear() == 4
    assert len(buffer) == 0
    with pytest.raises(ValueError, match="capacity"):
        AudioBuffer(0)


def test_wav_round_trip(tmp_path) -> None:
    signal = sine(24000, 0.2)
    write_wav(tmp_path / "a.wav", signal, 24000)
    samples, rate = read_wav(tmp_path / "a.wav")
    assert rate == 24000
    np.testing.assert_array_equal(samples, signal)
