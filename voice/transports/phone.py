"""Phone calls bridged over a websocket (Twilio Media Streams and the like), whatever the wire format.

A :class:`PhoneSerializer` turns one provider's JSON messages into the small event types below and
back; this module is the transport: it feeds caller audio to the conversation, sends the assistant's
audio as the provider's media messages followed by a *mark*, and learns from each mark echoed back how
much of a reply the caller really heard. On barge-in it sends the provider's *clear*; the provider flushes
the audio and echoes the marks still pending, which were never heard. A Telnyx or Vonage bridge is one more
serializer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
from aiohttp import WSCloseCode, WSMsgType, web

from voice.audio import Resampler
from voice.events import AudioCleared, AudioOut, ResponseDone
from voice.transports.sessions import SESSIONS, Session, SessionLimitError

log = logging.getLogger(__name__)
_OUR_MARK = re.compile(r"([0-9]{1,12}):([0-9]{1,12}):([0-9]{1,12})")  # turn, samples heard, clears before it

MAX_MESSAGE_BYTES = 256 << 10  # a 20 ms media frame is ~250 bytes; anything near this is not a phone
MEDIA_CHUNK_S = 0.5  # assistant speech goes out in pieces this long (a clause can be many seconds)


class PhoneProtocolError(ValueError):
    """A message this bridge cannot use (it is logged and skipped, or ends the call if fatal)."""

    def __init__(self, message: str, fatal: bool = False) -> None:
        super().__init__(message)
        self.fatal = fatal


@dataclass(frozen=True)
class CallStarted:
    stream_id: str
    call_id: str | None = None
    parameters: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class CallAudio:
    pcm: np.ndarray  # int16 at the serializer's sample rate


@dataclass(frozen=True)
class CallMark:
    name: str


@dataclass(frozen=True)
class CallStopped:
    pass


PhoneEvent = CallStarted | CallAudio | CallMark | CallStopped


class PhoneSerializer(Protocol):
    """One provider's wire format for one call (it remembers the call's stream id)."""

    sample_rate: int

    def parse(self, message: str) -> PhoneEvent | None:
        """The event in a provider message; None for messages with nothing to act on."""

    def audio(self, pcm: np.ndarray) -> str: ...

    def mark(self, name: str) -> str: ...

    def clear(self) -> str: ...


class PhoneCall:
    """One bridged call: caller audio in, the assistant's audio, marks and clears out."""

    def __init__(self, session: Session, serializer: PhoneSerializer, ws: web.WebSocketResponse) -> None:
        self.session = session
        self.serializer = serializer
        self.ws = ws
        self.started = False
        self._resampler: Resampler | None = None
        self._sent: dict[int, int] = {}  # pipeline-rate samples sent per turn (flushed ones not counted)
        self._heard: dict[int, int] = {}  # the count of each turn's last mark echoed
        self._clears = 0

    async def on_message(self, message: str) -> bool:
        """Act on one provider message; False when the call is over."""
        event = self.serializer.parse(message)
        conversation = self.session.conversation
        if isinstance(event, CallStarted):
            self.started = True
            log.info("%s: phone call %s started", self.session.id, event.call_id)
        elif isinstance(event, CallAudio):
            if self.started:
                await conversation.push_audio(event.pcm, self.serializer.sample_rate)
        elif isinstance(event, CallMark):
            self._on_mark(event.name)
        elif isinstance(event, CallStopped):
            return False
        return True

    def _on_mark(self, name: str) -> None:
        """A mark sent after the last clear was played; one sent before it was flushed, however late its echo."""
        match = _OUR_MARK.fullmatch(name)  # not one of ours: "²" is a digit to isdigit, not to int
        if match is None or int(match[3]) != self._clears:
            return
        turn, samples = int(match[1]), int(match[2])
        self._heard[turn] = samples
        self.session.conversation.played(turn, samples)

    async def forward_events(self) -> None:
        """Pipeline events out as media, mark and clear messages."""
        async for ev in self.session.conversation.events():
            if isinstance(ev, AudioOut) and self.started:
                await self._send_audio(ev)
            elif isinstance(ev, AudioCleared):
                self._clears += 1
                self._sent[ev.turn_id] = self._heard.get(ev.turn_id, 0)  # resumed audio follows what was heard
                self._resampler = None
                if self.started:
                    await self.ws.send_str(self.serializer.clear())
            elif isinstance(ev, ResponseDone):
                self._resampler = None

    async def _send_audio(self, ev: AudioOut) -> None:
        if self._resampler is None or self._resampler.in_rate != ev.sample_rate:
            self._resampler = Resampler(ev.sample_rate, self.serializer.sample_rate)
        pcm = self._resampler.process(ev.pcm)
        sent = self._sent.get(ev.turn_id, 0) + len(ev.pcm)
        self._sent[ev.turn_id] = sent
        step = int(MEDIA_CHUNK_S * self.serializer.sample_rate)
        for start in range(0, len(pcm), step):
            await self.ws.send_str(self.serializer.audio(pcm[start:start + step]))
        await self.ws.send_str(self.serializer.mark(f"{ev.turn_id}:{sent}:{self._clears}"))


def handler(new_serializer: Callable[[], PhoneSerializer]) -> Callable[[web.Request], Any]:
    """An aiohttp websocket handler for one provider's media streams."""

    async def phone_websocket(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(max_msg_size=MAX_MESSAGE_BYTES, heartbeat=30)
        await ws.prepare(request)
        try:
            session = await request.app[SESSIONS].open("phone")
        except SessionLimitError as err:
            log.warning("phone call refused: %s", err)
            await ws.close(code=WSCloseCode.TRY_AGAIN_LATER, message=str(err).encode()[:120])
            return ws
        call = PhoneCall(session, new_serializer(), ws)
        forward = asyncio.create_task(call.forward_events(), name=f"{session.id}-phone-out")
        try:
            await _read(call, ws)
        finally:
            forward.cancel()
            with contextlib.suppress(asyncio.CancelledError, ConnectionError):
                await forward
            await session.close()
            await ws.close()
        return ws

    return phone_websocket


async def _read(call: PhoneCall, ws: web.WebSocketResponse) -> None:
    async for msg in ws:
        if msg.type != WSMsgType.TEXT:
            if msg.type == WSMsgType.ERROR:
                log.info("%s: phone websocket error: %s", call.session.id, ws.exception())
                return
            log.warning("%s: ignoring a non-text phone message", call.session.id)
            continue
        try:
            if not await call.on_message(msg.data):
                return
        except PhoneProtocolError as err:
            log.warning("%s: %s", call.session.id, err)
            if err.fatal:
                await ws.close(code=WSCloseCode.UNSUPPORTED_DATA, message=str(err).encode()[:120])
                return
