"""The turn state machine on the real webrtcvad, with a harmonic buzz that it classifies as speech."""

import numpy as np
import pytest

from voice.audio import AudioFormatError, PcmFrame
from voice.vad import VAD_RATE, TurnDetector, VadConfig, VadEventKind

T0 = 100.0
K = VadEventKind


def buzz(seconds: float) -> np.ndarray:
    t = np.arange(int(VAD_RATE * seconds)) / VAD_RATE
    return ((((t * 150) % 1) * 2 - 1) * 10000).astype(np.int16)


def silence(seconds: float) -> np.ndarray:
    return np.zeros(int(VAD_RATE * seconds), dtype=np.int16)


def run(signal: np.ndarray, detector: TurnDetector | None = None, chunk: int = 320, t0: float = T0):
    detector = detector or TurnDetector()
    events = []
    for start in range(0, len(signal), chunk):
        events += detector.process(PcmFrame(signal[start : start + chunk], VAD_RATE, t0 + start / VAD_RATE))
    return events


def kinds(events) -> list[VadEventKind]:
    return [e.kind for e in events if e.kind is not K.AUDIO]


def test_silence_gives_no_events() -> None:
    assert run(silence(2.0)) == []


def test_one_turn_with_boundaries_preroll_and_contiguous_audio() -> None:
    config = VadConfig(min_speech_ms=210, hangover_ms=300, preroll_ms=300)
    events = run(np.concatenate([silence(0.6), buzz(1.0), silence(1.0)]), TurnDetector(config))
    assert kinds(events) == [K.SPEECH_STARTED, K.SILENCE_STARTED, K.TURN_ENDED]
    started, paused, ended = (e for e in events if e.kind is not K.AUDIO)

    assert started.timestamp == pytest.approx(T0 + 0.6, abs=0.031)
    # webrtcvad reports silence ~90 ms late; the detector places the end where the energy stopped.
    assert paused.timestamp == pytest.approx(T0 + 1.6, abs=0.011)
    assert ended.speech_end == paused.timestamp
    assert ended.timestamp - ended.speech_end == pytest.approx(0.3, abs=0.031)

    # Pre-roll: the audio handed over starts 300 ms before the detected speech, in silence.
    preroll = round(0.3 * VAD_RATE)
    assert len(started.audio) == preroll + round(0.21 * VAD_RATE)
    assert not started.audio[: preroll - 480].any()
    assert started.audio[preroll + 480 :].any()

    # Every sample from the pre-roll to the end of the turn reaches the consumer exactly once.
    total = len(started.audio) + sum(len(e.audio) for e in events if e.kind is K.AUDIO)
    first_sample = started.audio_start
    assert first_sample == pytest.approx(started.timestamp - 0.3, abs=1e-9)
    assert total == pytest.approx((ended.timestamp - first_sample) * VAD_RATE, abs=1)


def test_short_click_is_not_a_turn_but_a_short_word_is() -> None:
    assert run(np.concatenate([silence(0.5), buzz(0.04), silence(1.0)])) == []
    assert kinds(run(np.concatenate([silence(0.5), buzz(0.25), silence(1.0)])))[0] is K.SPEECH_STARTED


def test_pause_shorter_than_hangover_resumes_the_same_turn() -> None:
    signal = np.concatenate([silence(0.5), buzz(0.6), silence(0.25), buzz(0.6), silence(1.0)])
    events = run(signal, TurnDetector(VadConfig(hangover_ms=400)))
    assert kinds(events) == [
        K.SPEECH_STARTED,
        K.SILENCE_STARTED,
        K.SPEECH_RESUMED,
        K.SILENCE_STARTED,
        K.TURN_ENDED,
    ]
    resumed = next(e for e in events if e.kind is K.SPEECH_RESUMED)
    assert resumed.timestamp == pytest.approx(T0 + 1.35, abs=0.031)


def test_pause_longer_than_hangover_makes_two_turns() -> None:
    signal = np.concatenate([silence(0.5), buzz(0.6), silence(0.6), buzz(0.6), silence(1.0)])
    assert kinds(run(signal, TurnDetector(VadConfig(hangover_ms=300)))) == [
        K.SPEECH_STARTED,
        K.SILENCE_STARTED,
        K.TURN_ENDED,
        K.SPEECH_STARTED,
        K.SILENCE_STARTED,
        K.TURN_ENDED,
    ]


def test_retuning_mid_turn_keeps_the_turn_and_applies_from_the_next_frame() -> None:
    """A Realtime session.update may lengthen the hangover while the caller speaks: the pause that would
    have split the turn in two (the test above) is now inside one turn, which ends a whole second later."""
    detector = TurnDetector(VadConfig(hangover_ms=300))
    events = run(np.concatenate([silence(0.5), buzz(0.4)]), detector)
    detector.retune(VadConfig(hangover_ms=1000, preroll_ms=0, aggressiveness=3))
    signal = np.concatenate([buzz(0.2), silence(0.6), buzz(0.6), silence(1.5)])
    events += run(signal, detector, t0=T0 + 0.9)
    assert kinds(events) == [K.SPEECH_STARTED, K.SILENCE_STARTED, K.SPEECH_RESUMED, K.SILENCE_STARTED,
                             K.TURN_ENDED]
    ended = events[-1]
    assert ended.timestamp - ended.speech_end == pytest.approx(1.0, abs=0.031)


def test_events_do_not_depend_on_chunk_size() -> None:
    signal = np.concatenate([silence(0.5), buzz(0.6), silence(0.25), buzz(0.4), silence(0.8)])

    def summary(chunk: int):
        events = run(signal, TurnDetector(VadConfig(hangover_ms=400)), chunk=chunk)
        return [(e.kind, round(e.timestamp, 6), len(e.audio)) for e in events if e.kind is not K.AUDIO]

    assert summary(160) == summary(480) == summary(1601)


def test_long_turn_is_cut_at_max_turn() -> None:
    events = run(np.concatenate([silence(0.3), buzz(2.0)]), TurnDetector(VadConfig(max_turn_ms=1000)))
    assert kinds(events)[:2] == [K.SPEECH_STARTED, K.TURN_ENDED]
    start, end = [e for e in events if e.kind is not K.AUDIO][:2]
    assert end.timestamp - start.timestamp == pytest.approx(1.0, abs=0.031)


def test_force_end_closes_an_open_turn_only() -> None:
    detector = TurnDetector()
    assert detector.force_end(T0) == []
    run(np.concatenate([silence(0.3), buzz(0.5)]), detector)
    assert detector.in_turn
    (event,) = detector.force_end(T0 + 1.0)
    assert event.kind is K.TURN_ENDED and event.speech_end == T0 + 1.0
    assert not detector.in_turn


def test_rejects_wrong_rate_and_bad_config() -> None:
    with pytest.raises(AudioFormatError, match="16000 Hz"):
        TurnDetector().process(PcmFrame(np.zeros(480, dtype=np.int16), 8000))
    with pytest.raises(ValueError, match="aggressiveness"):
        VadConfig(aggressiveness=4)
    with pytest.raises(ValueError, match="hangover_ms"):
        VadConfig(hangover_ms=0)
    with pytest.raises(ValueError, match="silence_start_ms"):
        VadConfig(silence_start_ms=500, hangover_ms=300)
