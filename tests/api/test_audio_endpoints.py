"""The audio endpoints on the bundled models: Piper speech decodes to valid 24 kHz audio, and Whisper
transcribes that synthesised WAV back to the words that were spoken."""

from __future__ import annotations

import io
import wave

import numpy as np
import openai
import pytest
from aiohttp import web

from dlm.api.live_server import LiveServer
from tests.conftest import NOISE_FREE_VOICE
from voice.audio_api import SPEECH_RATE, AudioModels, add_audio_routes
from voice.tts import PiperTts, TtsConfig

SENTENCE = "What is the weather like in Paris today?"


@pytest.fixture(scope="module")
def audio_client():
    """Piper without its random noise: the same text is the same samples (the pcm test checks it)."""
    app = web.Application()
    add_audio_routes(app, AudioModels(tts=PiperTts(TtsConfig(**NOISE_FREE_VOICE))))
    with LiveServer(app) as live:
        yield openai.OpenAI(base_url=live.url + "/v1", api_key="unused", max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def spoken_wav(audio_client) -> bytes:
    return audio_client.audio.speech.create(model="tts-1", voice="alloy", input=SENTENCE,
                                            response_format="wav").read()


def _pcm_of_wav(data: bytes) -> tuple[np.ndarray, int]:
    """Read a streamed WAV, whose header cannot know the length: the samples run to the end of the data."""
    with wave.open(io.BytesIO(data)) as w:
        assert (w.getnchannels(), w.getsampwidth()) == (1, 2)
        rate = w.getframerate()
    return np.frombuffer(data[44:], dtype="<i2"), rate


def test_speech_wav_is_valid_audio_at_24khz(spoken_wav):
    samples, rate = _pcm_of_wav(spoken_wav)
    assert rate == SPEECH_RATE
    assert 1.0 < len(samples) / rate < 6.0
    assert np.abs(samples).max() > 3000  # speech, not silence


def test_speech_pcm_is_raw_int16(audio_client, spoken_wav):
    pcm = audio_client.audio.speech.create(model="tts-1", voice="alloy", input=SENTENCE,
                                           response_format="pcm").read()
    assert len(pcm) % 2 == 0 and pcm[:4] != b"RIFF"
    samples = np.frombuffer(pcm, dtype="<i2")
    assert np.array_equal(samples, _pcm_of_wav(spoken_wav)[0])  # the same rendering, without the header
    assert np.abs(samples).max() > 3000


@pytest.mark.parametrize("fmt", ["json", "verbose_json", "text"])
def test_transcribes_synthesised_speech(audio_client, spoken_wav, fmt):
    result = audio_client.audio.transcriptions.create(model="whisper-1", file=("q.wav", spoken_wav),
                                                      response_format=fmt)
    text = result if isinstance(result, str) else result.text
    words = set(text.lower().replace("?", "").split())
    assert {"weather", "paris", "today"} <= words, text
    if fmt == "verbose_json":
        assert result.duration == pytest.approx(len(_pcm_of_wav(spoken_wav)[0]) / SPEECH_RATE, rel=0.01)


def test_bad_audio_is_a_400(audio_client):
    with pytest.raises(openai.BadRequestError, match="could not decode the audio"):
        audio_client.audio.transcriptions.create(model="whisper-1", file=("x.wav", b"RIFF not really audio"))


@pytest.mark.parametrize(("call", "fragment"), [
    (lambda c: c.audio.transcriptions.create(model="whisper-1", file=("q.wav", b"x"), response_format="srt"),
     "response_format"),
    (lambda c: c.audio.transcriptions.create(model="whisper-1", file=("q.wav", b"x"), language="fr"),
     "English only"),
    # these had been ignored, the transcript as if they were not sent
    (lambda c: c.audio.transcriptions.create(model="whisper-1", file=("q.wav", b"x"), temperature=0.7),
     "only temperature 0"),
    (lambda c: c.audio.transcriptions.create(model="whisper-1", file=("q.wav", b"x"), extra_body={"temperature": "hot"}),
     "'temperature' must be a number"),
    (lambda c: c.audio.transcriptions.create(model="whisper-1", file=("q.wav", b"x"), prompt="paris"),
     "Unrecognized request argument supplied: prompt"),
    (lambda c: c.audio.speech.create(model="tts-1", voice="alloy", input="hi", response_format="mp3"),
     "response_format"),
    (lambda c: c.audio.speech.create(model="tts-1", voice="alloy", input="hi", speed=2.0), "speed"),
    (lambda c: c.audio.speech.create(model="tts-1", voice="alloy", input="   "), "input"),
])
def test_unsupported_options_are_400(audio_client, call, fragment):
    with pytest.raises(openai.BadRequestError) as info:
        call(audio_client)
    assert fragment in info.value.message
