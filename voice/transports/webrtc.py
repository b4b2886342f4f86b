"""Browser calls over WebRTC (aiortc), signalled like the OpenAI Realtime API's WebRTC flavour.

``POST /v1/realtime/calls`` takes the browser's SDP offer (raw ``application/sdp``, or multipart with
``sdp`` and an optional ``session`` JSON) and answers with our SDP; the media track carries audio both
ways and the ``oai-events`` data channel carries Realtime events (:mod:`realtime_session`).

Latency choices, each measured (see :mod:`voice.transports.webrtc_probe`):
- the receive jitter buffer holds no prefetch (aiortc's audio default waits for 4 extra packets, ~80 ms
  one-way on loopback) and a small capacity, so a lost packet stalls the stream briefly, not 300 ms;
- the outgoing track is paced against the clock with pts counting samples, sends silence while idle so
  RTP stays continuous, and is cleared on barge-in so no stale reply keeps playing;
- ICE gathers host candidates only (no public STUN unless configured) and offers 127.0.0.1, which aioice
  never gathers by itself, so a browser on the same machine connects over loopback.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections import deque
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import aioice.ice
import av
import numpy as np
from aiohttp import web
from aiortc import (
    MediaStreamTrack,
    RTCConfiguration,
    RTCDataChannel,
    RTCIceServer,
    RTCPeerConnection,
    RTCRtpReceiver,
    RTCSessionDescription,
)
from aiortc.jitterbuffer import JitterBuffer
from aiortc.mediastreams import MediaStreamError
from aiortc.sdp import SessionDescription as ParsedSdp

from dlm.api.errors import APIError, bad_request
from dlm.api.json_text import JsonTextError, loads_client_json
from voice.transports.playout import OnPlayed, Playout
from voice.transports.realtime_events import ClientEventError
from voice.transports.realtime_session import RealtimeSession
from voice.transports.sessions import SESSIONS, Session, SessionLimitError

log = logging.getLogger(__name__)

WEBRTC_RATE = 48000
FRAME_SAMPLES = 960  # 20 ms, the Opus frame the browser expects
MAX_SDP_BYTES = 64 << 10
EVENTS_CHANNEL = "oai-events"


# ---------------------------------------------------------------------------------------------- config

@dataclass(frozen=True)
class JitterConfig:
    """aiortc ``JitterBuffer`` settings for received audio (capacity in packets, a power of two)."""

    capacity: int = 8
    prefetch: int = 0


AIORTC_DEFAULT_JITTER = JitterConfig(capacity=16, prefetch=4)


@dataclass(frozen=True)
class WebRtcConfig:
    jitter: JitterConfig | None = field(default_factory=JitterConfig)  # None keeps aiortc's default
    ice_servers: tuple[str, ...] = ()  # e.g. ("stun:stun.example.org:3478",); none by default
    loopback_only: bool = True  # offer only 127.0.0.1 (server bound to loopback)
    connect_timeout_s: float = 20.0  # a call whose ICE never connects is freed after this
    media_timeout_s: float = 5.0  # browsers send audio all the time: this long without any, the caller is gone


WEBRTC_CONFIG = web.AppKey("webrtc_config", WebRtcConfig)


def tune_jitter_buffer(receiver: RTCRtpReceiver, jitter: JitterConfig) -> None:
    """Replace the audio receiver's jitter buffer; must run before the first RTP packet arrives.

    aiortc (pinned at 1.16) builds ``JitterBuffer(capacity=16, prefetch=4)`` for audio and exposes no
    setting, so the buffer object is swapped on the receiver; the check makes an aiortc upgrade that
    renames it fail loudly instead of silently keeping 80 ms of delay.
    """
    attr = "_RTCRtpReceiver__jitter_buffer"
    if not isinstance(getattr(receiver, attr, None), JitterBuffer):
        raise RuntimeError("this aiortc version has no receiver jitter buffer to tune; check the pin (1.16)")
    setattr(receiver, attr, JitterBuffer(capacity=jitter.capacity, prefetch=jitter.prefetch))


_gather_host_addresses = aioice.ice.get_host_addresses


def offer_loopback_candidates(loopback_only: bool) -> None:
    """Make aioice gather 127.0.0.1 (first), and with ``loopback_only`` nothing else.

    aioice reads host addresses through this module function for every connection, so this setting is
    process-wide; the server sets it once from its bind address.
    """

    def addresses(use_ipv4: bool, use_ipv6: bool) -> list[str]:
        if loopback_only:
            return ["127.0.0.1"]
        return ["127.0.0.1", *_gather_host_addresses(use_ipv4=use_ipv4, use_ipv6=use_ipv6)]

    aioice.ice.get_host_addresses = addresses


# ---------------------------------------------------------------------------------------------- tracks

class PacedAudioTrack(MediaStreamTrack):
    """The assistant's voice as a WebRTC track: real-time paced, silent when idle, clearable.

    ``write`` queues pipeline audio in a :class:`Playout` at 48 kHz; aiortc pulls 20 ms frames through
    :meth:`recv`, which sleeps until each frame is due so the browser's jitter buffer never fills up
    with audio sent early. ``on_played(turn_id, samples)`` hears what of each turn has gone out.
    """

    kind = "audio"

    def __init__(self, on_played: OnPlayed | None = None) -> None:
        super().__init__()
        self.playout = Playout(WEBRTC_RATE, on_played)
        self._start: float | None = None
        self._pts = 0

    def write(self, turn_id: int, pcm: np.ndarray, sample_rate: int) -> None:
        self.playout.write(turn_id, pcm, sample_rate)

    def clear(self) -> None:
        self.playout.clear()

    async def recv(self) -> av.AudioFrame:
        if self.readyState != "live":
            raise MediaStreamError
        now = time.monotonic()
        if self._start is None:
            self._start = now
        due = self._start + self._pts / WEBRTC_RATE
        if due - now < -0.1:  # the loop stalled: resynchronise rather than burst frames to catch up
            self._start = now - self._pts / WEBRTC_RATE
        elif due > now:
            await asyncio.sleep(due - now)
        pcm = self.playout.read(FRAME_SAMPLES)
        frame = av.AudioFrame.from_ndarray(pcm.reshape(1, -1), format="s16", layout="mono")
        frame.sample_rate = WEBRTC_RATE
        frame.pts = self._pts
        frame.time_base = Fraction(1, WEBRTC_RATE)
        self._pts += FRAME_SAMPLES
        return frame


def to_mono(frame: av.AudioFrame) -> np.ndarray:
    """Received Opus frames are interleaved stereo s16: average the channels to int16 mono."""
    pcm = frame.to_ndarray().reshape(-1)
    channels = len(frame.layout.channels)
    if channels == 1:
        return pcm.astype(np.int16)
    return pcm.reshape(-1, channels).mean(axis=1).astype(np.int16)


# ---------------------------------------------------------------------------------------------- calls

def _malformed(err: Exception) -> APIError:
    return bad_request(f"malformed SDP offer: {err or type(err).__name__}", param="sdp", code="invalid_sdp")


def check_offer(offer_sdp: str) -> None:
    """Refuse an offer we cannot serve before aiortc builds anything from it, so a refused call leaves
    nothing to clean up: an offer bundling a mid that no m-line has (a data channel without its audio) had
    left aiortc a data channel with no transport, whose close then failed."""
    try:
        offer = ParsedSdp.parse(offer_sdp)
    except Exception as err:  # the parser raises ValueError, IndexError, ... on broken SDP
        raise _malformed(err) from None
    if not any(media.kind == "audio" for media in offer.media):
        raise bad_request("the SDP offer has no audio m-line", param="sdp", code="invalid_sdp")
    mids = {media.rtp.muxId for media in offer.media}
    unknown = [mid for group in offer.group if group.semantic == "BUNDLE" for mid in group.items if mid not in mids]
    if unknown:
        raise bad_request(f"the SDP offer's BUNDLE group names mid {unknown[0]!r}, which no m-line has",
                          param="sdp", code="invalid_sdp")
    if "a=fingerprint:" not in offer_sdp:  # DTLS could never start: aiortc fails later, in a background task
        raise bad_request("the SDP offer has no DTLS fingerprint (a=fingerprint)", param="sdp",
                          code="invalid_sdp")


class WebRtcCall:
    """One browser call: peer connection, paced output track, caller audio in, Realtime events."""

    def __init__(self, session: Session, pc: RTCPeerConnection, config: WebRtcConfig) -> None:
        self.session = session
        self.pc = pc
        self.config = config
        self.track = PacedAudioTrack(on_played=session.conversation.played)
        self.realtime = RealtimeSession(session, self._send, sink=self.track)
        self._channel: RTCDataChannel | None = None
        self._outbox: deque[str] = deque(maxlen=1000)  # events until the data channel opens
        self._inbox: asyncio.Queue[str | bytes] = asyncio.Queue(maxsize=256)
        self._tasks: list[asyncio.Task[None]] = []
        self._has_input = False
        self._last_media = 0.0
        pc.on("track", self._on_track)
        pc.on("datachannel", self._on_datachannel)
        pc.on("connectionstatechange", self._on_connection_state)

    async def answer(self, offer_sdp: str) -> str:
        """Apply the browser's offer and return our answer (ICE candidates included)."""
        check_offer(offer_sdp)
        try:
            await self.pc.setRemoteDescription(RTCSessionDescription(sdp=offer_sdp, type="offer"))
        except Exception as err:  # aiortc raises ValueError, KeyError, ... on broken SDP
            raise _malformed(err) from None
        audio = [t for t in self.pc.getTransceivers() if t.kind == "audio"]
        if self.config.jitter is not None:
            tune_jitter_buffer(audio[0].receiver, self.config.jitter)
        self.pc.addTrack(self.track)
        try:
            await self.pc.setLocalDescription(await self.pc.createAnswer())
        except Exception as err:  # an offer aiortc took but cannot answer (one mid on two m-lines, ...)
            raise bad_request(f"cannot answer this SDP offer: {err or type(err).__name__}", param="sdp",
                              code="invalid_sdp") from None
        await self.realtime.start()
        self._spawn(self._close_if_never_connected(), "connect-timeout")
        self._spawn(self._handle_events(), "events-in")
        return self.pc.localDescription.sdp

    async def close(self) -> None:
        others = [t for t in self._tasks if t is not asyncio.current_task()]
        for task in others:
            task.cancel()
        for task in others:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.realtime.stop()
        self.track.stop()
        await self.pc.close()

    def _spawn(self, coro: Any, name: str) -> None:
        self._tasks.append(asyncio.create_task(coro, name=f"{self.session.id}-{name}"))

    async def _send(self, event: dict[str, Any]) -> None:
        message = json.dumps(event)
        if self._channel is not None and self._channel.readyState == "open":
            self._channel.send(message)
        else:
            self._outbox.append(message)

    def _on_track(self, track: MediaStreamTrack) -> None:
        if track.kind == "audio" and not self._has_input:
            self._has_input = True
            self._spawn(self._receive_audio(track), "audio-in")
            self._spawn(self._end_when_media_stops(), "media-watchdog")

    async def _receive_audio(self, track: MediaStreamTrack) -> None:
        """Caller audio into the conversation, stamping when the last of it came."""
        conversation = self.session.conversation
        with contextlib.suppress(MediaStreamError):
            while True:
                frame = await track.recv()
                self._last_media = time.monotonic()
                await conversation.push_audio(to_mono(frame), frame.sample_rate)
        await self.session.close()

    async def _end_when_media_stops(self) -> None:
        """A closed tab sends no goodbye: ICE consent checks notice after ~30 s, missing audio much sooner.

        Browsers send audio all the time (silence included), so ``media_timeout_s`` without any, once
        it has started, means the caller is gone and the session is freed.
        """
        while True:
            await asyncio.sleep(0.5)
            if self._last_media and time.monotonic() - self._last_media > self.config.media_timeout_s:
                log.info("%s: no caller audio for %.1f s; ending the call", self.session.id,
                         self.config.media_timeout_s)
                await self.session.close()
                return

    def _on_datachannel(self, channel: RTCDataChannel) -> None:
        if channel.label != EVENTS_CHANNEL or self._channel is not None:
            return
        self._channel = channel

        def flush() -> None:
            while self._outbox and channel.readyState == "open":
                channel.send(self._outbox.popleft())

        channel.on("open", flush)
        channel.on("message", self._on_message)
        channel.on("close", lambda: self._spawn(self.session.close(), "hang-up"))
        if channel.readyState == "open":
            flush()

    def _on_message(self, message: str | bytes) -> None:
        try:
            self._inbox.put_nowait(message)
        except asyncio.QueueFull:  # a client flooding faster than we act: refuse this one, keep the rest
            refusal = ClientEventError("too many events queued; slow down", code="rate_limited")
            self._spawn(self._send(self.realtime.encoder.error(refusal)), "refusal")

    async def _handle_events(self) -> None:
        while True:
            await self.realtime.handle(await self._inbox.get())

    async def _on_connection_state(self) -> None:
        log.info("%s: connection %s", self.session.id, self.pc.connectionState)
        if self.pc.connectionState in ("failed", "closed"):
            await self.session.close()

    async def _close_if_never_connected(self) -> None:
        await asyncio.sleep(self.config.connect_timeout_s)
        if self.pc.connectionState != "connected":
            log.info("%s: ICE never connected; freeing the call", self.session.id)
            await self.session.close()


