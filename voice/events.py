"""What flows out of a conversation pipeline, and what a transport may ask of it.

Transports (WebRTC, Realtime websocket, Twilio, desktop, file mode) only see these types: they push caller
audio in, consume :class:`PipelineEvent` objects and turn them into their own wire format. Keeping that
contract here lets every transport be written and tested without knowing the pipeline's insides.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np


@dataclass(frozen=True)
class SpeechStarted:
    """The caller started speaking turn ``turn_id`` (after the VAD's minimum duration); ``at`` is a monotonic
    time, ``audio_at`` the audio time where the turn's audio begins (its pre-roll included), so that a transport
    can say where in the audio it was written the speech lies."""

    turn_id: int
    at: float
    audio_at: float
    interrupted_reply: bool = False  # True when this speech barged in on the assistant


@dataclass(frozen=True)
class SpeechStopped:
    """End of the caller's turn ``turn_id`` (silence hangover elapsed, or the turn was committed); ``audio_at``:
    the audio time where the turn's audio ends."""

    turn_id: int
    at: float
    audio_at: float


@dataclass(frozen=True)
class TranscriptDelta:
    """Partial transcript while the caller speaks: ``confirmed`` words will not change, ``tentative`` may."""

    turn_id: int
    confirmed: str
    tentative: str


@dataclass(frozen=True)
class TranscriptCompleted:
    """The final transcript of a turn; empty when the turn proved to be noise (no reply follows it), so that
    every turn the caller was told of gets its result."""

    turn_id: int
    text: str


@dataclass(frozen=True)
class ReplyTextDelta:
    """Final reply text, streamed as the LM commits it."""

    turn_id: int
    text: str


@dataclass(frozen=True)
class ToolCallEvent:
    turn_id: int
    name: str
    arguments: dict[str, Any]
    result: str


@dataclass(frozen=True)
class AudioOut:
    """Assistant audio for the caller: int16 mono at the pipeline's output rate.

    It may follow its turn's ResponseDone: a finished reply still playing out when a noise barge-in paused it
    speaks its cut clauses again when it resumes."""

    turn_id: int
    pcm: np.ndarray
    sample_rate: int


@dataclass(frozen=True)
class AudioCleared:
    """Barge-in or cancel: the transport must drop any assistant audio it still holds."""

    turn_id: int


@dataclass(frozen=True)
class PipelineError:
    message: str
    code: str = "pipeline_error"
    caller_at_fault: bool = False  # the caller asked for something impossible; the pipeline itself is fine


@dataclass
class TokenUsage:
    """The LM's tokens for one response, over all its decoding rounds (a round per tool call, and a call
    decoded again): the prompts they read and the tokens they wrote. Realtime ``response.done``'s ``usage``."""

    input_tokens: int = 0
    output_tokens: int = 0

    def add(self, read: int, written: int) -> None:
        self.input_tokens += read
        self.output_tokens += written


@dataclass(frozen=True)
class ResponseDone:
    """The assistant's turn ended (completed, cut short, cancelled or failed); ``trace`` is its latency record."""

    turn_id: int
    text: str
    cancelled: bool
    trace: dict[str, Any] = field(default_factory=dict)
    error: PipelineError | None = None  # the LM failed on it (also sent as its own event)
    reason: str | None = None
    """Why it did not complete, in the Realtime API's words: cancelled for "turn_detected" (the caller spoke) or
    "client_cancelled"; cut short at its token cap, "max_output_tokens"."""
    usage: TokenUsage | None = None  # the LM's tokens for it

    @property
    def failed(self) -> bool:
        return self.error is not None


PipelineEvent = (
    SpeechStarted | SpeechStopped | TranscriptDelta | TranscriptCompleted | ReplyTextDelta | ToolCallEvent
    | AudioOut | AudioCleared | ResponseDone | PipelineError
)


@dataclass(frozen=True)
class ResponseOptions:
    """What one response may ask for itself alone (Realtime ``response.create``'s ``response``)."""

    max_tokens: int | None = None  # a cap on its tokens, never above the configured one; None: the session's
    instructions: str | None = None  # its system message; None: the session's; empty: the configured default


SESSION_DEFAULTS = ResponseOptions()
"""A response that asks nothing for itself."""


class Conversation(Protocol):
    """One caller's live conversation, as transports drive it."""

    output_rate: int

    async def push_audio(self, pcm: np.ndarray, sample_rate: int, timestamp: float | None = None) -> None:
        """Caller audio (int16 mono) at any supported rate; the pipeline resamples statefully. ``timestamp``: the
        audio time of its first sample (default: it ends now, as captured)."""

    def events(self) -> AsyncIterator[PipelineEvent]:
        """Every event of the conversation, in order, until :meth:`close`."""

    def played(self, turn_id: int, samples: int, truncated: bool = False) -> None:
        """The transport reports how much assistant audio actually reached the caller (for barge-in history);
        reports only grow, except a client's truncation, which says where playback stopped."""

    async def commit_turn(self) -> bool:
        """End the caller's turn now (manual turn detection, e.g. Realtime input_audio_buffer.commit), once the
        audio pushed before it is heard; False when no speech was heard to end a turn with."""

    def answer_pending(self) -> bool:
        """An answer is on its way whose response is not done: a finished turn awaits its transcript, or a reply
        is being produced."""

    def instruct(self, instructions: str) -> None:
        """The assistant's instructions (its system message) from the next reply on; empty: the configured
        default (Realtime ``session.instructions``). Raises ``ValueError``, changing nothing, for instructions
        that leave the model's context no room for a reply."""

    def limit_reply_tokens(self, tokens: int | None) -> None:
        """Replies stop after at most ``tokens`` tokens, or the configured cap if it is smaller (None: the
        configured cap; Realtime ``max_output_tokens``)."""

    def tune_turn_detection(self, **settings: int) -> None:
        """VAD settings (:class:`voice.vad.VadConfig` fields) over the configured ones, from the next frame on,
        the turn in progress included (Realtime ``turn_detection``); none: the configured ones again. With
        ``ends_turns=False`` only :meth:`commit_turn` ends a turn, and no reply starts until :meth:`respond`
        (push to talk). Raises ``ValueError`` for settings the VAD refuses."""

    async def clear_input(self) -> None:
        """Drop buffered caller audio that has not become a turn yet."""

    def add_user_text(self, text: str) -> None:
        """A typed user message joins the history now (after the reply in progress, if one is), unanswered
        until a response is asked for (Realtime ``conversation.item.create``)."""

    async def respond(self, text: str | None = None, options: ResponseOptions = SESSION_DEFAULTS) -> None:
        """Start an assistant response (to ``text`` as a user message, or to the history as it is once the audio
        and commits already sent are heard), with ``options`` for it alone. Raises ``ValueError``, starting
        nothing, for instructions that leave the model's context no room for a reply."""

    async def cancel_response(self) -> None:
        """Stop the current response: LM and TTS are cancelled and AudioCleared is emitted."""

    async def close(self) -> None:
        """Free everything the conversation holds (LM session, buffers, tasks)."""
