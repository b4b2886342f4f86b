"""The audio endpoints on the bundled models: Piper speech decodes to valid 24 kHz audio, and Whisper
transcribes that synthesised WAV back to the words that were spoken."""

from __future__ import annotations

import asyncio
import io
import json
import struct
import urllib.error
import urllib.request
import wave

import av
import numpy as np
import openai
import pytest
from aiohttp import web

from dlm.api.limits import ApiLimits
from dlm.api.live_server import LiveServer
from tests.conftest import NOISE_FREE_VOICE
from voice.asr import ASR_RATE, WhisperAsr
from voice.audio import resample
from voice.audio_api import (
    MAX_FIELD_BYTES,
    MAX_SPEECH_PHONEMES,
    MAX_UPLOAD_SECONDS,
    SPEECH_RATE,
    AudioModels,
    add_audio_routes,
)
from voice.tts import PiperTts, TtsConfig

SENTENCE = "What is the weather like in Paris today?"


@pytest.fixture(scope="module")
def audio_server():
    """Piper without its random noise: the same text is the same samples (the pcm test checks it)."""
    app = web.Application()
    models = add_audio_routes(app, AudioModels(asr=WhisperAsr(), tts=PiperTts(TtsConfig(**NOISE_FREE_VOICE))))
    with LiveServer(app) as live:
        yield live, models


@pytest.fixture(scope="module")
def audio_client(audio_server):
    return openai.OpenAI(base_url=audio_server[0].url + "/v1", api_key="unused", max_retries=0, timeout=120)


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
    with pytest.raises(openai.BadRequestError, match="not a readable audio file"):
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
    # these had been answered with a WAV of no samples, and as if speed were 1.0
    (lambda c: c.audio.speech.create(model="tts-1", voice="alloy", input="..."), "nothing the voice can speak"),
    (lambda c: c.audio.speech.create(model="tts-1", voice="alloy", input="!?"), "nothing the voice can speak"),
    (lambda c: c.audio.speech.create(model="tts-1", voice="alloy", input="hi", extra_body={"speed": True}), "speed"),
])
def test_unsupported_options_are_400(audio_client, call, fragment):
    with pytest.raises(openai.BadRequestError) as info:
        call(audio_client)
    assert fragment in info.value.message


def _wav(pcm: np.ndarray, rate: int) -> bytes:
    """A 16-bit mono WAV whose header claims `rate`, whatever the samples were recorded at."""
    data = pcm.astype("<i2").tobytes()
    fmt = struct.pack("<IHHIIHH", 16, 1, 1, rate, rate * 2, 2, 16)
    return b"RIFF" + struct.pack("<I", 36 + len(data)) + b"WAVEfmt " + fmt + b"data" + struct.pack("<I", len(data)) + data


def _transcribe(client: openai.OpenAI, wav: bytes) -> str:
    return client.audio.transcriptions.create(model="whisper-1", file=("q.wav", wav)).text


def test_telephone_rate_audio_is_transcribed(audio_client, spoken_wav):
    samples, rate = _pcm_of_wav(spoken_wav)
    text = _transcribe(audio_client, _wav(resample(samples, rate, 8000), 8000))
    assert {"weather", "paris"} <= set(text.lower().replace("?", "").split()), text


@pytest.mark.parametrize(("wav", "fragment"), [
    # 1600 samples said to be at 1 Hz: 27 minutes once resampled, which had all been decoded and transcribed
    (_wav(np.full(1600, 3000), 1), "sample rate is 1 Hz"),
    (_wav(np.zeros(8000 * (MAX_UPLOAD_SECONDS + 1)), 8000), f"at most {MAX_UPLOAD_SECONDS} s"),
])
def test_implausible_audio_is_refused_before_decoding(audio_client, wav, fragment):
    with pytest.raises(openai.BadRequestError, match=fragment):
        _transcribe(audio_client, wav)


def _mp3(pcm: np.ndarray, rate: int, layout: str = "mono") -> bytes:
    """`pcm` (int16 mono) encoded as an MP3 stream at `rate`, duplicated to both channels for stereo."""
    out = io.BytesIO()
    with av.open(out, "w", format="mp3") as container:
        stream = container.add_stream("mp3", rate=rate, layout=layout)
        channels = 2 if layout == "stereo" else 1
        samples = np.repeat(pcm.astype(np.int16)[None], channels, axis=0).T.reshape(1, -1)
        frame = av.AudioFrame.from_ndarray(np.ascontiguousarray(samples), format="s16", layout=layout)
        frame.sample_rate = rate
        for packet in [*stream.encode(frame), *stream.encode(None)]:
            container.mux(packet)
    return out.getvalue()


def test_recordings_joined_end_to_end_are_transcribed(audio_client, spoken_wav):
    """An upload whose rate and channel count change midway (MP3s concatenated, as joined recordings and radio
    streams are) had failed the resampler midway: a 500."""
    samples, rate = _pcm_of_wav(spoken_wav)
    joined = _mp3(samples, rate) + _mp3(resample(samples, rate, 8000), 8000, "stereo")
    text = _transcribe(audio_client, joined).lower()
    assert text.count("paris") == 2, text