# ---------------------------------------------------------------------------------------------- routes

def _check_offer_size(size: int) -> None:
    """One limit on the offer however it is sent (a multipart one had been taken at any size)."""
    if size > MAX_SDP_BYTES:
        raise APIError(413, f"SDP offer over {MAX_SDP_BYTES} bytes", param="sdp", code="request_too_large")


async def _read_offer(request: web.Request) -> tuple[str, dict[str, Any] | None]:
    """The SDP offer and optional session object, from a raw or a form (multipart, as OpenAI's) body."""
    if request.content_type in ("multipart/form-data", "application/x-www-form-urlencoded"):
        try:
            form = await request.post()
        except ValueError as err:  # no boundary, or a body that does not follow it
            raise bad_request(f"the form body cannot be read: {err}", code="invalid_request") from None
        sdp, session = form.get("sdp"), form.get("session")
        if not isinstance(sdp, str):
            raise bad_request("multipart offer needs an 'sdp' text field", param="sdp", code="invalid_sdp")
        _check_offer_size(len(sdp.encode("utf-8")))
        if session is None:
            return sdp, None
        try:
            parsed = loads_client_json(session if isinstance(session, str) else session.file.read())
        except JsonTextError as err:
            raise bad_request(f"'session' is not valid JSON: {err}", param="session",
                              code="invalid_json") from None
        return sdp, parsed
    raw = await request.content.read(MAX_SDP_BYTES + 1)
    _check_offer_size(len(raw))
    try:
        sdp = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise bad_request("SDP offer is not UTF-8 text", param="sdp", code="invalid_sdp") from None
    if not sdp.lstrip().startswith("v=0"):
        raise bad_request("body is not an SDP offer (expected it to start with 'v=0')", param="sdp",
                          code="invalid_sdp")
    return sdp, None


