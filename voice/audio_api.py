"""OpenAI's audio endpoints on the bundled models: `POST /v1/audio/transcriptions` (Whisper tiny.en) and
`POST /v1/audio/speech` (Piper, streamed sentence by sentence as WAV or raw PCM).

They are routes a server mounts with :func:`add_audio_routes`; the models load on the first request unless
the server hands over the instances its voice pipeline already warmed.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from aiohttp import BodyPartReader, MultipartReader, web

from dlm.api.errors import APIError, bad_request, error_middleware
from dlm.api.limits import ApiLimits, ConcurrencyGate, read_json
from voice.asr import ASR_RATE, Transcription, WhisperAsr
from voice.audio_decode import AudioDecodeError, decode_audio
from voice.tts import PiperTts

SPEECH_RATE = 24000  # OpenAI's wav and pcm speech are 24 kHz 16-bit mono
TRANSCRIPTION_FORMATS = ("json", "text", "verbose_json")
TRANSCRIPTION_FIELDS = {"file", "model", "response_format", "language", "temperature"}
SPEECH_FIELDS = {"model", "input", "voice", "instructions", "response_format", "speed", "stream_format"}
SPEECH_FORMATS = ("wav", "pcm")
MAX_FIELD_BYTES = 4096
"""Longest text field of a transcription form: they hold names and numbers; only 'file' is large."""
MAX_UPLOAD_SECONDS = 600
"""Longest recording transcribed: bounds the decoded audio (~19 MB) and the Whisper time it shares with the live
calls (~20 windows of 30 s)."""
MAX_CONCURRENT_TRANSCRIPTIONS = 2
"""Uploads decoded and transcribed at once (each holds up to the audio limit in memory); the next gets 429.
Each queues one Whisper window at a time, so a live call's pass waits for at most this many windows."""
MAX_SPEECH_PHONEMES = 12_000
"""Longest speech one request renders, about 9 minutes: 4096 characters of English (OpenAI's input limit) take
~4,600 phonemes, but the voice spells out a script it cannot read letter by letter (~15 phonemes a character),
and 4096 such characters had held a core for 4 minutes making 51 minutes of audio."""
MAX_CONCURRENT_SPEECH = 2
"""Speech requests synthesised at once: Piper takes both CPU cores the live calls need too; the next gets 429."""
_STATE = web.AppKey("audio_api", object)


@dataclass
class AudioModels:
    """The models behind the endpoints, loaded once on first use (loading Whisper takes seconds)."""

    asr: WhisperAsr | None = None
    tts: PiperTts | None = None
    limits: ApiLimits = field(default_factory=ApiLimits)
    transcription_gate: ConcurrencyGate = field(default_factory=lambda: ConcurrencyGate(MAX_CONCURRENT_TRANSCRIPTIONS))
    speech_gate: ConcurrencyGate = field(default_factory=lambda: ConcurrencyGate(MAX_CONCURRENT_SPEECH))
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def whisper(self) -> WhisperAsr:
        async with self._lock:
            if self.asr is None:
                self.asr = await asyncio.to_thread(WhisperAsr)
        return self.asr

    async def piper(self) -> PiperTts:
        async with self._lock:
            if self.tts is None:
                self.tts = await asyncio.to_thread(PiperTts)
        return self.tts


def add_audio_routes(app: web.Application, models: AudioModels | None = None) -> AudioModels:
    """Mount both endpoints on `app` (before it starts); returns the model holder it will use."""
    models = models or AudioModels()
    app[_STATE] = models
    if error_middleware not in app.middlewares:
        app.middlewares.append(error_middleware)
    app.router.add_post("/v1/audio/transcriptions", transcriptions)
    app.router.add_post("/v1/audio/speech", speech)
    return models


def _refuse_unknown(names: Iterable[str], known: set[str]) -> None:
    """OpenAI's answer to a field it does not define; accepting it silently would pretend to honour it."""
    if unknown := sorted(set(names) - known):
        raise bad_request(f"Unrecognized request argument supplied: {unknown[0]}", unknown[0])


