"""/phone/twilio with a websocket client that plays Twilio's side of a Media Stream, in real time."""

from __future__ import annotations

import asyncio
import base64
import json
import time

import aiohttp
import numpy as np
import pytest
from live_server import drained, registry, url

from tests.conftest import noise_burst
from voice.audio import mulaw_decode, mulaw_encode, resample
from voice.transports.phone import CallAudio, CallMark, CallStarted, CallStopped, PhoneProtocolError
from voice.transports.twilio import TwilioSerializer

SID = "MZ0123456789abcdef"
FRAME = 160  # 20 ms at 8 kHz


class TwilioSide:
    """What Twilio does: send caller audio every 20 ms, play what it gets, echo marks once played (or, without
    ``echo_marks``, only when the test calls :meth:`echo`)."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse, echo_marks: bool = True) -> None:
        self.ws = ws
        self.echo_marks = echo_marks
        self.heard: list[np.ndarray] = []
        self.marks: list[str] = []
        self.clears = 0
        self.media_at: float | None = None
        self._play_until = 0.0
        self._due: list[tuple[float, str]] = []

    async def start(self) -> None:
        await self.ws.send_json({"event": "connected", "protocol": "Call", "version": "1.0.0"})
        await self.ws.send_json({"event": "start", "sequenceNumber": "1", "streamSid": SID, "start": {
            "accountSid": "AC1", "streamSid": SID, "callSid": "CA1", "tracks": ["inbound"],
            "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1},
            "customParameters": {}}})

    async def say(self, pcm8k: np.ndarray) -> None:
        t0 = time.monotonic()
        for i, start in enumerate(range(0, len(pcm8k), FRAME)):
            payload = base64.b64encode(mulaw_encode(pcm8k[start:start + FRAME])).decode()
            await self.ws.send_json({"event": "media", "streamSid": SID,
                                     "media": {"track": "inbound", "payload": payload}})
            await self._echo_due_marks()
            await asyncio.sleep(max(0.0, t0 + (i + 1) * 0.02 - time.monotonic()))

    async def listen(self) -> None:
        async for msg in self.ws:
            data = json.loads(msg.data)
            assert data["streamSid"] == SID
            now = time.monotonic()
            if data["event"] == "media":
                pcm = mulaw_decode(base64.b64decode(data["media"]["payload"]))
                self.heard.append(pcm)
                self.media_at = self.media_at or now
                self._play_until = max(self._play_until, now) + len(pcm) / 8000
            elif data["event"] == "mark":
                self.marks.append(data["mark"]["name"])
                self._due.append((self._play_until, data["mark"]["name"]))
            elif data["event"] == "clear":
                self.clears += 1
                self._play_until = now  # Twilio drops its buffer and returns the marks still pending
                self._due = [(now, name) for _, name in self._due]

    async def echo(self, name: str) -> None:
        await self.ws.send_json({"event": "mark", "streamSid": SID, "mark": {"name": name}})

    async def _echo_due_marks(self) -> None:
        if not self.echo_marks:
            return
        now = time.monotonic()
        for due, name in [d for d in self._due if d[0] <= now]:
            self._due.remove((due, name))
            await self.echo(name)


async def test_phone_call_hears_speech_gets_marks_and_a_barge_in_clears(serve, new_pipeline, question) -> None:
    server = await serve(new_pipeline)
    caller = resample(question[0], 48000, 8000)
    loud = np.flatnonzero(np.abs(caller.astype(np.int32)) > 500)
    question_part = caller[: loud[-1] + 1]  # then silence only until the reply starts, however short it is
    speech_only = caller[loud[0] : loud[-1] + 1]
    async with aiohttp.ClientSession() as http, http.ws_connect(url(server, "/phone/twilio", "ws")) as ws:
        phone = TwilioSide(ws)
        listener = asyncio.create_task(phone.listen())
        await phone.start()
        await phone.say(question_part)
        async with asyncio.timeout(30):
            while phone.media_at is None:  # the reply has not started yet: keep the line open
                await phone.say(np.zeros(FRAME * 5, dtype=np.int16))
        await phone.say(speech_only)  # the caller talks over the assistant
        await phone.say(np.zeros(8000, dtype=np.int16))
        await ws.send_json({"event": "stop", "streamSid": SID, "stop": {"accountSid": "AC1", "callSid": "CA1"}})
        listener.cancel()

    heard = np.concatenate(phone.heard)
    assert len(heard) > 800 and np.abs(heard).max() > 1000  # mu-law speech, not silence
    assert phone.marks and all(m.split(":")[0].isdigit() and m.split(":")[1].isdigit() for m in phone.marks)
    assert phone.clears >= 1
    assert await drained(server)


async def test_after_a_false_barge_in_marks_count_only_what_was_heard(serve, new_pipeline, resources) -> None:
    """A clear flushes audio Twilio never plays, but the count of audio sent had kept it, and a mark the clear
    flushed counted once its echo came after the reply resumed: the marks said more was heard than was, so the
    pipeline took the reply as all heard, missed the caller's next barge-in and kept unheard words in its history.
    This Twilio echoes a mark only when the test says, so the reply is still playing whatever the machine's pace."""
    server = await serve(new_pipeline)
    silence = np.zeros(800, dtype=np.int16)
    noise = noise_burst(8000)

    def samples(mark: str) -> int:
        return int(mark.split(":")[1])

    def first_reply() -> list[str]:
        return next(m for m in conversation.history if m["role"] == "assistant")["content"].split()

    async with aiohttp.ClientSession() as http, http.ws_connect(url(server, "/phone/twilio", "ws")) as ws:
        phone = TwilioSide(ws, echo_marks=False)
        listener = asyncio.create_task(phone.listen())
        await phone.start()
        question = resources.tts.synthesize("How are you doing today?", 8000)
        # a second's lead: after only a tenth of one, tiny.en's final transcript repeated the question over and over
        await phone.say(np.concatenate([np.tile(silence, 10), question]))
        async with asyncio.timeout(60):
            while len(phone.marks) < 2:  # the demo model answers in two clauses
                await phone.say(silence)
        first, whole = phone.marks
        await phone.echo(first)  # the first clause played, the second is still to be heard
        await phone.say(noise)
        async with asyncio.timeout(60):
            while len(phone.marks) < 3:  # the clear, then the cut clause again
                await phone.say(silence)
        assert phone.clears == 1
        assert samples(phone.marks[2]) == samples(whole), "the resumed audio counts on from what was heard"

        conversation = registry(server).sessions()[0].conversation
        said = first_reply()
        await phone.echo(whole)  # late, the echo of the mark the clear flushed
        await phone.say(resources.tts.synthesize("Wait, stop please.", 8000))  # over the resumed clause
        async with asyncio.timeout(60):
            while len([m for m in conversation.history if m["role"] == "user"]) < 2:  # the words are answered
                await phone.say(silence)
        assert phone.clears == 2, "the caller's words were a barge-in"
        kept = first_reply()
        assert kept == said[: len(kept)] and len(kept) < len(said), (kept, said)
        listener.cancel()
    assert await drained(server)