def test_uploads_leave_live_passes_room(audio_server, spoken_wav):
    """A recording longer than a Whisper window goes to the shared worker a window at a time, so a live call's
    pass queued while the first window runs is answered before the recording is done."""
    live, models = audio_server
    samples, rate = _pcm_of_wav(spoken_wav)
    speech = resample(samples, rate, ASR_RATE)
    recording = np.tile(speech, 40 * ASR_RATE // len(speech) + 1)  # two windows

    async def race() -> tuple[bool, str]:
        upload = asyncio.ensure_future(models.asr.transcribe_recording(recording))
        await asyncio.sleep(0)  # the upload's first window is on the worker
        live_pass = asyncio.ensure_future(models.asr.transcribe_async(speech))
        done, _ = await asyncio.wait({upload, live_pass}, return_when=asyncio.FIRST_COMPLETED)
        return live_pass in done and upload not in done, (await upload).text

    live_first, text = live.call(race())
    assert live_first
    assert text.lower().count("paris") >= 2, text  # both windows transcribed


def _post_form(live: LiveServer, body: bytes, content_type: str) -> tuple[int, str]:
    """The status and error message of a raw form (the openai client only sends well-formed ones)."""
    request = urllib.request.Request(live.url + "/v1/audio/transcriptions", data=body,
                                     headers={"Content-Type": content_type})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())["error"]["message"]


@pytest.mark.parametrize(("body", "content_type"), [
    (b"--x\r\n\r\n--x--\r\n", "multipart/form-data"),  # no boundary
    (b'--x\r\nContent-Disposition: form-data; name="file"\r\n\r\nabc\r\n--x--\r\n',
     "multipart/form-data; boundary=zzz"),  # not the declared boundary
    (b'--x\r\nContent-Disposition: form-data; name="file"\r\n\r\nabc', "multipart/form-data; boundary=x"),  # cut
])
def test_broken_multipart_is_a_400(audio_server, body, content_type):
    """Each had been a 500."""
    status, message = _post_form(audio_server[0], body, content_type)
    assert status == 400, message
    assert "the multipart form cannot be read" in message


def _part(name: str, data: bytes) -> bytes:
    return b'--x\r\nContent-Disposition: form-data; name="%s"\r\n\r\n%s\r\n' % (name.encode(), data)


@pytest.mark.parametrize(("parts", "status", "fragment"), [
    ([_part("prompt", b"a" * (1 << 20))], 400, "Unrecognized request argument supplied: prompt"),
    ([_part("model", b"w" * (MAX_FIELD_BYTES + 1))], 413, "'model' is too large"),
    ([_part("model", b"whisper-1"), _part("model", b"whisper-1")], 400, "'model' is given more than once"),
])
def test_form_fields_are_bounded(audio_server, parts, status, fragment):
    got, message = _post_form(audio_server[0], b"".join(parts) + b"--x--\r\n", "multipart/form-data; boundary=x")
    assert got == status, message
    assert fragment in message


def test_form_is_bounded_as_a_whole():
    """Parts each under the limit still may not add up past it."""
    app = web.Application()
    add_audio_routes(app, AudioModels(limits=ApiLimits(max_audio_bytes=1000)))
    with LiveServer(app) as live:
        body = _part("model", b"w" * 600) + _part("file", b"a" * 600) + b"--x--\r\n"
        status, message = _post_form(live, body, "multipart/form-data; boundary=x")
    assert status == 413, message
    assert "'file' is too large: the form may hold 1000 bytes" in message


@pytest.mark.parametrize(("extra", "fragment"), [
    ({"stream_format": "sse"}, "only stream_format 'audio'"),  # had been answered with raw WAV
    ({"pitch": 2}, "Unrecognized request argument supplied: pitch"),
])
def test_unsupported_speech_fields_are_400(audio_client, extra, fragment):
    with pytest.raises(openai.BadRequestError, match=fragment):
        audio_client.audio.speech.create(model="tts-1", voice="alloy", input="Hi.", extra_body=extra)


def test_speech_longer_than_its_cap_is_refused_before_rendering(audio_client):
    """4096 characters the voice spells out one by one had held a core 4 minutes (51 minutes of audio); English
    at OpenAI's 4096-character limit stays well inside the cap."""
    with pytest.raises(openai.BadRequestError, match=r"'input' would be \d+ phonemes of speech, over 12000"):
        audio_client.audio.speech.create(model="tts-1", voice="alloy", input="你好" * 2048)


def test_busy_speech_is_a_429(audio_server, audio_client):
    _, models = audio_server
    with models.speech_gate.slot(), models.speech_gate.slot(), pytest.raises(openai.RateLimitError):
        audio_client.audio.speech.create(model="tts-1", voice="alloy", input="Hi.")


def test_unpunctuated_speech_is_rendered_in_bounded_pieces(audio_server):
    """Piper ends a sentence only at punctuation; one without any had been one model call, its memory growing
    with all of its audio."""
    tts = audio_server[1].tts
    pieces = list(tts.stream("and then " * 60, SPEECH_RATE))
    assert len(pieces) >= 2
    assert max(len(p) for p in pieces) / SPEECH_RATE < 15
    assert sum(tts.sentence_phonemes("The weather in Paris is mild today. " * 113)) < MAX_SPEECH_PHONEMES
