"""The /v1/realtime websocket with a real Realtime-protocol client and the real pipeline behind it."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import numpy as np
from live_server import CAPITAL, COUNTRY, drained, registry, url

from tests.conftest import demo_answers_correctly, noise_burst
from voice.audio import resample
from voice.lm_stage import LmStage
from voice.pipeline import VoicePipeline

TIMEOUT = 60


async def next_event(ws: aiohttp.ClientWebSocketResponse, kind: str, seen: list[dict[str, Any]]) -> dict[str, Any]:
    """Read events until one of ``kind`` (all of them are kept in ``seen``)."""
    async with asyncio.timeout(TIMEOUT):
        while True:
            msg = await ws.receive()
            assert msg.type == aiohttp.WSMsgType.TEXT, f"socket ended while waiting for {kind}: {msg}"
            event = json.loads(msg.data)
            seen.append(event)
            if event["type"] == kind:
                return event


async def speak(ws: aiohttp.ClientWebSocketResponse, pcm48: np.ndarray) -> None:
    """Append 24 kHz PCM16 in 100 ms events at the pace a microphone would."""
    pcm = resample(pcm48, 48000, 24000)
    for start in range(0, len(pcm), 2400):
        chunk = pcm[start:start + 2400].astype("<i2").tobytes()
        await ws.send_json({"type": "input_audio_buffer.append", "audio": base64.b64encode(chunk).decode()})
        await asyncio.sleep(0.1)


def typed(text: str) -> dict[str, Any]:
    """A ``conversation.item.create`` of a typed user message."""
    return {"type": "conversation.item.create", "item": {
        "type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}}


def truncation(item_id: Any, end_ms: Any) -> dict[str, Any]:
    """A ``conversation.item.truncate`` of an assistant item's audio at ``end_ms``."""
    return {"type": "conversation.item.truncate", "item_id": item_id, "content_index": 0, "audio_end_ms": end_ms}


@contextlib.asynccontextmanager
async def session(server: Any, seen: list[dict[str, Any]]) -> AsyncIterator[tuple[Any, list[dict[str, Any]]]]:
    """A Realtime websocket past its session.created, and the live history of the conversation behind it."""
    async with aiohttp.ClientSession() as http, http.ws_connect(url(server, "/v1/realtime", "ws")) as ws:
        await next_event(ws, "session.created", seen)
        yield ws, registry(server).sessions()[0].conversation.history


def reply_audio(events: list[dict[str, Any]], response_id: str) -> np.ndarray:
    deltas = [e["delta"] for e in events if e["type"] == "response.output_audio.delta"
              and e["response_id"] == response_id]
    return np.frombuffer(b"".join(base64.b64decode(d) for d in deltas), dtype="<i2")


async def test_two_turn_conversation(serve, new_pipeline, question) -> None:
    server = await serve(new_pipeline)
    seen: list[dict[str, Any]] = []
    async with aiohttp.ClientSession() as http, http.ws_connect(url(server, "/v1/realtime", "ws")) as ws:
        created = await next_event(ws, "session.created", seen)
        assert created["session"]["audio"]["input"]["format"] == {"type": "audio/pcm", "rate": 24000}

        # Turn 1: spoken, server VAD ends it.
        speaker = asyncio.create_task(speak(ws, question[0]))
        started = await next_event(ws, "input_audio_buffer.speech_started", seen)
        await next_event(ws, "input_audio_buffer.speech_stopped", seen)
        heard = await next_event(ws, "conversation.item.input_audio_transcription.completed", seen)
        assert heard["item_id"] == started["item_id"]
        assert "capital" in heard["transcript"].lower() and COUNTRY in heard["transcript"].lower()
        done = await next_event(ws, "response.done", seen)
        await speaker
        assert done["response"]["status"] == "completed"
        assert done["trace"]["voice_to_voice_ms"] is not None
        audio = reply_audio(seen, done["response"]["id"])
        assert len(audio) > 2400 and np.abs(audio).max() > 1000  # at least 0.1 s, and not silence
        assert any(e["type"] == "response.output_audio_transcript.delta" for e in seen)

        # Turn 2: a typed message, as Realtime clients send text.
        await ws.send_json({"type": "conversation.item.create", "item": {
            "type": "message", "role": "user", "content": [{"type": "input_text", "text": "And of Spain?"}]}})
        added = await next_event(ws, "conversation.item.added", seen)
        assert (await next_event(ws, "conversation.item.done", seen))["item"]["id"] == added["item"]["id"]
        await ws.send_json({"type": "response.create"})
        second = await next_event(ws, "response.done", seen)
        assert second["response"]["id"] != done["response"]["id"]
        assert len(reply_audio(seen, second["response"]["id"])) > 0
        if demo_answers_correctly():
            assert CAPITAL in done["response"]["output"][0]["content"][0]["transcript"].lower()
    assert not [e for e in seen if e["type"] == "error"]


