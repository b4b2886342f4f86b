"""Twilio Media Streams wire format (bidirectional ``<Connect><Stream>``): 8 kHz mu-law in base64 JSON.

Incoming: ``connected``, ``start`` (the ``streamSid`` and the media format), ``media``, ``mark`` (echoed
when the audio before it has played), ``dtmf``, ``stop``. Outgoing: ``media``, ``mark`` and ``clear``
(drop the audio Twilio still buffers). See docs/phone.md for the TwiML that points a number here.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

import numpy as np

from dlm.api.json_text import JsonTextError, loads_client_json
from voice.audio import mulaw_decode, mulaw_encode
from voice.transports.phone import (
    CallAudio,
    CallMark,
    CallStarted,
    CallStopped,
    PhoneEvent,
    PhoneProtocolError,
)

TWILIO_FORMAT = {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1}


class TwilioSerializer:
    sample_rate = 8000

    def __init__(self) -> None:
        self.stream_sid: str | None = None

    def parse(self, message: str) -> PhoneEvent | None:
        try:
            data = loads_client_json(message)
        except JsonTextError as err:
            raise PhoneProtocolError(f"Twilio message is not JSON: {err}") from None
        if not isinstance(data, dict):
            raise PhoneProtocolError("Twilio message is not a JSON object")
        event = data.get("event")
        if event == "start":
            return self._start(data)
        if event == "media":
            return self._media(data)
        if event == "mark":
            name = _field(data, "mark", "name")
            return CallMark(name) if isinstance(name, str) else None
        if event == "stop":
            return CallStopped()
        return None  # connected, dtmf and anything newer carry nothing we act on

    def _start(self, data: dict[str, Any]) -> CallStarted:
        start = data.get("start")
        if not isinstance(start, dict):
            raise PhoneProtocolError("Twilio start message without a 'start' object", fatal=True)
        fmt = start.get("mediaFormat", TWILIO_FORMAT)
        if fmt != TWILIO_FORMAT:
            raise PhoneProtocolError(f"unsupported Twilio media format {fmt!r}; expected {TWILIO_FORMAT}",
                                     fatal=True)
        sid = start.get("streamSid", data.get("streamSid"))
        if not isinstance(sid, str) or not sid:
            raise PhoneProtocolError("Twilio start message without a streamSid", fatal=True)
        self.stream_sid = sid
        params = start.get("customParameters")
        return CallStarted(sid, start.get("callSid"), params if isinstance(params, dict) else {})

    def _media(self, data: dict[str, Any]) -> CallAudio | None:
        media = data.get("media")
        if not isinstance(media, dict) or media.get("track", "inbound") != "inbound":
            return None
        if data.get("streamSid", self.stream_sid) != self.stream_sid:
            raise PhoneProtocolError(f"media for stream {data.get('streamSid')!r}, not this call's")
        try:
            payload = base64.b64decode(media.get("payload", ""), validate=True)
        except (binascii.Error, ValueError, TypeError):
            raise PhoneProtocolError("Twilio media payload is not base64") from None
        return CallAudio(mulaw_decode(payload))

    def _out(self, event: str, **fields: Any) -> str:
        if self.stream_sid is None:
            raise PhoneProtocolError("cannot send to Twilio before its start message")
        return json.dumps({"event": event, "streamSid": self.stream_sid, **fields})

    def audio(self, pcm: np.ndarray) -> str:
        return self._out("media", media={"payload": base64.b64encode(mulaw_encode(pcm)).decode("ascii")})

    def mark(self, name: str) -> str:
        return self._out("mark", mark={"name": name})

    def clear(self) -> str:
        return self._out("clear")


def _field(data: dict[str, Any], outer: str, inner: str) -> Any:
    value = data.get(outer)
    return value.get(inner) if isinstance(value, dict) else None
