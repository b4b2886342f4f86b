"""Real speech through the real components: Piper speaks, webrtcvad finds the turn, tiny.en hears it."""

import asyncio
import itertools

import numpy as np
import pytest

from tests.conftest import NOISE_FREE_VOICE
from voice.asr import ASR_RATE, StreamingTranscriber, WhisperAsr
from voice.audio import AudioFormatError, PcmFrame, resample
from voice.local_agreement import normalize_word
from voice.tts import PiperTts, TtsConfig, trim_silence
from voice.vad import TurnDetector, VadConfig, VadEventKind

K = VadEventKind
LEAD, TAIL = 0.6, 1.0  # silence around the spoken question, seconds


@pytest.fixture(scope="module")
def tts() -> PiperTts:
    voice = PiperTts(TtsConfig(**NOISE_FREE_VOICE))
    yield voice
    voice.close()


@pytest.fixture(scope="module")
def asr() -> WhisperAsr:
    model = WhisperAsr()
    yield model
    model.close()


@pytest.fixture(scope="module")
def question(tts: PiperTts) -> np.ndarray:
    """The spoken question at 16 kHz, resampled from the voice's 22.05 kHz."""
    return resample(tts.synthesize("What is the capital of France?"), tts.sample_rate, ASR_RATE)


@pytest.fixture(scope="module")
def padded(question: np.ndarray) -> np.ndarray:
    lead, tail = np.zeros(int(LEAD * ASR_RATE), np.int16), np.zeros(int(TAIL * ASR_RATE), np.int16)
    return np.concatenate([lead, question, tail])


def energy_bounds(audio: np.ndarray, threshold: int = 300) -> tuple[float, float]:
    loud = np.nonzero(np.abs(audio) > threshold)[0]
    return loud[0] / ASR_RATE, (loud[-1] + 1) / ASR_RATE


def chunks(signal: np.ndarray, size: int = 320):
    for start in range(0, len(signal), size):
        yield PcmFrame(signal[start : start + size], ASR_RATE, start / ASR_RATE)


def words(text: str) -> list[str]:
    return [normalize_word(w) for w in text.split()]


def test_tts_speaks_at_every_transport_rate(tts: PiperTts, asr: WhisperAsr) -> None:
    for rate in (8000, 16000, 24000, 48000):
        pcm = tts.synthesize("Hello there.", rate)
        assert pcm.dtype == np.int16
        assert 0.3 < len(pcm) / rate < 2.0
        assert 3000 < np.abs(pcm).max() < 32767  # audible, and the headroom kept resampling from clipping
    phone = tts.synthesize("The answer is forty two.", 8000)
    heard = asr.transcribe(resample(phone, 8000, ASR_RATE))
    assert words(heard.text) == ["the", "answer", "is", "42"]  # the 8 kHz phone rendering is intelligible


def test_tts_starts_speaking_at_once_and_keeps_a_short_pause(tts: PiperTts) -> None:
    pcm = tts.synthesize("Well, it depends.", 24000)
    loud = np.nonzero(np.abs(pcm) > 300)[0]
    assert loud[0] / 24000 <= 0.010  # Piper itself starts this one ~60 ms late
    assert 0.05 <= (len(pcm) - loud[-1]) / 24000 <= 0.16


def test_trim_silence_edges() -> None:
    pcm = np.concatenate([np.zeros(1000, np.int16), np.full(100, 5000, np.int16), np.zeros(5000, np.int16)])
    trimmed = trim_silence(pcm, 16000, max_trailing_ms=100)
    assert len(trimmed) == 80 + 100 + 1600
    assert len(trim_silence(np.zeros(500, np.int16), 16000, 100)) == 0


def test_tts_streams_one_piece_per_sentence_and_rejects_bad_input(tts: PiperTts) -> None:
    assert len(list(tts.stream("One. Two.", 16000))) == 2
    assert len(tts.synthesize("  ... ", 16000)) == 0
    with pytest.raises(AudioFormatError, match="unsupported sample rate"):
        tts.synthesize("Hello.", 11025)