async def test_bad_input_gets_error_events_and_the_session_lives_on(serve, new_pipeline) -> None:
    server = await serve(new_pipeline)
    seen: list[dict[str, Any]] = []
    async with aiohttp.ClientSession() as http, http.ws_connect(url(server, "/v1/realtime", "ws")) as ws:
        await next_event(ws, "session.created", seen)
        cases = [
            ("{not json", "invalid_json"),
            (json.dumps([1, 2]), "invalid_event"),
            (json.dumps({"type": "no.such.event", "event_id": "c1"}), "unknown_event"),
            (json.dumps({"type": "input_audio_buffer.append", "audio": "***", "event_id": "a1"}), "invalid_audio"),
            (json.dumps({"type": "input_audio_buffer.append", "audio": base64.b64encode(b"abc").decode(),
                         "event_id": "a2"}), "invalid_audio"),  # PCM16 needs an even number of bytes
            (json.dumps({"type": "session.update", "session": {"audio": {"input": {
                "format": {"type": "audio/pcma", "rate": 16000}}}}}), "invalid_audio_format"),
            (json.dumps({"type": "session.update", "session": {"input_audio_format": "g722"}}),
             "invalid_audio_format"),
            (json.dumps({"type": "session.update", "session": {"audio": {"input": 5}}}),
             "invalid_request"),  # had been a server_error
            (json.dumps({"type": "conversation.item.truncate", "item_id": "nope", "audio_end_ms": 5}),
             "invalid_request"),
            ("x" * (1 << 20) + "x", "message_too_large"),
            (json.dumps({"type": "input_audio_buffer.commit", "event_id": "e1"}),
             "input_audio_buffer_commit_empty"),  # had been silent, then had not named the client's event
            (json.dumps({"type": "response.cancel", "event_id": "c2"}), "response_cancel_not_active"),  # had been silent
            # had been server errors: a lone surrogate had also stayed in the history and failed every later turn
            (json.dumps({"type": "conversation.item.create", "item": {"type": "message", "role": "user", "content": [
                {"type": "input_text", "text": "hi \ud800"}]}}), "invalid_json"),
            ("[" * 50_000 + "]" * 50_000, "invalid_json"),
            ('{"type": "input_audio_buffer.clear", "n": ' + "9" * 5000 + "}", "invalid_json"),
            (json.dumps({"type": "conversation.item.create", "item": {"type": "message", "role": "user", "content": [
                {"type": "input_text", "text": "x" * 16_001}]}}), "invalid_request"),
        ]
        for message, code in cases:
            await ws.send_str(message)
            error = await next_event(ws, "error", seen)
            assert error["error"]["code"] == code, (message[:60], error)
            assert error["error"]["type"] == "invalid_request_error", error
        assert seen[2]["error"]["event_id"] is None and seen[3]["error"]["event_id"] == "c1"
        assert [seen[4]["error"]["event_id"], seen[5]["error"]["event_id"]] == ["a1", "a2"]  # a2's had been None
        assert [e["error"]["event_id"] for e in seen if e["type"] == "error" and e["error"]["code"] in (
            "input_audio_buffer_commit_empty", "response_cancel_not_active")] == ["e1", "c2"]

        await ws.send_json({"type": "session.update", "session": {"input_audio_format": "g711_ulaw"}})
        updated = await next_event(ws, "session.updated", seen)
        assert updated["session"]["audio"]["input"]["format"] == {"type": "audio/pcmu", "rate": 8000}
        await ws.send_json({"type": "input_audio_buffer.append", "audio": base64.b64encode(b"\xff" * 160).decode()})
        await ws.send_json({"type": "input_audio_buffer.clear"})
        await next_event(ws, "input_audio_buffer.cleared", seen)
    assert await drained(server)