def test_serializer_round_trips_twilio_messages() -> None:
    twilio = TwilioSerializer()
    assert twilio.parse(json.dumps({"event": "connected", "protocol": "Call"})) is None
    started = twilio.parse(json.dumps({"event": "start", "start": {
        "streamSid": SID, "callSid": "CA9", "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000,
                                                           "channels": 1}, "customParameters": {"x": "1"}}}))
    assert started == CallStarted(SID, "CA9", {"x": "1"})
    pcm = (3000 * np.sin(np.arange(160) / 5)).astype(np.int16)
    media = json.loads(twilio.audio(pcm))
    assert media["event"] == "media" and media["streamSid"] == SID
    echoed = twilio.parse(json.dumps({"event": "media", "media": {"track": "inbound",
                                                                   "payload": media["media"]["payload"]}}))
    assert isinstance(echoed, CallAudio) and np.abs(echoed.pcm.astype(int) - pcm).max() < 200
    assert twilio.parse(twilio.mark("3:4800")) == CallMark("3:4800")
    assert json.loads(twilio.clear()) == {"event": "clear", "streamSid": SID}
    assert twilio.parse(json.dumps({"event": "stop"})) == CallStopped()
    with pytest.raises(PhoneProtocolError, match="not this call's") as err:  # had been played into this call
        twilio.parse(json.dumps({"event": "media", "streamSid": "MZ-other", "media": {"payload": ""}}))
    assert not err.value.fatal


@pytest.mark.parametrize("message, fatal", [
    ("not json", False),
    (json.dumps({"event": "media", "media": {"payload": "%%%"}}), False),
    (json.dumps({"event": "start", "start": {"streamSid": SID, "mediaFormat": {
        "encoding": "audio/x-l16", "sampleRate": 16000, "channels": 1}}}), True),
    (json.dumps({"event": "start", "start": {}}), True),
    ("[" * 5000 + "]" * 5000, False),  # these two had ended the call with a traceback
    ('{"event": "media", "n": ' + "9" * 5000 + "}", False),
])
def test_serializer_refuses_what_it_cannot_play(message: str, fatal: bool) -> None:
    with pytest.raises(PhoneProtocolError) as err:
        TwilioSerializer().parse(message)
    assert err.value.fatal is fatal


async def test_wrong_media_format_ends_only_that_call(serve, new_pipeline) -> None:
    server = await serve(new_pipeline)
    async with aiohttp.ClientSession() as http:
        async with http.ws_connect(url(server, "/phone/twilio", "ws")) as ws:
            await ws.send_str("garbage")  # skipped, the call goes on
            await ws.send_json({"event": "start", "start": {"streamSid": SID, "mediaFormat": {
                "encoding": "audio/x-l16", "sampleRate": 16000, "channels": 1}}})
            await ws.receive()
            assert ws.close_code == aiohttp.WSCloseCode.UNSUPPORTED_DATA
        async with http.get(url(server, "/healthz")) as health:
            assert (await health.json())["status"] == "ok"
    assert await drained(server)


async def test_marks_that_are_not_ours_leave_the_call_up(serve, new_pipeline) -> None:
    """'²' is a digit to str.isdigit but not to int(): such a mark name had ended the call with a traceback."""
    server = await serve(new_pipeline)
    start = {"event": "start", "start": {"streamSid": SID, "mediaFormat": {
        "encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1}}}
    async with aiohttp.ClientSession() as http, http.ws_connect(url(server, "/phone/twilio", "ws")) as ws:
        await ws.send_json(start)
        for name in ("²:5", "1:" + "9" * 5000, "x"):
            await ws.send_json({"event": "mark", "streamSid": SID, "mark": {"name": name}})
        await asyncio.sleep(0.5)
        async with http.get(url(server, "/healthz")) as health:
            assert (await health.json())["sessions"] == 1
        assert not ws.closed
    assert await drained(server)
