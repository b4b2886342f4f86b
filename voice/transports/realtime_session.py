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
    client_item_id,
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
"""The longest typed user message or instructions. Unbounded, four items of 900 KiB took 13 s to tokenise on the
event loop, stalling every other session."""

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
        self._t0 = time.monotonic()
        self._written_s = 0.0  # audio appended so far: the next append's place in the session's audio
        self.encoder = RealtimeEncoder(SessionConfig(id=session.id), audio_in_events=sink is None, t0=self._t0)
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
            await self._append(event)
        elif kind == "session.update":
            self.update_session(event.get("session"))
            await self._send(self.encoder.event("session.updated", session=self.config.to_json()))
        elif kind == "input_audio_buffer.commit":
            if not await self.conversation.commit_turn():  # as OpenAI's server answers an empty buffer
                raise ClientEventError("the input audio buffer holds no speech to commit",
                                       code="input_audio_buffer_commit_empty")
        elif kind == "input_audio_buffer.clear":
            await self.conversation.clear_input()
            await self._send(self.encoder.event("input_audio_buffer.cleared"))
        elif kind == "conversation.item.create":
            await self._create_item(event)
        elif kind == "response.create":
            await self._respond(event)
        elif kind == "response.cancel":
            await self._cancel()
        elif kind == "output_audio_buffer.clear":
            await self.conversation.cancel_response()
        elif kind == "conversation.item.truncate":
            await self._truncate(event)

    async def _append(self, event: dict[str, Any]) -> None:
        """Caller audio, placed on the session's audio timeline by the samples written before it, so that the
        VAD's positions are positions in that audio (``audio_start_ms``), however fast or late it arrives."""
        rate = self.config.input_format.rate
        pcm = decode_audio_append(event, self.config.input_format)
        await self.conversation.push_audio(pcm, rate, timestamp=self._t0 + self._written_s)
        self._written_s += len(pcm) / rate

    async def _create_item(self, event: dict[str, Any]) -> None:
        """A typed user message joins the conversation's history at once; a later response.create answers it."""
        text = user_text(event)
        if len(text) > MAX_TEXT_CHARS:
            raise ClientEventError(f"a user message is over {MAX_TEXT_CHARS} characters", param="item.content")
        announced = self.encoder.typed_item(text, client_item_id(event), event.get("previous_item_id"))
        self.conversation.add_user_text(text)
        for out in announced:
            await self._send(out)

    def _response_active(self) -> bool:
        """From response.create to response.done; with server VAD also from a turn's commit, as OpenAI's server
        creates the turn's response then, while this pipeline announces it only with its first words."""
        return self.encoder.responding or (not self.encoder.push_to_talk and self.conversation.answer_pending())

    async def _respond(self, event: dict[str, Any]) -> None:
        """A response to the history as it stands (the audio committed before it included), one at a time."""
        options = response_options(event.get("response"))
        _check_length(options.instructions or "", "response.instructions")
        if self._response_active():
            raise ClientEventError("the conversation already has an active response in progress: wait for its "
                                   "response.done (or send response.cancel) before creating another",
                                   code="conversation_already_has_active_response")
        try:
            await self.conversation.respond(None, options)
        except ValueError as err:  # instructions the model's context cannot hold with a reply
            raise ClientEventError(f"response.instructions: {err}", param="response.instructions") from None
        self.encoder.ask_response()  # after respond(): one that failed leaves no response to wait for

    async def _cancel(self) -> None:
        if not self._response_active():  # as OpenAI's server answers it
            raise ClientEventError("there is no active response to cancel", code="response_cancel_not_active")
        await self.conversation.cancel_response()

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