async def test_frame_over_the_socket_limit_closes_only_that_socket(serve, new_pipeline) -> None:
    server = await serve(new_pipeline)
    async with aiohttp.ClientSession() as http:
        async with http.ws_connect(url(server, "/v1/realtime", "ws")) as ws:
            await ws.receive_json()
            with contextlib.suppress(ConnectionError):  # the server may hang up while we still write
                await ws.send_str("x" * (5 << 20))
            msg = await ws.receive()
            assert msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.ERROR)
            assert ws.closed
        assert await drained(server)
        async with http.get(url(server, "/healthz")) as health:
            assert (await health.json())["status"] == "ok"


async def test_session_limit_refuses_clearly(serve, new_pipeline) -> None:
    server = await serve(new_pipeline, max_sessions=1)
    async with aiohttp.ClientSession() as http, http.ws_connect(url(server, "/v1/realtime", "ws")) as first:
        assert (await first.receive_json())["type"] == "session.created"
        async with http.ws_connect(url(server, "/v1/realtime", "ws")) as second:
            refusal = await second.receive_json()
            assert refusal["type"] == "error" and refusal["error"]["code"] == "session_limit_reached"
            assert "limit of 1 concurrent sessions" in refusal["error"]["message"]
            await second.receive()
            assert second.close_code == aiohttp.WSCloseCode.TRY_AGAIN_LATER
        await first.send_json({"type": "input_audio_buffer.clear"})
        assert (await first.receive_json())["type"] == "input_audio_buffer.cleared"


async def test_abrupt_disconnect_frees_the_session(serve, new_pipeline, question) -> None:
    server = await serve(new_pipeline)
    http = aiohttp.ClientSession()
    ws = await http.ws_connect(url(server, "/v1/realtime", "ws"))
    await ws.receive_json()
    pcm = resample(question[0][48000:72000], 48000, 24000).astype("<i2").tobytes()
    await ws.send_json({"type": "input_audio_buffer.append", "audio": base64.b64encode(pcm).decode()})
    session = registry(server).sessions()[0]
    ws._response.connection.transport.abort()  # no close frame: the client vanishes mid-sentence
    await http.close()
    assert await drained(server)
    assert session.closed and session.conversation._closed


