"""One Realtime protocol session over any message channel (the websocket, or WebRTC's ``oai-events``).

The transport hands over each incoming message and a ``send`` coroutine; this class runs the
conversation's event stream out through the :class:`RealtimeEncoder` and maps client events onto the
:class:`~voice.events.Conversation` calls. A client mistake is answered with an ``error`` event and the
session carries on. With WebRTC the assistant audio goes to a :class:`PlaybackSink` (the paced media
track) instead of ``response.output_audio.delta`` events.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import numpy as np

from voice.audio import AudioFormatError
from voice.events import AudioCleared, AudioOut, PipelineEvent
from voice.transports.realtime_events import (
    ClientEventError,
    RealtimeEncoder,
    SessionConfig,
    apply_session_update,
    decode_audio_append,
    error_event,
    parse_client_event,
    response_options,
    user_text,
    vad_settings,
)
from voice.transports.sessions import Session

log = logging.getLogger(__name__)

MAX_EVENT_BYTES = 1 << 20
"""Largest client event accepted (1 MiB is ~22 s of 24 kHz PCM16 in base64)."""
MAX_TEXT_CHARS = 16_000
"""Typed user text a session holds for its next response. Unbounded, four items of 900 KiB took 13 s to
tokenise on the event loop, stalling every other session, and 250 of them held 170 MB."""

Send = Callable[[dict[str, Any]], Awaitable[None]]


def _check_length(instructions: str, param: str) -> None:
    """Instructions are the system message of a reply, tokenised for each: at most MAX_TEXT_CHARS."""
    if len(instructions) > MAX_TEXT_CHARS:
        raise ClientEventError(f"{param} is over {MAX_TEXT_CHARS} characters", param=param)


class PlaybackSink(Protocol):
    """Where a transport that plays the audio itself (WebRTC) wants the assistant's audio."""

    def write(self, turn_id: int, pcm: np.ndarray, sample_rate: int) -> None: ...

    def clear(self) -> None: ...