async def _form(request: web.Request, max_bytes: int) -> dict[str, Any]:
    """The multipart fields: `file` as bytes, the rest as strings; `max_bytes` bounds the whole form."""
    if not request.content_type.startswith("multipart/"):
        raise bad_request("send the audio as multipart/form-data with a 'file' field", "file")
    try:
        return await _read_parts(await request.multipart(), max_bytes)
    except ValueError as err:  # aiohttp's: no boundary, a body that does not follow it, or one cut short
        raise bad_request(f"the multipart form cannot be read: {err}", code="invalid_request") from None


async def _read_parts(reader: MultipartReader, max_bytes: int) -> dict[str, Any]:
    """Each part checked by its headers before its data is read, so a refused one costs nothing to hold."""
    fields: dict[str, Any] = {}
    room = max_bytes
    async for part in reader:
        if not isinstance(part, BodyPartReader) or part.name is None:
            raise bad_request("every part of the form needs a name (Content-Disposition: form-data; name=...)")
        _refuse_unknown([part.name], TRANSCRIPTION_FIELDS)
        if part.name in fields:
            raise bad_request(f"'{part.name}' is given more than once", part.name)
        data = await _read_part(part, room if part.name == "file" else min(room, MAX_FIELD_BYTES), max_bytes)
        room -= len(data)
        fields[part.name] = data if part.name == "file" else data.decode("utf-8", "replace")
    return fields


async def _read_part(part: BodyPartReader, limit: int, max_bytes: int) -> bytes:
    """The part's data, refused with 413 as soon as it passes `limit` (what is left of the form's `max_bytes`)."""
    data = bytearray()
    while chunk := await part.read_chunk(1 << 16):
        data += chunk
        if len(data) > limit:
            raise APIError(413, f"'{part.name}' is too large: the form may hold {max_bytes} bytes, a field other "
                                f"than 'file' {MAX_FIELD_BYTES}", part.name, "request_too_large")
    return bytes(data)


def _decode_upload(data: bytes) -> np.ndarray:
    """The uploaded recording as 16 kHz mono int16 PCM of at most MAX_UPLOAD_SECONDS, or a 400 naming why not."""
    try:
        return decode_audio(data, ASR_RATE, MAX_UPLOAD_SECONDS)
    except AudioDecodeError as err:
        raise bad_request(str(err), "file") from None


async def transcriptions(request: web.Request) -> web.StreamResponse:
    models: AudioModels = request.app[_STATE]
    with models.transcription_gate.slot():
        return await _transcribe(request, models)


async def _transcribe(request: web.Request, models: AudioModels) -> web.StreamResponse:
    form = await _form(request, models.limits.max_audio_bytes)
    if "file" not in form or not form["file"]:
        raise bad_request("'file' is required", "file")
    if not form.get("model"):
        raise bad_request("'model' is required", "model")
    fmt = form.get("response_format", "json")
    if fmt not in TRANSCRIPTION_FORMATS:
        raise bad_request(f"response_format must be one of {', '.join(TRANSCRIPTION_FORMATS)}, got {fmt!r}",
                          "response_format")
    if form.get("language", "en") != "en":
        raise bad_request("the bundled Whisper (tiny.en) transcribes English only: language must be 'en'",
                          "language")
    _check_greedy(form.get("temperature", "0"))
    pcm = await asyncio.to_thread(_decode_upload, form["file"])
    asr = await models.whisper()
    result = await asr.transcribe_recording(pcm)
    if fmt == "text":
        return web.Response(text=result.text + "\n", content_type="text/plain")
    if fmt == "json":
        return web.json_response({"text": result.text})
    return web.json_response(_verbose(result))


def _check_greedy(temperature: str) -> None:
    """Whisper decodes greedily here (beam 1, no temperature fallback), so only temperature 0 is honest."""
    try:
        value = float(temperature)
    except ValueError:
        raise bad_request("'temperature' must be a number", "temperature") from None
    if value != 0:
        raise bad_request(f"only temperature 0 is supported (greedy decoding), got {value:g}", "temperature")


