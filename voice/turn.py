"""The state of one caller turn and of one assistant reply, as the pipeline tracks them.

Kept apart from the pipeline's control flow so the rules that decide turn-taking (is the assistant
still audible? how much of it was heard?) read as small methods on plain data.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from voice.asr import StreamingTranscriber
from voice.events import SESSION_DEFAULTS, PipelineError, ResponseOptions, TokenUsage
from voice.trace import TurnTrace
from voice.tts_stage import SpokenLog


@dataclass(eq=False)
class Reply:
    """One assistant reply: its tasks, the text the LM produced, and what of its audio went out."""

    turn_id: int
    trace: TurnTrace
    output_rate: int
    clauses: asyncio.Queue[str | None] = field(default_factory=asyncio.Queue)
    log: SpokenLog = field(default_factory=SpokenLog)
    text: list[str] = field(default_factory=list)
    """Speakable text the LM produced, in order."""
    lm_task: asyncio.Task[None] | None = None
    tts_task: asyncio.Task[None] | None = None
    lm_done: bool = False
    error: PipelineError | None = None
    """Why the LM failed on it: its response ends as failed, not completed."""
    options: ResponseOptions = SESSION_DEFAULTS
    """What it asked for itself alone: a token cap, instructions (Realtime ``response.create``)."""
    usage: TokenUsage = field(default_factory=TokenUsage)
    """The LM's tokens for it so far."""
    end_reason: str | None = None
    """Why it ended early (:attr:`voice.events.ResponseDone.reason`); None: it ended where the LM ended it."""
    paused: bool = False
    """A barge-in stopped the audio; the reply is dropped once the interruption proves to be speech."""
    paused_at_sample: int = 0
    dropped: bool = False
    """Cut off for good; its history entry holds only what was heard."""
    counters: dict[str, int] = field(default_factory=dict)
    """Its turn's counts of speculative work thrown away (they go into the trace)."""
    history_mark: int = 0
    """The LM history's :meth:`~voice.lm_stage.LmStage.mark` before this reply: a discarded speculative reply
    rolls back to it."""
    held: bool = False
    """Started speculatively during the hangover: output is kept back until the turn really ends."""
    held_output: list[Any] = field(default_factory=list)
    """Audio arrays and events produced while held, in order."""
    done_while_held: bool = False
    confirmed: asyncio.Event = field(default_factory=asyncio.Event)
    """Set once the reply is not speculative: tools that change state (`Tool.changes_state`) wait for it."""
    in_history: bool = False
    """Its LM began on the history: a message typed from now on follows its answer."""
    generation: int = 0
    """The audio generation its current TTS task emits under."""
    record: dict[str, Any] = field(default_factory=dict)
    """Its trace record, once finished; a barge-in while it still plays out amends it."""
    finished: bool = False
    """ResponseDone went out (all audio handed over, or the reply was dropped)."""
    played_reported: int | None = None
    """Cumulative samples the transport says it played; None while it has said nothing."""
    truncated: bool = False
    """The client stopped playing it at ``played_reported`` (Realtime ``conversation.item.truncate``)."""
    first_emit_at: float | None = None
    playout_until: float = 0.0
    """When the audio handed over so far ends, if the transport plays it in real time from the start."""

    def note_emitted(self, samples: int, now: float) -> None:
        if self.first_emit_at is None:
            self.first_emit_at = now
        self.playout_until = max(self.playout_until, now) + samples / self.output_rate

    def report_played(self, samples: int, truncated: bool = False) -> None:
        """The transport's cumulative count of samples played, or with ``truncated`` where the client stopped
        playback: the rest is never heard, and no later playback report undoes that."""
        if truncated:
            self.truncated, self.played_reported = True, samples
        elif not self.truncated:
            self.played_reported = max(self.played_reported or 0, samples)

    def played(self, now: float | None = None) -> int:
        """Samples the caller has heard: the transport's report, else a real-time estimate."""
        if self.played_reported is not None:
            return min(self.played_reported, self.log.total)
        if self.first_emit_at is None:
            return 0
        now = time.monotonic() if now is None else now
        return min(self.log.total, int((now - self.first_emit_at) * self.output_rate))

    @property
    def producing(self) -> bool:
        """LM or TTS still working for the caller (a paused reply is not)."""
        return not self.paused and any(not task.done() for task in self.tasks())

    def audible(self, now: float | None = None) -> bool:
        """Whether the assistant is still talking (or about to): the window in which speech is a barge-in.

        A held (speculative) reply is not: nothing of it has gone out while the caller's turn is open.
        """
        if self.held:
            return False
        if self.producing:
            return True
        if self.paused or self.log.total == 0:
            return False
        if self.played_reported is not None:
            return not self.truncated and self.played_reported < self.log.total
        return (time.monotonic() if now is None else now) < self.playout_until

    def tasks(self) -> list[asyncio.Task[None]]:
        return [t for t in (self.lm_task, self.tts_task) if t is not None]


@dataclass(eq=False)
class Turn:
    """One stretch of caller speech, from the VAD's start to its end of turn."""

    id: int
    trace: TurnTrace
    transcriber: StreamingTranscriber
    started_at: float
    interrupts: Reply | None = None
    """The reply that was audible when this speech began: paused after ``barge_in_min_ms`` of it."""
    partials_task: asyncio.Task[None] | None = None
    ended: bool = False
    counters: dict[str, int] = field(
        default_factory=lambda: {"speculative_finals_discarded": 0, "speculative_replies_discarded": 0}
    )
    speculative_final: asyncio.Task[Any] | None = None
    speculative_reply: Reply | None = None
    """Started from the speculative final during the hangover; released at the end of the turn."""
    stamps_before_reply: set[str] = field(default_factory=set)