async def test_text_longer_than_the_context_fails_that_response_only(serve, new_pipeline) -> None:
    """A typed message the model's context cannot hold: the caller's fault, said so, and that response ends
    failed (it had been a server_error and a response 'completed' with no words); the next turn is answered."""
    server = await serve(new_pipeline)
    seen: list[dict[str, Any]] = []

    async def say(text: str) -> dict[str, Any]:
        await ws.send_json({"type": "conversation.item.create", "item": {
            "type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}})
        await ws.send_json({"type": "response.create"})
        return await next_event(ws, "response.done", seen)

    async with aiohttp.ClientSession() as http, http.ws_connect(url(server, "/v1/realtime", "ws")) as ws:
        await next_event(ws, "session.created", seen)
        failed = await say("peru " * 2000)
        assert failed["response"]["status"] == "failed"
        assert failed["response"]["status_details"] == {
            "type": "failed", "error": {"type": "invalid_request_error", "code": "context_length_exceeded"}}
        (error,) = [e for e in seen if e["type"] == "error"]
        assert error["error"]["code"] == "context_length_exceeded"
        assert error["error"]["type"] == "invalid_request_error"
        answered = await say("hello")
        assert answered["response"]["status"] == "completed"
        assert answered["response"]["output"][0]["content"][0]["transcript"].strip()
    assert await drained(server)


async def test_truncating_a_reply_is_acknowledged_and_checked(serve, new_pipeline) -> None:
    """A text-started reply's item can be truncated (it had been 'unknown item_id'), the truncation is
    acknowledged as OpenAI's server does, and a truncation past the audio sent or of a user item is refused."""
    server = await serve(new_pipeline)
    seen: list[dict[str, Any]] = []
    async with aiohttp.ClientSession() as http, http.ws_connect(url(server, "/v1/realtime", "ws")) as ws:
        await next_event(ws, "session.created", seen)
        await ws.send_json({"type": "conversation.item.create", "item": {
            "type": "message", "role": "user", "content": [{"type": "input_text", "text": "hello"}]}})
        await ws.send_json({"type": "response.create"})
        item = (await next_event(ws, "response.done", seen))["response"]["output"][0]["id"]
        sent_ms = len(reply_audio(seen, seen[-1]["response"]["id"])) * 1000 // 24000
        await ws.send_json(truncation(item, sent_ms // 2))
        truncated = await next_event(ws, "conversation.item.truncated", seen)
        assert truncated["item_id"] == item and truncated["audio_end_ms"] == sent_ms // 2
        for item_id, end_ms, param in ((item, sent_ms + 1000, "audio_end_ms"), (item, True, "audio_end_ms"),
                                       ("item_in_turn_1", 0, "item_id")):
            await ws.send_json(truncation(item_id, end_ms))
            assert (await next_event(ws, "error", seen))["error"]["param"] == param
    assert await drained(server)


async def test_truncating_a_finished_reply_forgets_the_words_not_played(serve, new_pipeline) -> None:
    """A reply truncated after its response.done had stayed whole in the history, so later turns built on words
    the caller never heard; now the history keeps only the words of the audio played, and truncating again (to
    nothing, twice) never eats into the reply before it."""
    server = await serve(new_pipeline)
    seen: list[dict[str, Any]] = []
    async with session(server, seen) as (ws, history):
        await ws.send_json(typed("hello"))
        await ws.send_json({"type": "response.create"})
        await next_event(ws, "response.done", seen)
        await ws.send_json({"type": "response.create"})  # to the history as it is: it ends with the first reply
        done = await next_event(ws, "response.done", seen)
        said = done["response"]["output"][0]["content"][0]["transcript"].split()
        assert history[-1] == {"role": "assistant", "content": " ".join(said)}
        earlier = copy.deepcopy(history[:-1])
        item, sent_ms = done["response"]["output"][0]["id"], len(reply_audio(seen, done["response"]["id"])) // 24
        assert sent_ms > 0

        async def truncate(end_ms: int) -> None:
            await ws.send_json(truncation(item, end_ms))
            await next_event(ws, "conversation.item.truncated", seen)

        await truncate(sent_ms // 4)
        assert history[:len(earlier)] == earlier and len(history) <= len(earlier) + 1
        kept = history[-1]["content"].split() if len(history) > len(earlier) else []  # none: nothing heard
        assert kept == said[:len(kept)] and len(kept) < len(said), (kept, said)
        for _ in range(2):
            await truncate(0)
            assert history == earlier
    assert not [e for e in seen if e["type"] == "error"]
    assert await drained(server)


async def test_a_reply_truncated_while_it_is_spoken_keeps_only_what_was_played(serve, new_pipeline) -> None:
    """Truncated as soon as it starts (before its first audio), a reply that then ran to its end had gone into
    the history whole; its response.done still carries all it said, the history none of it."""
    server = await serve(new_pipeline)
    seen: list[dict[str, Any]] = []
    async with session(server, seen) as (ws, history):
        await ws.send_json(typed("what can you do"))
        await ws.send_json({"type": "response.create"})
        item = (await next_event(ws, "response.created", seen))["response"]["output"][0]["id"]
        await ws.send_json(truncation(item, 0))
        await next_event(ws, "conversation.item.truncated", seen)
        done = await next_event(ws, "response.done", seen)
        assert done["response"]["status"] == "completed" and done["response"]["output"][0]["content"][0]["transcript"]
        assert history[-1] == {"role": "user", "content": "what can you do"}, history
    assert await drained(server)


async def test_response_create_while_one_is_active_is_refused(serve, new_pipeline) -> None:
    """A second response.create had cancelled the response in progress; as OpenAI's server does, it is refused
    with the client's event_id and the text typed before it waits for the next response. response.cancel, and a
    response.create after response.done, still work."""
    server = await serve(new_pipeline)
    seen: list[dict[str, Any]] = []
    async with session(server, seen) as (ws, history):
        for event in (typed("hello"), {"type": "response.create", "event_id": "first"}, typed("and goodbye"),
                      {"type": "response.create", "event_id": "second"}):
            await ws.send_json(event)
        assert (await next_event(ws, "response.done", seen))["response"]["status"] == "completed"
        refusal = next((e for e in seen if e["type"] == "error"), None) or await next_event(ws, "error", seen)
        assert refusal["error"]["code"] == "conversation_already_has_active_response", refusal
        assert refusal["error"]["type"] == "invalid_request_error" and refusal["error"]["event_id"] == "second"
        assert "in progress" in refusal["error"]["message"]
        assert [e["type"] for e in seen].count("response.created") == 1

        await ws.send_json({"type": "response.create", "event_id": "third"})
        assert (await next_event(ws, "response.done", seen))["response"]["status"] == "completed"
        assert [m["content"] for m in history if m["role"] == "user"][-1] == "and goodbye"

        await ws.send_json({"type": "response.create"})
        await ws.send_json({"type": "response.cancel"})
        cancelled = (await next_event(ws, "response.done", seen))["response"]
        assert cancelled["status_details"] == {"type": "cancelled", "reason": "client_cancelled"}, cancelled
        await ws.send_json({"type": "response.create"})
        assert (await next_event(ws, "response.done", seen))["response"]["status"] == "completed"
    assert [e["error"]["event_id"] for e in seen if e["type"] == "error"] == ["second"]
    assert await drained(server)


async def test_session_instructions_reach_the_pipeline(serve, resources) -> None:
    """session.update's instructions had been echoed in session.updated and used nowhere."""
    told: list[str] = []

    class Recording(VoicePipeline):
        def instruct(self, instructions: str) -> None:
            told.append(instructions)
            super().instruct(instructions)

    server = await serve(lambda: Recording(resources))
    seen: list[dict[str, Any]] = []
    async with aiohttp.ClientSession() as http, http.ws_connect(url(server, "/v1/realtime", "ws")) as ws:
        await next_event(ws, "session.created", seen)
        await ws.send_json({"type": "session.update", "session": {"instructions": "answer in one word."}})
        assert (await next_event(ws, "session.updated", seen))["session"]["instructions"] == "answer in one word."
    assert told == ["answer in one word."]
    assert await drained(server)


async def test_a_responses_own_instructions_hold_for_it_alone(serve, new_pipeline, monkeypatch) -> None:
    """response.create's instructions had been refused unless they repeated the session's; they are now the
    system message the LM decodes that response under, and the session's come back for the next one. Ones the
    model's context cannot hold with a reply are refused before anything starts."""
    systems: list[str] = []
    rounds = LmStage._rounds

    def recording(stage: LmStage, *args: Any) -> AsyncIterator[Any]:
        systems.append(stage.history[0]["content"])
        return rounds(stage, *args)

    monkeypatch.setattr(LmStage, "_rounds", recording)
    server = await serve(new_pipeline)
    seen: list[dict[str, Any]] = []
    async with session(server, seen) as (ws, history):
        await ws.send_json({"type": "session.update", "session": {"instructions": "answer in one word."}})
        await next_event(ws, "session.updated", seen)
        for options in ({"instructions": "greet the caller warmly."}, {}):
            await ws.send_json(typed("hello"))
            await ws.send_json({"type": "response.create", "response": options})
            assert (await next_event(ws, "response.done", seen))["response"]["status"] == "completed"
        assert systems == ["greet the caller warmly.", "answer in one word."]
        assert history[0] == {"role": "system", "content": "answer in one word."}
        for instructions, message in (("be brief. " * 1000, "leaves"), ("x" * 16_001, "over 16000 characters")):
            await ws.send_json({"type": "response.create", "event_id": "r", "response": {"instructions": instructions}})
            error = (await next_event(ws, "error", seen))["error"]
            assert error["param"] == "response.instructions" and message in error["message"], error
            assert error["event_id"] == "r"
        assert not registry(server).sessions()[0].conversation.thinking()  # nothing started for them
    assert len(systems) == 2
    assert await drained(server)


async def test_turn_detection_settings_tune_the_sessions_vad(serve, new_pipeline) -> None:
    """OpenAI's server_vad settings (as its docs' examples send them) are the VAD's own: silence_duration_ms
    its hangover, prefix_padding_ms its pre-roll, threshold its aggressiveness; had been refused. A refused
    setting changes nothing; turn_detection without them goes back to the server's configured VAD."""
    server = await serve(new_pipeline)
    seen: list[dict[str, Any]] = []
    tuned = {"type": "server_vad", "threshold": 0.8, "prefix_padding_ms": 500, "silence_duration_ms": 900}
    async with session(server, seen) as (ws, _):
        vad = registry(server).sessions()[0].conversation.config.vad
        configured = (vad.hangover_ms, vad.preroll_ms, vad.aggressiveness)
        await ws.send_json({"type": "session.update", "session": {"audio": {"input": {"turn_detection": tuned}}}})
        updated = await next_event(ws, "session.updated", seen)
        assert updated["session"]["audio"]["input"]["turn_detection"] == tuned
        vad = registry(server).sessions()[0].conversation.config.vad
        assert (vad.hangover_ms, vad.preroll_ms, vad.aggressiveness) == (900, 500, 3)

        await ws.send_json({"type": "session.update", "session": {"instructions": "be brief. " * 2000}})
        error = (await next_event(ws, "error", seen))["error"]  # as typed text, not tokenised for every reply
        assert error["param"] == "session.instructions" and "over 16000 characters" in error["message"]
        await ws.send_json({"type": "session.update", "session": {"instructions": "be brief. " * 1000}})
        error = (await next_event(ws, "error", seen))["error"]  # had been taken, and every reply then failed
        assert error["param"] == "session.instructions" and "leaves" in error["message"], error

        too_short = {"type": "server_vad", "silence_duration_ms": 20}
        await ws.send_json({"type": "session.update", "session": {"turn_detection": too_short}})
        error = (await next_event(ws, "error", seen))["error"]
        assert error["param"] == "session.turn_detection.silence_duration_ms" and "from 100 to 10000" in error["message"]
        assert registry(server).sessions()[0].conversation.config.vad.hangover_ms == 900

        await ws.send_json({"type": "session.update", "session": {"turn_detection": {"type": "server_vad"}}})
        await next_event(ws, "session.updated", seen)
        vad = registry(server).sessions()[0].conversation.config.vad
        assert (vad.hangover_ms, vad.preroll_ms, vad.aggressiveness) == configured
    assert await drained(server)


async def test_max_output_tokens_caps_the_sessions_replies(serve, resources) -> None:
    """A number had been refused (only 'inf' was accepted); it now caps each reply, below the server's own cap,
    and a reply it cuts ends 'incomplete'. A response.create's own cap holds for that response alone."""
    server = await serve(lambda: VoicePipeline(resources))
    seen: list[dict[str, Any]] = []

    async def reply(**options: Any) -> tuple[int, dict[str, Any]]:
        await ws.send_json(typed("hello"))
        await ws.send_json({"type": "response.create", **({"response": options} if options else {})})
        done = (await next_event(ws, "response.done", seen))["response"]
        return len(resources.engine.tokenizer.encode(done["output"][0]["content"][0]["transcript"])), done

    async def reply_tokens(**options: Any) -> int:
        return (await reply(**options))[0]

    async with session(server, seen) as (ws, _):
        tokens, done = await reply()
        assert tokens > 2 and done["status"] == "completed" and "status_details" not in done
        usage = done["usage"]  # had been null
        assert usage["output_tokens"] >= tokens and usage["input_tokens"] > 0
        assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
        tokens, done = await reply(max_output_tokens=2)
        assert tokens <= 2 and done["status_details"] == {"type": "incomplete", "reason": "max_output_tokens"}
        assert done["usage"]["output_tokens"] == 2
        assert await reply_tokens() > 2  # the response's cap was its own
        await ws.send_json({"type": "session.update", "session": {"max_output_tokens": 2}})
        assert (await next_event(ws, "session.updated", seen))["session"]["max_output_tokens"] == 2
        assert await reply_tokens() <= 2
        assert await reply_tokens(max_response_output_tokens="inf") > 2  # a response may lift the session's cap
        assert await reply_tokens() <= 2
        for bad in (0, "2", 10**6, True):
            await ws.send_json({"type": "session.update", "session": {"max_response_output_tokens": bad}})
            error = (await next_event(ws, "error", seen))["error"]
            assert error["param"] == "session.max_response_output_tokens", error
        await ws.send_json({"type": "session.update", "session": {"max_output_tokens": "inf"}})
        assert (await next_event(ws, "session.updated", seen))["session"]["max_output_tokens"] == "inf"
        assert await reply_tokens() > 2
    assert await drained(server)


async def test_options_the_server_would_ignore_are_refused_and_the_session_lives_on(serve, new_pipeline) -> None:
    """Text-only output (session.update output_modalities, response.create's response) had been acknowledged
    and answered with audio, and a response's instructions of 5 taken; each is now an error event naming the
    field and the client's event, nothing of a refused update is applied, and a valid response still follows."""
    server = await serve(new_pipeline)
    seen: list[dict[str, Any]] = []
    async with session(server, seen) as (ws, _):
        refused = [
            ({"type": "session.update", "event_id": "u1",
              "session": {"instructions": "be terse", "output_modalities": ["text"]}}, "session.output_modalities"),
            ({"type": "response.create", "event_id": "r1", "response": {"instructions": 5}},
             "response.instructions"),
            ({"type": "response.create", "event_id": "r2", "response": {"modalities": ["text"]}},
             "response.modalities"),
        ]
        for event, param in refused:
            await ws.send_json(event)
            error = (await next_event(ws, "error", seen))["error"]
            assert (error["param"], error["event_id"], error["type"]) == (param, event["event_id"],
                                                                          "invalid_request_error"), error
        await ws.send_json({"type": "session.update", "session": {}})
        unchanged = (await next_event(ws, "session.updated", seen))["session"]
        assert unchanged["instructions"] == "" and unchanged["output_modalities"] == ["audio"]
        await ws.send_json(typed("hello"))
        await ws.send_json({"type": "response.create", "response": {"output_modalities": ["audio"]}})
        assert (await next_event(ws, "response.done", seen))["response"]["status"] == "completed"
    assert [e["error"]["event_id"] for e in seen if e["type"] == "error"] == ["u1", "r1", "r2"]
    assert await drained(server)


async def send_audio(ws: aiohttp.ClientWebSocketResponse, pcm48: np.ndarray) -> None:
    """Append 24 kHz PCM16 in 100 ms events as fast as the socket takes them (a recording, not a microphone)."""
    pcm = resample(pcm48, 48000, 24000)
    for start in range(0, len(pcm), 2400):
        chunk = pcm[start:start + 2400].astype("<i2").tobytes()
        await ws.send_json({"type": "input_audio_buffer.append", "audio": base64.b64encode(chunk).decode()})


def user_messages(history: list[dict[str, Any]]) -> list[str]:
    return [m["content"] for m in history if m["role"] == "user"]


async def test_a_typed_item_joins_the_history_when_it_is_added(serve, new_pipeline, question) -> None:
    """Typed text had waited for the next response.create: a spoken turn in between was answered without it, and
    a later bare response.create answered it again. It is in the history once conversation.item.added is sent,
    keeps the client's item id, and a response.create answers the history as it stands."""
    server = await serve(new_pipeline)
    seen: list[dict[str, Any]] = []
    async with session(server, seen) as (ws, history):
        await ws.send_json({"type": "conversation.item.create", "item": {
            "id": "my_item", "type": "message", "role": "user", "content": [{"type": "input_text", "text": "hello"}]}})
        added = await next_event(ws, "conversation.item.added", seen)
        assert (added["item"]["id"], added["previous_item_id"]) == ("my_item", None)
        assert user_messages(history) == ["hello"]
        await speak(ws, question[0])
        spoken = (await next_event(ws, "conversation.item.input_audio_transcription.completed", seen))["transcript"]
        await next_event(ws, "response.done", seen)
        assert user_messages(history) == ["hello", spoken]
        await ws.send_json({"type": "response.create"})
        assert (await next_event(ws, "response.done", seen))["response"]["status"] == "completed"
        kept = user_messages(history)  # the model's short context may have forgotten the oldest of them
        assert kept == ["hello", spoken][2 - len(kept):], kept  # "hello" had been answered again
        assert history[-1]["role"] == "assistant"
    assert not [e for e in seen if e["type"] == "error"]
    assert await drained(server)


async def test_push_to_talk_commits_a_turn_that_response_create_answers(serve, new_pipeline, question) -> None:
    """turn_detection null had been refused. Now silence ends no turn and announces no speech: the commit makes the
    user item and response.create, sent at once after it, answers its words, in one response."""
    server = await serve(new_pipeline)
    seen: list[dict[str, Any]] = []
    async with session(server, seen) as (ws, history):
        await ws.send_json({"type": "session.update", "session": {"audio": {"input": {"turn_detection": None}}}})
        updated = await next_event(ws, "session.updated", seen)
        assert updated["session"]["audio"]["input"]["turn_detection"] is None
        await send_audio(ws, question[0])  # three seconds of silence after the words
        await asyncio.sleep(2)
        assert [e["type"] for e in seen] == ["session.created", "session.updated"]
        await ws.send_json({"type": "input_audio_buffer.commit"})
        await ws.send_json({"type": "response.create"})
        committed = await next_event(ws, "input_audio_buffer.committed", seen)
        heard = await next_event(ws, "conversation.item.input_audio_transcription.completed", seen)
        done = await next_event(ws, "response.done", seen)
        assert heard["item_id"] == committed["item_id"] and COUNTRY in heard["transcript"].lower()
        assert done["response"]["status"] == "completed"
        assert user_messages(history) == [heard["transcript"]] and history[-1]["role"] == "assistant"
        assert [e["type"] for e in seen].count("response.created") == 1
        assert not [e for e in seen if e["type"].startswith("input_audio_buffer.speech_")]
    assert not [e for e in seen if e["type"] == "error"]
    assert await drained(server)


async def test_a_committed_turn_and_a_response_create_give_one_response(serve, new_pipeline, question) -> None:
    """With server VAD a response.create sent right after a commit had been accepted, and then cut when the turn's
    own response started: two responses, the first answering the history without the turn. As OpenAI's server
    does, the turn's response is active from the commit, and the response.create is refused."""
    server = await serve(new_pipeline)
    seen: list[dict[str, Any]] = []
    async with session(server, seen) as (ws, history):
        await send_audio(ws, question[0][:-3 * 48000])  # no silence after the words: the commit ends the turn
        await ws.send_json({"type": "input_audio_buffer.commit"})
        await ws.send_json({"type": "response.create", "event_id": "rc"})
        refusal = await next_event(ws, "error", seen)
        assert (refusal["error"]["code"], refusal["error"]["event_id"]) == ("conversation_already_has_active_response",
                                                                           "rc")
        done = await next_event(ws, "response.done", seen)
        await asyncio.sleep(1)
        assert done["response"]["status"] == "completed"
        assert [e["type"] for e in seen].count("response.created") == 1
        assert len(user_messages(history)) == 1 and COUNTRY in user_messages(history)[0].lower()
    assert await drained(server)


async def test_speech_positions_are_places_in_the_audio_written(serve, new_pipeline, question) -> None:
    """audio_start_ms and audio_end_ms had been wall-clock ms since the socket opened; they are the VAD's
    positions in the audio appended, however late or fast it came. The speech of ``question`` starts at 1 s."""
    server = await serve(new_pipeline)
    seen: list[dict[str, Any]] = []
    speech_ms = (len(question[0]) - 4 * 48000) * 1000 // 48000
    async with session(server, seen) as (ws, _):
        await asyncio.sleep(2.5)  # a client idle for a while
        await send_audio(ws, question[0])
        started = await next_event(ws, "input_audio_buffer.speech_started", seen)
        stopped = await next_event(ws, "input_audio_buffer.speech_stopped", seen)
        await next_event(ws, "response.done", seen)
    assert 1000 - 400 <= started["audio_start_ms"] <= 1000  # the pre-roll (prefix_padding_ms) included
    assert 1000 + speech_ms <= stopped["audio_end_ms"] <= 1000 + speech_ms + 600  # and the hangover
    assert await drained(server)


async def test_a_committed_noise_gets_an_empty_transcript(serve, new_pipeline) -> None:
    """A turn that proved to be noise had left its committed item without any transcription result; as OpenAI's
    server does for an inaudible item, it is completed with an empty transcript, and nothing answers it."""
    server = await serve(new_pipeline)
    seen: list[dict[str, Any]] = []
    async with session(server, seen) as (ws, _):
        await send_audio(ws, np.concatenate([noise_burst(48000), np.zeros(2 * 48000, dtype=np.int16)]))
        committed = await next_event(ws, "input_audio_buffer.committed", seen)
        heard = await next_event(ws, "conversation.item.input_audio_transcription.completed", seen)
        assert (heard["item_id"], heard["transcript"]) == (committed["item_id"], "")
        await ws.send_json({"type": "response.create"})  # nothing is on its way: a response may be asked for
        assert (await next_event(ws, "response.done", seen))["response"]["status"] == "completed"
        assert [e["type"] for e in seen].count("response.created") == 1
    assert not [e for e in seen if e["type"] == "error"]
    assert await drained(server)