class RealtimeSession:
    """Protocol logic for one session; the transport only moves messages."""

    def __init__(self, session: Session, send: Send, sink: PlaybackSink | None = None,
                 max_event_bytes: int = MAX_EVENT_BYTES) -> None:
        self.session = session
        self.conversation = session.conversation
        self._send = send
        self._sink = sink
        self._max_event_bytes = max_event_bytes
        self.encoder = RealtimeEncoder(SessionConfig(id=session.id), audio_in_events=sink is None,
                                       t0=time.monotonic())
        self._pending_text: list[str] = []
        self._text_items = itertools.count(1)
        self._sent_samples: dict[int, int] = {}
        self._truncated: set[int] = set()  # turns the client truncated: what it said it played stands
        self._pump: asyncio.Task[None] | None = None

    @property
    def config(self) -> SessionConfig:
        return self.encoder.config

    async def start(self) -> None:
        """Announce the session and start forwarding pipeline events."""
        await self._send(self.encoder.event("session.created", session=self.config.to_json()))
        self._pump = asyncio.create_task(self._forward_events(), name=f"{self.session.id}-events")

    async def stop(self) -> None:
        if self._pump is not None:
            self._pump.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._pump

    async def handle(self, data: str | bytes) -> None:
        """Act on one client message; every refusal becomes an ``error`` event."""
        try:
            event = parse_client_event(data, self._max_event_bytes)
            await self._dispatch(event)
        except ClientEventError as err:
            await self._send(self.encoder.error(err))
        except Exception:  # the pipeline failed on this event: report it, keep the session
            log.exception("%s: client event failed", self.session.id)
            await self._send(error_event(self.encoder.event_id(), "internal error handling the event",
                                         "server_error", error_type="server_error"))

    def update_session(self, update: Any) -> None:
        """Apply a Realtime session object: its instructions become the assistant's system message, its turn
        detection the VAD's settings, its max_output_tokens a cap on replies; nothing changes when any of it is
        refused."""
        config = apply_session_update(self.config, update)
        _check_length(config.instructions, "session.instructions")
        try:
            self.conversation.instruct(config.instructions)
        except ValueError as err:  # instructions the model's context cannot hold with a reply
            raise ClientEventError(f"session.instructions: {err}", param="session.instructions") from None
        if config.turn_detection != self.config.turn_detection:
            try:
                self.conversation.tune_turn_detection(**vad_settings(config.turn_detection))
            except ValueError as err:  # e.g. a hangover shorter than the configured silence_start_ms
                self.conversation.instruct(self.config.instructions)  # as they were: nothing of it applies
                raise ClientEventError(f"session turn_detection: {err}", code="unsupported_value",
                                       param="session.audio.input.turn_detection") from None
        self.encoder.config = config
        self.conversation.limit_reply_tokens(self.config.max_output_tokens)

    async def _dispatch(self, event: dict[str, Any]) -> None:
        """Act on a parsed event; a refusal names the client's event_id, so the client knows which one failed."""
        client_id = event.get("event_id") if isinstance(event.get("event_id"), str) else None
        try:
            await self._act(event)
        except ClientEventError as err:
            err.event_id = err.event_id or client_id
            raise
        except AudioFormatError as err:  # audio that is no PCM of the session's format
            raise ClientEventError(str(err), code="invalid_audio", event_id=client_id) from None

    async def _act(self, event: dict[str, Any]) -> None:
        kind = event["type"]
        if kind == "input_audio_buffer.append":
            pcm = decode_audio_append(event, self.config.input_format)
            await self.conversation.push_audio(pcm, self.config.input_format.rate)
        elif kind == "session.update":
            self.update_session(event.get("session"))
            await self._send(self.encoder.event("session.updated", session=self.config.to_json()))
        elif kind == "input_audio_buffer.commit":
            await self.conversation.commit_turn()
        elif kind == "input_audio_buffer.clear":
            await self.conversation.clear_input()
            await self._send(self.encoder.event("input_audio_buffer.cleared"))
        elif kind == "conversation.item.create":
            text = user_text(event)
            if sum(map(len, self._pending_text)) + len(text) > MAX_TEXT_CHARS:
                raise ClientEventError(f"the user text waiting for response.create would be over {MAX_TEXT_CHARS} "
                                       "characters", param="item.content")
            self._pending_text.append(text)
            item = {"id": f"item_text_{next(self._text_items)}", "type": "message", "role": "user",
                    "status": "completed", "content": [{"type": "input_text", "text": text}]}
            await self._send(self.encoder.event("conversation.item.added", item=item))
            await self._send(self.encoder.event("conversation.item.done", item=item))
        elif kind == "response.create":
            options = response_options(event.get("response"))
            _check_length(options.instructions or "", "response.instructions")
            if self.encoder.responding:  # as OpenAI's server does; respond() would cut the active one
                raise ClientEventError("the conversation already has an active response in progress: wait for its "
                                       "response.done (or send response.cancel) before creating another",
                                       code="conversation_already_has_active_response")
            text = " ".join(self._pending_text) or None
            try:
                await self.conversation.respond(text, options)
            except ValueError as err:  # instructions the model's context cannot hold with a reply
                raise ClientEventError(f"response.instructions: {err}", param="response.instructions") from None
            self._pending_text.clear()
            self.encoder.ask_response()  # after respond(): one that failed leaves no response to wait for
        elif kind in ("response.cancel", "output_audio_buffer.clear"):
            await self.conversation.cancel_response()
        elif kind == "conversation.item.truncate":
            await self._truncate(event)

    async def _truncate(self, event: dict[str, Any]) -> None:
        """The client says how much of a reply it played: the pipeline keeps only that in its history (at once
        for a finished reply, when it is cut for one in progress), and later audio sent for it no longer counts
        as played."""
        item_id, end_ms = event.get("item_id"), event.get("audio_end_ms")
        turn = self.encoder.turn_of_output_item(str(item_id))
        if turn is None:
            raise ClientEventError(f"item_id {item_id!r} is no assistant item of this session (only those can be "
                                   "truncated)", param="item_id")
        if not isinstance(end_ms, int) or isinstance(end_ms, bool) or end_ms < 0:
            raise ClientEventError("audio_end_ms must be a non-negative integer", param="audio_end_ms")
        rate = self.conversation.output_rate
        samples, sent = end_ms * rate // 1000, self._sent_samples.get(turn)
        if sent is not None and samples > sent:
            raise ClientEventError(f"audio_end_ms {end_ms} is past the {sent * 1000 // rate} ms of audio sent",
                                   param="audio_end_ms")
        self._truncated.add(turn)
        self.conversation.played(turn, samples, truncated=True)
        await self._send(self.encoder.event("conversation.item.truncated", item_id=item_id, content_index=0,
                                            audio_end_ms=end_ms))

    async def _forward_events(self) -> None:
        try:
            async for ev in self.conversation.events():
                self._route_audio(ev)
                for out in self.encoder.encode(ev):
                    await self._send(out)
        except (ConnectionError, RuntimeError) as err:  # the channel went away; the transport closes us
            log.info("%s: event stream ended: %s", self.session.id, err)

    def _route_audio(self, ev: PipelineEvent) -> None:
        if isinstance(ev, AudioOut):
            if self._sink is not None:
                self._sink.write(ev.turn_id, ev.pcm, ev.sample_rate)
            else:
                # A websocket client plays what it receives; until it truncates, sent counts as played.
                sent = self._sent_samples.get(ev.turn_id, 0) + len(ev.pcm)
                self._sent_samples[ev.turn_id] = sent
                if ev.turn_id not in self._truncated:
                    self.conversation.played(ev.turn_id, sent)
        elif isinstance(ev, AudioCleared) and self._sink is not None:
            self._sink.clear()