async def create_call(request: web.Request) -> web.Response:
    offer, session_update = await _read_offer(request)
    config = request.app[WEBRTC_CONFIG]
    try:
        session = await request.app[SESSIONS].open("webrtc")
    except SessionLimitError as err:
        raise APIError(429, str(err), code="session_limit_reached") from None
    pc = RTCPeerConnection(RTCConfiguration(iceServers=[RTCIceServer(urls=u) for u in config.ice_servers]))
    call = WebRtcCall(session, pc, config)
    session.on_close(call.close)
    try:
        if session_update is not None:
            call.realtime.update_session(session_update)
        answer = await call.answer(offer)
    except ClientEventError as err:
        await session.close()
        raise bad_request(err.message, param=err.param, code=err.code) from None
    except BaseException:
        await session.close()
        raise
    return web.Response(status=201, text=answer, content_type="application/sdp",
                        headers={"Location": f"/v1/realtime/calls/{session.id}"})


async def hang_up(request: web.Request) -> web.Response:
    session = request.app[SESSIONS].get(request.match_info["call_id"])
    if session is None or session.kind != "webrtc":
        raise APIError(404, f"no call {request.match_info['call_id']!r}", code="call_not_found")
    await session.close()
    return web.json_response({"id": session.id, "status": "ended"})


def add_routes(app: web.Application, config: WebRtcConfig) -> None:
    app[WEBRTC_CONFIG] = config
    offer_loopback_candidates(config.loopback_only)
    app.router.add_post("/v1/realtime/calls", create_call)
    app.router.add_post("/v1/realtime/calls/{call_id}/hangup", hang_up)
    app.router.add_delete("/v1/realtime/calls/{call_id}", hang_up)