def test_vad_finds_the_spoken_turn(padded: np.ndarray, question: np.ndarray) -> None:
    config = VadConfig(hangover_ms=300)
    detector = TurnDetector(config)
    events = [e for frame in chunks(padded) for e in detector.process(frame)]
    turn = [e for e in events if e.kind in (K.SPEECH_STARTED, K.TURN_ENDED)]
    assert [e.kind for e in turn] == [K.SPEECH_STARTED, K.TURN_ENDED]
    started, ended = turn

    start, end = energy_bounds(question)
    assert started.timestamp == pytest.approx(LEAD + start, abs=0.035)
    assert ended.speech_end == pytest.approx(LEAD + end, abs=0.035)
    assert ended.timestamp - ended.speech_end == pytest.approx(0.3, abs=0.031)

    # The turn's audio (pre-roll included) holds the whole utterance, first syllable included.
    audio = np.concatenate([started.audio, *(e.audio for e in events if e.kind is K.AUDIO)])
    first = round((started.timestamp - config.preroll_ms / 1000) * ASR_RATE)
    np.testing.assert_array_equal(audio, padded[first : first + len(audio)])
    assert first < (LEAD + start) * ASR_RATE and first + len(audio) > (LEAD + end) * ASR_RATE


def test_transcribes_the_question(asr: WhisperAsr, question: np.ndarray) -> None:
    result = asr.transcribe(question)
    assert result.rejected is None
    assert {"what", "capital", "france"} <= set(words(result.text))


async def test_streaming_partials_grow_and_confirmed_words_prefix_the_final(
    asr: WhisperAsr, padded: np.ndarray
) -> None:
    transcriber = StreamingTranscriber(asr, partial_interval_ms=400)
    detector = TurnDetector(VadConfig(hangover_ms=300))
    final = None
    for frame in chunks(padded):
        for event in detector.process(frame):
            if event.kind is K.SPEECH_STARTED:
                transcriber.start_turn(event.audio, event.audio_start)
            elif event.kind is K.AUDIO:
                transcriber.feed(event.audio)
            elif event.kind is K.SILENCE_STARTED:
                transcriber.start_final(event.timestamp)
            elif event.kind is K.SPEECH_RESUMED:
                transcriber.discard_final()
            elif event.kind is K.TURN_ENDED:
                final = await transcriber.final()
        await transcriber.idle()  # each pass finishes before more audio: the pace of a slow CPU
    partials = []
    while not transcriber.partials.empty():
        partials.append(transcriber.partials.get_nowait())

    assert final is not None and {"capital", "france"} <= set(words(final.text))
    assert len(partials) >= 3
    assert transcriber.passes <= len(partials) + 1
    assert [p.audio_ms for p in partials] == sorted({p.audio_ms for p in partials})
    confirmed = [words(p.confirmed) for p in partials]
    for earlier, later in itertools.pairwise(confirmed):
        assert later[: len(earlier)] == earlier
    assert confirmed[-1], "no word was confirmed before the end of the turn"
    assert words(final.text)[: len(confirmed[-1])] == confirmed[-1]
    assert len(words(partials[0].text)) < len(words(final.text))


async def test_a_running_pass_that_heard_all_the_speech_is_taken_as_the_final(
    asr: WhisperAsr, question: np.ndarray
) -> None:
    transcriber = StreamingTranscriber(asr, partial_interval_ms=400)
    tail = np.zeros(int(0.1 * ASR_RATE), dtype=np.int16)
    transcriber.start_turn(np.concatenate([question, tail]), audio_start=10.0)  # starts a partial pass
    _, end = energy_bounds(question)
    result = await transcriber.start_final(speech_end=10.0 + end)
    assert transcriber.passes == 1
    assert {"capital", "france"} <= set(words(result.text))
    assert "france" in words((await transcriber.partials.get()).text)


async def test_a_pass_that_missed_the_end_of_speech_is_not_the_final(
    asr: WhisperAsr, question: np.ndarray
) -> None:
    transcriber = StreamingTranscriber(asr, partial_interval_ms=400)
    half = len(question) // 2
    transcriber.start_turn(question[:half], audio_start=10.0)  # a partial pass hears only half
    transcriber.feed(question[half:])
    _, end = energy_bounds(question)
    result = await transcriber.start_final(speech_end=10.0 + end)
    assert transcriber.passes == 2
    assert "france" in words(result.text)


