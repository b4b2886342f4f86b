"""WebRTC calls with an aiortc client peer on loopback, the paced track and the jitter-buffer tuning."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import Any

import aiohttp
import numpy as np
from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription
from aiortc.jitterbuffer import JitterBuffer
from aiortc.mediastreams import MediaStreamError
from live_server import drained, registry, url

from tests.conftest import noise_burst, push_live
from voice.transports.playout import Playout
from voice.transports.realtime_session import RealtimeSession
from voice.transports.sessions import SessionRegistry
from voice.transports.webrtc import (
    FRAME_SAMPLES,
    WEBRTC_RATE,
    JitterConfig,
    PacedAudioTrack,
    WebRtcConfig,
    to_mono,
    tune_jitter_buffer,
)

CALLS = "/v1/realtime/calls"


class Client:
    """A Realtime WebRTC client: mic track (silence), ``oai-events`` channel, records what it hears."""

    def __init__(self, with_audio: bool = True, with_channel: bool = True) -> None:
        self.pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        self.events: list[dict[str, Any]] = []
        self.heard: list[np.ndarray] = []
        self.channel = self.pc.createDataChannel("oai-events") if with_channel else None
        self._opened = asyncio.Event()
        if self.channel is not None:
            self.channel.on("message", lambda m: self.events.append(json.loads(m)))
            self.channel.on("open", self._opened.set)
        if with_audio:
            self.mic = PacedAudioTrack()
            self.pc.addTrack(self.mic)
        self.pc.on("track", lambda track: asyncio.ensure_future(self._listen(track)))

    async def _listen(self, track) -> None:
        with contextlib.suppress(MediaStreamError):  # the call ended
            while True:
                self.heard.append(to_mono(await track.recv()))

    async def offer(self) -> str:
        await self.pc.setLocalDescription(await self.pc.createOffer())
        return self.pc.localDescription.sdp

    async def call(self, http: aiohttp.ClientSession, server) -> str:
        async with http.post(url(server, CALLS), data=await self.offer(),
                             headers={"Content-Type": "application/sdp"}) as res:
            assert res.status == 201, await res.text()
            answer, location = await res.text(), res.headers["Location"]
        await self.pc.setRemoteDescription(RTCSessionDescription(answer, "answer"))
        async with asyncio.timeout(10):
            await self._opened.wait()
        return answer, location

    def send(self, event: dict[str, Any]) -> None:
        self.channel.send(json.dumps(event))

    async def wait_for(self, kind: str, timeout: float = 60) -> dict[str, Any]:
        async with asyncio.timeout(timeout):
            while True:
                for event in self.events:
                    if event["type"] == kind:
                        self.events.remove(event)
                        return event
                await asyncio.sleep(0.02)


async def test_call_carries_events_and_audio_then_hangs_up(serve, new_pipeline) -> None:
    server = await serve(new_pipeline)
    client = Client()
    async with aiohttp.ClientSession() as http:
        answer, location = await client.call(http, server)
        candidates = [line for line in answer.splitlines() if line.startswith("a=candidate")]
        assert candidates and all(" 127.0.0.1 " in c and " typ host" in c for c in candidates)
        assert (await client.wait_for("session.created"))["session"]["id"] == location.rsplit("/", 1)[1]

        client.send({"type": "no.such.event"})
        assert (await client.wait_for("error"))["error"]["code"] == "unknown_event"
        client.send({"type": "conversation.item.create", "item": {
            "type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hello there."}]}})
        client.send({"type": "response.create"})
        done = await client.wait_for("response.done")
        assert done["response"]["status"] == "completed"
        assert not [e for e in client.events if e["type"] == "response.output_audio.delta"]  # audio is on the track
        async with asyncio.timeout(30):
            while not client.heard or np.abs(np.concatenate(client.heard)).max() < 1000:
                await asyncio.sleep(0.05)

        async with http.post(url(server, f"{location}/hangup")) as res:
            assert res.status == 200 and (await res.json())["status"] == "ended"
        assert len(registry(server)) == 0
        async with http.post(url(server, f"{location}/hangup")) as res:
            assert res.status == 404
    await client.pc.close()


async def test_peer_that_vanishes_is_freed(serve, new_pipeline) -> None:
    server = await serve(new_pipeline)
    client = Client()
    async with aiohttp.ClientSession() as http:
        await client.call(http, server)
        session = registry(server).sessions()[0]
        await client.pc.close()  # no hang-up request
        assert await drained(server)
    assert session.closed and session.conversation._closed


async def test_bad_offers_are_refused_and_the_server_carries_on(serve, new_pipeline) -> None:
    server = await serve(new_pipeline)
    no_audio = await Client(with_audio=False).offer()
    offer = await Client().offer()
    no_fingerprint = "".join(line for line in offer.splitlines(keepends=True) if not line.startswith("a=fingerprint"))
    sdp = {"Content-Type": "application/sdp"}
    cases = [
        (b"hello", sdp, "invalid_sdp"),
        (b"v=0\r\nthis is not sdp\r\n", sdp, "invalid_sdp"),
        (b"\xff\xfe", sdp, "invalid_sdp"),
        (no_audio.encode(), sdp, "invalid_sdp"),
        (b"v=0" + b"x" * (70 << 10), sdp, "request_too_large"),
        # each of these had been a 500, or (no fingerprint) a 201 whose DTLS failed in the background
        ((offer + offer).encode(), sdp, "invalid_sdp"),
        (no_fingerprint.encode(), sdp, "invalid_sdp"),
        (b"sdp=x", {"Content-Type": "multipart/form-data"}, "invalid_request"),
        (b"garbage", {"Content-Type": "multipart/form-data; boundary=xyz"}, "invalid_request"),
    ]
    async with aiohttp.ClientSession() as http:
        for body, headers, code in cases:
            async with http.post(url(server, CALLS), data=body, headers=headers) as res:
                assert res.status in (400, 413)
                assert (await res.json())["error"]["code"] == code, body[:40]
        for session in ("{oops", "[" * 5000 + "]" * 5000):
            bad_session = aiohttp.FormData({"sdp": no_audio, "session": session})
            async with http.post(url(server, CALLS), data=bad_session) as res:
                assert res.status == 400 and (await res.json())["error"]["code"] == "invalid_json"
        padded = offer + "a=x-pad:" + "y" * 70_000 + "\r\n"  # had been a 201 as a form, a 413 raw
        raw_refusal = None
        for body, headers in ((padded, sdp), (aiohttp.FormData({"sdp": padded}, default_to_multipart=True), {})):
            async with http.post(url(server, CALLS), data=body, headers=headers) as res:
                assert res.status == 413
                refusal = (await res.json())["error"]
            assert refusal["code"] == "request_too_large" and refusal["param"] == "sdp"
            assert refusal["message"] == (raw_refusal or refusal)["message"]
            raw_refusal = raw_refusal or refusal
        assert await drained(server)
        async with http.get(url(server, "/healthz")) as res:
            assert (await res.json())["sessions"] == 0


async def test_offer_bundling_a_missing_audio_line_is_refused_cleanly(serve, new_pipeline, caplog) -> None:
    """A data channel offered without the audio its BUNDLE names got its 400, but its clean-up had failed
    inside aiortc (logged at ERROR, the rest of the peer connection's close skipped); it is now refused before
    aiortc builds anything, and the one session slot serves the next call."""
    server = await serve(new_pipeline, max_sessions=1)
    offer = await Client().offer()
    no_audio = offer.split("m=audio")[0] + "m=application" + offer.split("m=application", 1)[1]
    assert "a=group:BUNDLE 0 1" in no_audio and "m=audio" not in no_audio
    client = Client()
    async with aiohttp.ClientSession() as http:
        async with http.post(url(server, CALLS), data=no_audio, headers={"Content-Type": "application/sdp"}) as res:
            assert res.status == 400
            error = (await res.json())["error"]
        assert error["code"] == "invalid_sdp" and "no audio m-line" in error["message"]
        assert await drained(server)
        await client.call(http, server)
        assert (await client.wait_for("session.created"))["type"] == "session.created"
    await client.pc.close()
    assert await drained(server)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text


async def test_multipart_offer_with_session_and_the_session_limit(serve, new_pipeline) -> None:
    server = await serve(new_pipeline, max_sessions=1)
    first, second = Client(), Client()
    async with aiohttp.ClientSession() as http:
        form = aiohttp.FormData({"sdp": await first.offer(),
                                 "session": json.dumps({"type": "realtime", "instructions": "Be brief."})},
                                default_to_multipart=True)
        async with http.post(url(server, CALLS), data=form) as res:
            assert res.status == 201
            await first.pc.setRemoteDescription(RTCSessionDescription(await res.text(), "answer"))
        assert (await first.wait_for("session.created"))["session"]["instructions"] == "Be brief."
        async with http.post(url(server, CALLS), data=await second.offer(),
                             headers={"Content-Type": "application/sdp"}) as res:
            assert res.status == 429
            assert "limit of 1 concurrent sessions" in (await res.json())["error"]["message"]
    await first.pc.close()
    await second.pc.close()
    assert await drained(server)


async def test_jitter_buffer_is_replaced_before_media_flows() -> None:
    pc = RTCPeerConnection()
    receiver = pc.addTransceiver("audio").receiver
    tune_jitter_buffer(receiver, JitterConfig(capacity=8, prefetch=0))
    buffer = receiver._RTCRtpReceiver__jitter_buffer
    assert isinstance(buffer, JitterBuffer) and buffer.capacity == 8 and buffer._prefetch == 0
    await pc.close()


async def test_paced_track_stamps_samples_sends_silence_and_clears() -> None:
    played: list[tuple[int, int]] = []
    track = PacedAudioTrack(on_played=lambda turn, n: played.append((turn, n)))
    tone = (8000 * np.sin(np.arange(2400) / 4)).astype(np.int16)  # 100 ms at 24 kHz
    track.write(7, tone, 24000)
    frames = [await track.recv() for _ in range(8)]
    assert [f.pts for f in frames] == [i * FRAME_SAMPLES for i in range(8)]
    assert all(f.sample_rate == WEBRTC_RATE and f.samples == FRAME_SAMPLES for f in frames)
    loud = [int(np.abs(f.to_ndarray()).max()) > 1000 for f in frames]
    assert loud[:4] == [True] * 4 and loud[-2:] == [False, False]  # the tone, then silence while idle
    assert played[-1][0] == 7 and abs(played[-1][1] - 2400) < 40  # reported in the turn's own rate

    track.write(8, np.tile(tone, 10), 24000)
    await track.recv()
    track.clear()  # barge-in
    assert int(np.abs((await track.recv()).to_ndarray()).max()) == 0
    track.stop()


async def test_a_finished_reply_resumed_after_a_noise_leaves_no_response_open(new_pipeline) -> None:
    """A finished reply is still audible while the track plays it out; a cough paused it, and its audio resumed
    after its response.done had sent a second response.created and no response.done: every later response.create
    was refused as conversation_already_has_active_response. The track is read by hand, so the reply is still
    playing when the noise comes on any machine."""
    session = await SessionRegistry(new_pipeline, 1).open("webrtc")
    pipeline = session.conversation
    track = PacedAudioTrack(on_played=pipeline.played)
    sent: list[dict[str, Any]] = []

    async def send(event: dict[str, Any]) -> None:
        sent.append(event)

    def types() -> list[str]:
        return [e["type"] for e in sent]

    async def until(done) -> None:
        async with asyncio.timeout(60):
            while not done():
                await asyncio.sleep(0.02)

    realtime = RealtimeSession(session, send, sink=track)
    await realtime.start()
    await realtime.handle(json.dumps({"type": "conversation.item.create", "item": {
        "type": "message", "role": "user", "content": [{"type": "input_text", "text": "How are you doing today?"}]}}))
    await realtime.handle(json.dumps({"type": "response.create"}))
    await until(lambda: "response.done" in types())
    track.playout.read(FRAME_SAMPLES)  # 20 ms played: the rest of the finished reply is still to be heard
    rate = 16000
    await push_live(pipeline, np.concatenate([noise_burst(rate), np.zeros(rate, dtype=np.int16)]), rate)
    await until(lambda: "output_audio_buffer.cleared" in types() and len(track.playout) > 0)  # resumed

    assert types().count("response.created") == types().count("response.done") == 1, types()
    assert not realtime.encoder.responding
    await realtime.handle(json.dumps({"type": "response.create"}))
    await until(lambda: types().count("response.created") == 2)
    assert "error" not in types(), sent
    await realtime.stop()
    track.stop()
    await session.close()


def test_playout_reports_each_turn_cumulatively() -> None:
    reports: list[tuple[int, int]] = []
    playout = Playout(16000, lambda turn, n: reports.append((turn, n)))
    playout.write(1, np.ones(800, dtype=np.int16), 16000)
    playout.write(2, np.ones(1600, dtype=np.int16), 16000)
    playout.read(1000)
    playout.read(1400)
    assert reports == [(1, 800), (2, 200), (2, 1600)]
    assert len(playout.read(10)) == 10 and len(playout) == 0


def test_playout_reports_all_a_resampled_turn_wrote_once_it_has_played() -> None:
    """The resampler holds a few samples back for the next write: the count had stopped 16 short of a 24 kHz
    reply played at 48 kHz, the reply stayed audible, and its trace record waited for the call to end."""
    reports: list[tuple[int, int]] = []
    playout = Playout(48000, lambda turn, n: reports.append((turn, n)))
    playout.write(1, np.ones(24000, dtype=np.int16), 24000)
    while len(playout):
        playout.read(960)
    assert reports[-1] == (1, 24000)
    playout.write(2, np.ones(24000, dtype=np.int16), 24000)
    playout.read(960)
    playout.clear()  # a barge-in: the rest of turn 2 is never heard
    playout.write(2, np.ones(2400, dtype=np.int16), 24000)
    while len(playout):
        playout.read(960)
    assert reports[-1] == (2, 480 + 2400)


async def test_offer_whose_peer_never_connects_is_freed(serve, new_pipeline) -> None:
    server = await serve(new_pipeline, webrtc=WebRtcConfig(connect_timeout_s=1.0))
    client = Client()
    async with aiohttp.ClientSession() as http, http.post(
            url(server, CALLS), data=await client.offer(), headers={"Content-Type": "application/sdp"}) as res:
        assert res.status == 201  # ... and the answer is never applied: ICE cannot connect
    assert len(registry(server)) == 1
    assert await drained(server, timeout=10)
    await client.pc.close()