def _verbose(result: Transcription) -> dict[str, Any]:
    """verbose_json with one segment spanning the clip: the wrapper decodes without timestamps."""
    seconds = result.audio_ms / 1000
    segments = [] if not result.text else [{
        "id": 0, "seek": 0, "start": 0.0, "end": seconds, "text": result.text, "tokens": [],
        "temperature": 0.0, "avg_logprob": result.avg_logprob, "compression_ratio": 1.0,
        "no_speech_prob": result.no_speech_prob,
    }]
    return {"task": "transcribe", "language": "english", "duration": seconds, "text": result.text,
            "segments": segments}


def wav_stream_header(sample_rate: int) -> bytes:
    """A 16-bit mono WAV header whose sizes say "until the end": the length is unknown while streaming."""
    unknown = 0xFFFFFFFF
    return (b"RIFF" + struct.pack("<I", unknown) + b"WAVEfmt "
            + struct.pack("<IHHIIHH", 16, 1, 1, sample_rate, sample_rate * 2, 2, 16)
            + b"data" + struct.pack("<I", unknown))


async def speech(request: web.Request) -> web.StreamResponse:
    models: AudioModels = request.app[_STATE]
    body = await read_json(request, models.limits.max_body_bytes)
    _refuse_unknown(body, SPEECH_FIELDS)
    text = body.get("input")
    if not isinstance(text, str) or not text.strip():
        raise bad_request("'input' must be a non-empty string", "input")
    if len(text) > models.limits.max_speech_chars:
        raise bad_request(f"'input' is longer than {models.limits.max_speech_chars} characters", "input")
    if not isinstance(body.get("model"), str) or not isinstance(body.get("voice"), (str, dict)):
        raise bad_request("'model' and 'voice' are required (there is one bundled voice; any name selects it)",
                          "voice")
    fmt = body.get("response_format", "wav")  # OpenAI defaults to mp3, which is not bundled
    if fmt not in SPEECH_FORMATS:
        raise bad_request(f"response_format must be one of {', '.join(SPEECH_FORMATS)} here, got {fmt!r}",
                          "response_format")
    speed = body.get("speed", 1.0)
    if isinstance(speed, bool) or speed != 1.0:
        raise bad_request("only speed 1.0 is supported by the bundled Piper voice", "speed")
    if body.get("instructions"):
        raise bad_request("'instructions' are not supported by the bundled Piper voice", "instructions")
    if body.get("stream_format", "audio") != "audio":
        raise bad_request(f"only stream_format 'audio' is supported (the audio streams as the response body), "
                          f"got {body['stream_format']!r}", "stream_format")
    with models.speech_gate.slot():
        tts = await models.piper()
        phonemes = sum(await asyncio.to_thread(tts.sentence_phonemes, text))
        if phonemes > MAX_SPEECH_PHONEMES:
            raise bad_request(f"'input' would be {phonemes} phonemes of speech, over {MAX_SPEECH_PHONEMES} (about "
                              f"{MAX_SPEECH_PHONEMES // 22 // 60} minutes): send it in parts", "input")
        return await _speak(request, tts, text, fmt)


async def _speak(request: web.Request, tts: PiperTts, text: str, fmt: str) -> web.StreamResponse:
    """Stream `text` sentence by sentence as it is rendered, so the first audio leaves after one sentence; text
    the voice renders as silence ("...", "!?") is refused before any of the response is sent."""
    sentences = tts.stream(text, SPEECH_RATE)
    pcm = await asyncio.to_thread(next, (pcm for pcm in sentences if len(pcm)), None)
    if pcm is None:
        raise bad_request("'input' has nothing the voice can speak (punctuation alone?)", "input")
    resp = web.StreamResponse(headers={"Content-Type": "audio/wav" if fmt == "wav" else "audio/pcm"})
    await resp.prepare(request)
    if fmt == "wav":
        await resp.write(wav_stream_header(SPEECH_RATE))
    while pcm is not None:
        await resp.write(pcm.astype("<i2").tobytes())
        pcm = await asyncio.to_thread(next, sentences, None)
    await resp.write_eof()
    return resp