async def test_discarded_speculative_final_becomes_a_partial(asr: WhisperAsr, question: np.ndarray) -> None:
    transcriber = StreamingTranscriber(asr, partial_interval_ms=60_000)
    half = len(question) // 2
    transcriber.start_turn(question[:half])
    transcriber.start_final()
    transcriber.discard_final()  # the person went on talking
    transcriber.feed(question[half:])
    final = await transcriber.final()
    assert "france" in words(final.text)
    demoted = await asyncio.wait_for(transcriber.partials.get(), timeout=30)
    assert demoted.audio_ms == pytest.approx(1000 * half / ASR_RATE)
    assert "france" not in words(demoted.text)


def test_silence_noise_and_too_short_give_no_transcript(asr: WhisperAsr, question: np.ndarray) -> None:
    silence = asr.transcribe(np.zeros(2 * ASR_RATE, dtype=np.int16))
    assert (silence.text, silence.rejected) == ("", "silence")

    noise = np.random.default_rng(0).normal(0, 1000, 2 * ASR_RATE).astype(np.int16)
    heard = asr.transcribe(noise)
    assert heard.text == ""
    assert heard.rejected in {"no_speech", "phantom", "empty"}

    short = asr.transcribe(question[: int(0.2 * ASR_RATE)])
    assert (short.text, short.rejected) == ("", "too_short")


def test_a_clearly_spoken_thank_you_is_kept(asr: WhisperAsr, tts: PiperTts) -> None:
    spoken = resample(tts.synthesize("Thank you."), tts.sample_rate, ASR_RATE)
    result = asr.transcribe(spoken)
    assert result.rejected is None
    assert words(result.text) == ["thank", "you"]


def test_a_short_final_window_whose_words_are_rejected_listens_again_through_30_s(tts: PiperTts, asr: WhisperAsr) -> None:
    # `python -m latency_bench asr-window` found this one: a lone "Goodbye." in 10 s is an unsure phantom.
    pcm = np.concatenate([resample(tts.synthesize("Goodbye."), tts.sample_rate, ASR_RATE),
                          np.zeros(ASR_RATE // 2, dtype=np.int16)])
    assert asr.transcribe(pcm, 10).rejected
    assert "goodbye" in asr.transcribe(pcm, 10, sure=True).text.lower()


def test_piper_threads_sleep_between_runs_and_the_voice_is_piper_s_own(tts: PiperTts) -> None:
    """`load_voice` builds the session itself (threads that do not spin, see its docstring), and must speak as
    the voice `piper` loads: the same samples for the same text, noise off."""
    from piper import PiperVoice, SynthesisConfig

    from voice.models import piper_voice_files

    options = tts._voice.session.get_session_options()
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    stock = PiperVoice.load(*piper_voice_files())
    quiet = SynthesisConfig(noise_scale=0.0, noise_w_scale=0.0, volume=tts.config.volume)
    assert tts._voice.config == stock.config
    ours, theirs = (np.concatenate([c.audio_int16_array for c in v.synthesize("Paris.", quiet)])
                    for v in (tts._voice, stock))
    assert len(ours) > 0.2 * tts.sample_rate and np.array_equal(ours, theirs)


def test_numpy_blas_runs_on_one_thread_once_whisper_loads(asr: WhisperAsr) -> None:
    """`one_blas_thread` (see its docstring): after Whisper loads, numpy's BLAS has one thread, so none is left
    spinning beside the LM; the features it computes are the same as with two."""
    from threadpoolctl import threadpool_info, threadpool_limits

    blas = [pool for pool in threadpool_info() if pool["user_api"] == "blas"]
    assert blas and all(pool["num_threads"] == 1 for pool in blas)
    audio = np.random.default_rng(0).normal(0, 0.03, 32000).astype(np.float32)
    one = asr._model.feature_extractor(audio)
    with threadpool_limits(2, user_api="blas"):
        two = asr._model.feature_extractor(audio)
    assert one.shape[0] == 80 and np.allclose(one, two, atol=1e-5)
