"""OpenAI's audio endpoints on the bundled models: `POST /v1/audio/transcriptions` (Whisper tiny.en) and
`POST /v1/audio/speech` (Piper, streamed sentence by sentence as WAV or raw PCM).

They are routes a server mounts with :func:`add_audio_routes`; the models load on the first request unless
the server hands over the instances its voice pipeline already warmed.
"""

from __future__ import annotations

import asyncio
import io
import struct
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from aiohttp import BodyPartReader, web

from dlm.api.errors import APIError, bad_request, error_middleware
from dlm.api.limits import ApiLimits, read_json
from voice.asr import ASR_RATE, Transcription, WhisperAsr
from voice.tts import PiperTts

SPEECH_RATE = 24000  # OpenAI's wav and pcm speech are 24 kHz 16-bit mono
TRANSCRIPTION_FORMATS = ("json", "text", "verbose_json")
TRANSCRIPTION_FIELDS = {"file", "model", "response_format", "language", "temperature"}
SPEECH_FORMATS = ("wav", "pcm")
_STATE = web.AppKey("audio_api", object)


@dataclass
class AudioModels:
    """The models behind the endpoints, loaded once on first use (loading Whisper takes seconds)."""

    asr: WhisperAsr | None = None
    tts: PiperTts | None = None
    limits: ApiLimits = field(default_factory=ApiLimits)
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


async def _form(request: web.Request, max_bytes: int) -> dict[str, Any]:
    """The multipart fields: `file` as bytes (bounded by `max_bytes`), the rest as strings."""
    if not request.content_type.startswith("multipart/"):
        raise bad_request("send the audio as multipart/form-data with a 'file' field", "file")
    fields: dict[str, Any] = {}
    reader = await request.multipart()
    async for part in reader:
        if not isinstance(part, BodyPartReader) or part.name is None:
            continue
        data = bytearray()
        while chunk := await part.read_chunk(1 << 16):
            data += chunk
            if len(data) > max_bytes:
                raise APIError(413, f"audio file too large (limit {max_bytes} bytes)", "file", "request_too_large")
        fields[part.name] = bytes(data) if part.name == "file" else data.decode("utf-8", "replace")
    return fields


def _decode_upload(data: bytes) -> np.ndarray:
    """Any container/codec PyAV reads, as 16 kHz mono int16 PCM."""
    from faster_whisper.audio import decode_audio

    try:
        audio = decode_audio(io.BytesIO(data), sampling_rate=ASR_RATE)
    except Exception as exc:  # PyAV raises a family of its own errors for undecodable input
        raise bad_request(f"could not decode the audio file ({type(exc).__name__}: {exc})", "file") from None
    if audio.size == 0:
        raise bad_request("the audio file contains no samples", "file")
    return (np.clip(audio, -1.0, 1.0) * 32767).astype(np.int16)


async def transcriptions(request: web.Request) -> web.StreamResponse:
    models: AudioModels = request.app[_STATE]
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
    if unknown := sorted(set(form) - TRANSCRIPTION_FIELDS):
        raise bad_request(f"Unrecognized request argument supplied: {unknown[0]}", unknown[0])
    pcm = await asyncio.to_thread(_decode_upload, form["file"])
    asr = await models.whisper()
    result = await asr.transcribe_async(pcm)
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
    if body.get("speed", 1.0) != 1.0:
        raise bad_request("only speed 1.0 is supported by the bundled Piper voice", "speed")
    if body.get("instructions"):
        raise bad_request("'instructions' are not supported by the bundled Piper voice", "instructions")
    tts = await models.piper()
    resp = web.StreamResponse(headers={"Content-Type": "audio/wav" if fmt == "wav" else "audio/pcm"})
    await resp.prepare(request)
    if fmt == "wav":
        await resp.write(wav_stream_header(SPEECH_RATE))
    sentences = tts.stream(text, SPEECH_RATE)
    while (pcm := await asyncio.to_thread(next, sentences, None)) is not None:
        await resp.write(pcm.astype("<i2").tobytes())
    await resp.write_eof()
    return resp
