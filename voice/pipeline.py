"""One caller's live conversation: audio in -> VAD -> streaming ASR -> LM -> clause TTS -> audio out.

Stages are asyncio tasks between queues. The input task owns the caller's audio (resampling, VAD,
feeding the turn's transcriber); each turn gets a partials task (transcript deltas, LM prefill) and a
finishing task (the final transcript); each reply gets an LM task and a TTS task joined by a clause
queue. Cancellation has one mechanism: an audio generation number that every reply's audio carries,
bumped on barge-in or cancel, so audio of an old generation never reaches the transport even if a
task is already past its last await.

Barge-in happens in two steps so that a cough cannot silence the assistant: once the caller's speech
has lasted ``barge_in_min_ms`` the audio stops (AudioCleared) and the reply is paused; when the
interruption proves to be words (a partial or a final transcript) the reply is dropped and the history
keeps only what the transport says was played; if it proves to be noise the reply resumes from the
clause that was cut.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

import numpy as np

from dlm.engine import PromptTooLong
from dlm.tools.calls import ToolCall
from voice.asr import StreamingTranscriber, collapse_repeats
from voice.audio import PcmFrame, Resampler, as_pcm16, check_rate
from voice.chunker import ClauseChunker
from voice.config import PipelineConfig
from voice.events import (
    SESSION_DEFAULTS,
    AudioCleared,
    AudioOut,
    PipelineError,
    PipelineEvent,
    ReplyTextDelta,
    ResponseDone,
    ResponseOptions,
    SpeechStarted,
    SpeechStopped,
    ToolCallEvent,
    TranscriptCompleted,
    TranscriptDelta,
)
from voice.lm_stage import LmStage
from voice.resources import Resources
from voice.trace import TurnTrace
from voice.tts_stage import END_OF_REPLY, speak_clauses
from voice.turn import Reply, Turn
from voice.vad import VAD_RATE, TurnDetector, VadEvent, VadEventKind

SILENCE_LEVEL = 64
"""Samples at or below this magnitude (-54 dBFS) count as silence when finding the first audible one."""
INPUT_QUEUE_FRAMES = 1000
"""Caller audio waiting for the input task (~20 s of 20 ms frames) before push_audio applies backpressure."""

PLAYOUT_POLL_S = 0.05
"""How often a finished reply's playout is checked before its trace record goes out."""
PLAYOUT_GRACE_S = 5.0
"""How long past real-time playout a trace record waits for a transport whose played reports stop short."""
ARRIVALS_KEPT = 3000
"""Recent input frames remembered for mapping audio time to arrival time (~60 s of 20 ms frames)."""

T = TypeVar("T")
_Command = Callable[[], None]
TraceSink = Callable[[dict[str, Any]], None]


def first_audible(pcm: np.ndarray) -> int | None:
    """Index of the first non-silent sample, or None for a silent chunk."""
    loud = np.flatnonzero(np.abs(pcm.astype(np.int32)) > SILENCE_LEVEL)
    return int(loud[0]) if len(loud) else None


class VoicePipeline:
    """Implements :class:`voice.events.Conversation` over loaded :class:`Resources`."""

    def __init__(
        self, resources: Resources, config: PipelineConfig | None = None, on_trace: TraceSink | None = None
    ) -> None:
        self.config = config or resources.config
        self.resources = resources
        self.output_rate = check_rate(self.config.output_rate)
        self._on_trace = on_trace
        self._lm = LmStage(resources.engine, self.config.lm)
        self._events: asyncio.Queue[PipelineEvent | None] = asyncio.Queue()
        self._input: asyncio.Queue[PcmFrame | _Command] = asyncio.Queue(maxsize=INPUT_QUEUE_FRAMES)
        self._resamplers: dict[int, Resampler] = {}
        self._arrivals: deque[tuple[float, float, float]] = deque(maxlen=ARRIVALS_KEPT)
        self._vad = TurnDetector(self.config.vad)
        self._configured_vad = self.config.vad  # what a session's turn-detection settings are applied over
        self._vad_muted = False
        self._turn: Turn | None = None  # the turn the caller is speaking now
        self._reply: Reply | None = None  # the latest reply
        self._unanswered: str | None = None  # a transcript whose reply waits for the caller to finish
        self._typed_after_reply: list[str] = []  # typed while a reply is produced: they follow its answer
        self._finishers: set[asyncio.Task[None]] = set()  # turns being transcribed
        self._next_turn = 1
        self._audio_gen = 0
        self._background: set[asyncio.Task[Any]] = set()
        self._finishing = 0
        self._closed = False
        self._input_task = asyncio.get_running_loop().create_task(self._input_loop())

    # ----- the Conversation protocol -------------------------------------------------------------

    async def push_audio(self, pcm: np.ndarray, sample_rate: int, timestamp: float | None = None) -> None:
        """Caller audio; ``timestamp``: audio time of its first sample (default: it ends now, as captured)."""
        now = time.monotonic()
        pcm = as_pcm16(pcm)
        frame = PcmFrame(pcm, sample_rate, now - len(pcm) / sample_rate if timestamp is None else timestamp)
        self._arrivals.append((frame.timestamp, frame.end_time, now))
        await self._input.put(frame)

    async def events(self) -> AsyncIterator[PipelineEvent]:
        while (event := await self._events.get()) is not None:
            yield event

    def played(self, turn_id: int, samples: int, truncated: bool = False) -> None:
        """``samples``: cumulative count of this turn's assistant audio that reached the caller.

        A truncation says where playback stopped. A reply still in progress keeps only the words played when
        it is cut; one already in the history is amended now, so that no later turn builds on words the
        caller never heard (what the Realtime API's ``conversation.item.truncate`` promises).
        """
        reply = self._reply
        if reply is None or reply.turn_id != turn_id:
            return
        reply.report_played(samples, truncated)
        if truncated and reply.finished:
            self._lm.amend_last_reply(reply.log.heard(reply.played()))

    async def commit_turn(self) -> bool:
        def commit() -> bool:
            ended = self._vad.force_end(self._audio_now())
            self._handle_vad(ended)
            return bool(ended)

        return await self._on_input_task(commit, closed=False)

    async def _on_input_task(self, action: Callable[[], T], closed: T) -> T:
        """`action`'s result, run by the input task once what was queued before it is handled; `closed` where the
        pipeline closes first, as nothing would run it then (a commit awaited as a session closed had hung)."""
        if self._closed:
            return closed
        done: asyncio.Future[T] = asyncio.get_running_loop().create_future()

        def run() -> None:
            try:
                done.set_result(action())
            except Exception as exc:  # its caller's to raise; the input task goes on
                done.set_exception(exc)

        await self._input.put(run)
        await asyncio.wait({done, self._input_task}, return_when=asyncio.FIRST_COMPLETED)
        return done.result() if done.done() else closed

    def instruct(self, instructions: str) -> None:
        self._lm.instruct(self._instructions(instructions))

    def limit_reply_tokens(self, tokens: int | None) -> None:
        self._lm.config = dataclasses.replace(self.config.lm, max_new_tokens=self._token_cap(tokens))

    def _instructions(self, instructions: str) -> str:
        """A client's instructions; empty: the configured system prompt."""
        return instructions or self.config.lm.system_prompt

    def _token_cap(self, tokens: int | None) -> int:
        """A client's reply cap, never above the configured one (None: the configured one)."""
        return self.config.lm.max_new_tokens if tokens is None else min(tokens, self.config.lm.max_new_tokens)

    def tune_turn_detection(self, **settings: int) -> None:
        self.config = self.config.replace(vad=dataclasses.replace(self._configured_vad, **settings))
        self._vad.retune(self.config.vad)

    @property
    def _push_to_talk(self) -> bool:
        """Turns end only when committed, and only the client's respond() answers them."""
        return not self.config.vad.ends_turns

    def add_user_text(self, text: str) -> None:
        """Into the history at once, unless a reply already read it: then right after that reply's answer, as
        the Realtime API orders an item created while a response is in progress after the response's item."""
        reply = self._reply
        if reply is not None and reply.in_history and not reply.finished:
            self._typed_after_reply.append(text)
        else:
            self._lm.add_user_message(text)

    def _add_typed_after_reply(self) -> None:
        for text in self._typed_after_reply:
            self._lm.add_user_message(text)
        self._typed_after_reply.clear()

    async def clear_input(self) -> None:
        def clear() -> None:
            self._vad = TurnDetector(self.config.vad)
            self._drop_turn()

        await self._input.put(clear)

    async def respond(self, text: str | None = None, options: ResponseOptions = SESSION_DEFAULTS) -> None:
        if options.instructions is not None:
            options = dataclasses.replace(options, instructions=self._instructions(options.instructions))
            self._lm.check_instructions(options.instructions)
        if options.max_tokens is not None:
            options = dataclasses.replace(options, max_tokens=self._token_cap(options.max_tokens))
        turn_id = self._new_turn_id()
        trace = TurnTrace(turn_id)
        trace.mark("speech_end")
        trace.mark("asr_final")
        if text is not None:
            trace.transcript = text
        self._cut_reply("client_cancelled")
        self._start_reply(turn_id, trace, text, options=options, after_input=True)

    async def cancel_response(self) -> None:
        self._cut_reply("client_cancelled")

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        tasks = [self._input_task, *self._background]
        if self._turn is not None:
            tasks += [t for t in (self._turn.partials_task,) if t is not None]
        if self._reply is not None:
            tasks += self._reply.tasks()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._lm.close()
        self._events.put_nowait(None)

    # ----- driving the pipeline faster than real time ------------------------------------------

    async def settle(self) -> None:
        """Wait until the audio pushed so far is processed and no partial ASR pass is running.

        File mode's ``--fast`` calls this between frames so that partial transcripts, prefill and the
        speculative final happen at the same audio positions as they would live.
        """
        while not self._input.empty():
            await asyncio.sleep(0)
        await asyncio.sleep(0)
        if self._turn is not None:
            await self._turn.transcriber.idle()

    @property
    def in_turn(self) -> bool:
        """The caller is speaking (a turn has started and not ended)."""
        return self._turn is not None

    def thinking(self) -> bool:
        """A finished turn awaits its transcript, or a reply is being produced (not merely held back): file mode
        waits on it, the audio of a finished reply resumed after a noise included."""
        reply = self._reply
        return self._finishing > 0 or (reply is not None and reply.producing and not reply.held)

    def answer_pending(self) -> bool:
        """An answer is on its way whose response is not done: a finished turn awaits its transcript, or a reply
        is being produced (a done one resumed after a noise is not)."""
        return self.thinking() and not (self._finishing == 0 and self._reply is not None and self._reply.finished)

    @property
    def history(self) -> list[dict[str, Any]]:
        """The conversation as the LM sees it."""
        return self._lm.history

    # ----- input: audio -> VAD -> transcriber ----------------------------------------------------

    async def _input_loop(self) -> None:
        while True:
            item = await self._input.get()
            try:
                if isinstance(item, PcmFrame):
                    self._process_audio(item)
                else:
                    item()
            except Exception as err:  # one bad frame must not stop the caller being heard
                self._emit(PipelineError(f"input stage failed: {err!r}", "input_failed"))

    def _process_audio(self, frame: PcmFrame) -> None:
        if self.config.turn.barge_in == "ignore_while_speaking" and self._assistant_audible():
            self._vad_muted = True
            return
        if self._vad_muted:  # the assistant stopped talking: listen afresh, not from mid-echo
            self._vad_muted = False
            self._vad = TurnDetector(self.config.vad)
            self._drop_turn()
        resampler = self._resamplers.get(frame.sample_rate)
        if resampler is None:
            resampler = self._resamplers[frame.sample_rate] = Resampler(frame.sample_rate, VAD_RATE)
        pcm = resampler.process(frame.samples)
        if len(pcm):
            self._handle_vad(self._vad.process(PcmFrame(pcm, VAD_RATE, frame.timestamp)))

    def _audio_now(self) -> float:
        """Audio time just after the last sample received (the clock the VAD counts in)."""
        return self._arrivals[-1][1] if self._arrivals else time.monotonic()

    def _arrival(self, audio_time: float) -> float:
        """When the pipeline had the audio of ``audio_time``: the arrival of its frame, less what followed it.

        Live, frame timestamps are capture times and this is (nearly) the identity; a file fed faster
        than real time carries audio times far ahead of the clock, and this maps them back to the clock.
        """
        for start, end, arrived in reversed(self._arrivals):
            if start <= audio_time:
                return arrived - max(0.0, end - audio_time)
        return audio_time

    def _handle_vad(self, events: list[VadEvent]) -> None:
        for event in events:
            kind = event.kind
            if kind is VadEventKind.SPEECH_STARTED:
                self._on_speech_started(event)
            elif self._turn is None:
                continue
            elif kind is VadEventKind.AUDIO:
                self._on_turn_audio(self._turn, event)
            elif kind is VadEventKind.SILENCE_STARTED:
                self._on_silence_started(self._turn, event)
            elif kind is VadEventKind.SPEECH_RESUMED:
                self._on_speech_resumed(self._turn)
            elif kind is VadEventKind.TURN_ENDED:
                self._on_turn_ended(self._turn, event)

    def _on_speech_started(self, event: VadEvent) -> None:
        self._drop_turn()
        turn_id = self._new_turn_id()
        trace = TurnTrace(turn_id)
        trace.mark("speech_started", self._arrival(event.timestamp))
        turn = Turn(turn_id, trace, StreamingTranscriber(self.resources.asr), event.timestamp)
        if self.config.turn.barge_in == "vad" and not self._push_to_talk and self._assistant_audible():
            turn.interrupts = self._reply
        turn.transcriber.start_turn(event.audio, event.audio_start)
        turn.partials_task = asyncio.get_running_loop().create_task(self._partials_loop(turn))
        self._turn = turn
        assert event.audio_start is not None
        self._emit(SpeechStarted(turn_id, self._arrival(event.timestamp), event.audio_start,
                                 interrupted_reply=turn.interrupts is not None))

    def _on_turn_audio(self, turn: Turn, event: VadEvent) -> None:
        turn.transcriber.feed(event.audio)
        reply = turn.interrupts
        heard_ms = 1000 * (event.timestamp - turn.started_at)
        if reply is not None and not reply.paused and heard_ms >= self.config.turn.barge_in_min_ms:
            turn.trace.mark("barge_in", self._arrival(event.timestamp))
            self._pause(reply)

    def _on_silence_started(self, turn: Turn, event: VadEvent) -> None:
        turn.trace.mark("silence_started", self._arrival(event.timestamp))
        if not self.config.turn.speculative_asr:
            return
        task = turn.transcriber.start_final(event.timestamp)
        turn.speculative_final = task
        if self.config.turn.speculative_reply:
            task.add_done_callback(lambda done: self._on_speculative_final(turn, done))

    def _on_speculative_final(self, turn: Turn, task: asyncio.Task[Any]) -> None:
        """The final transcript is ready before the hangover ran out: start answering, audio held back."""
        if turn.ended or turn.speculative_final is not task or task.cancelled() or task.exception() is not None:
            return
        text = collapse_repeats(task.result().text)
        if not text or self._unanswered is not None or self._closed or self._push_to_talk:
            return
        turn.stamps_before_reply = set(turn.trace.stamps)
        turn.trace.mark("asr_final")
        self._cut_reply("turn_detected")
        turn.speculative_reply = self._start_reply(turn.id, turn.trace, text, held=True)

    def _on_speech_resumed(self, turn: Turn) -> None:
        """The caller goes on: the speculative final, and any reply started from it, are thrown away."""
        turn.transcriber.discard_final()
        turn.speculative_final = None
        turn.trace.stamps.pop("silence_started", None)
        turn.counters["speculative_finals_discarded"] += 1
        self._discard_speculative_reply(turn)

    def _discard_speculative_reply(self, turn: Turn) -> None:
        """Throw away the reply held back during the turn's hangover, unheard and unannounced (no event went
        out for it), with what it added to the history; the turn is answered afresh when it ends."""
        reply, turn.speculative_reply = turn.speculative_reply, None
        if reply is None:
            return
        turn.counters["speculative_replies_discarded"] += 1
        reply.dropped = reply.finished = True
        for task in reply.tasks():
            task.cancel()
        self._lm.rollback(reply.history_mark)
        for name in set(turn.trace.stamps) - turn.stamps_before_reply:
            del turn.trace.stamps[name]
        if self._reply is reply:
            self._reply = None
        self._add_typed_after_reply()

    def _on_turn_ended(self, turn: Turn, event: VadEvent) -> None:
        turn.ended = True
        self._turn = None
        assert event.speech_end is not None
        turn.trace.mark("speech_end", self._arrival(event.speech_end))
        turn.trace.mark("turn_end_detected", self._arrival(event.timestamp))
        self._emit(SpeechStopped(turn.id, self._arrival(event.timestamp), event.timestamp))
        self._finishing += 1
        finisher = self._spawn(self._finish_turn(turn))
        self._finishers.add(finisher)
        finisher.add_done_callback(self._finishers.discard)

    def _drop_turn(self) -> None:
        """Forget the turn being spoken (cleared input, or a new turn replacing it), with the final transcript
        and the reply started on it if it was in its hangover: neither must answer words that were cleared."""
        turn, self._turn = self._turn, None
        if turn is not None:
            turn.transcriber.reset()
            turn.speculative_final = None
            self._discard_speculative_reply(turn)
            if turn.partials_task is not None:
                turn.partials_task.cancel()

    async def _partials_loop(self, turn: Turn) -> None:
        """Transcript deltas out; confirmed words prefilled; an interruption confirmed as speech."""
        while True:
            partial = await turn.transcriber.partials.get()
            turn.trace.mark("first_partial")
            self._emit(TranscriptDelta(turn.id, partial.confirmed, partial.tentative))
            if turn.interrupts is not None and turn.interrupts.paused and partial.text:
                self._drop(turn.interrupts, "turn_detected")  # the interruption is words, not noise
            if self.config.turn.prefill_during_speech and partial.newly_confirmed:
                history_ready = self._reply is None or self._reply.finished
                try:
                    if history_ready and await self._lm.prefill_partial(self._user_text(partial.confirmed)):
                        turn.trace.stamps["last_prefill_done"] = time.monotonic()
                except (RuntimeError, ValueError) as err:  # only a lost head start: the reply prefills anyway
                    self._emit(PipelineError(f"prefill while speaking failed: {err}", "prefill_failed"))

    async def _finish_turn(self, turn: Turn) -> None:
        try:
            if turn.partials_task is not None:
                turn.partials_task.cancel()
            final = await turn.transcriber.final()
            turn.trace.mark("asr_final")
            text = collapse_repeats(final.text)
            reply = turn.interrupts
            if not text:  # noise or silence: no turn after all
                self._emit(TranscriptCompleted(turn.id, ""))
                if reply is not None and reply.paused and not reply.dropped:
                    self._resume(reply)
                elif self._unanswered is not None and self._turn is None:
                    self._answer_pending(turn)
                return
            turn.trace.transcript = text
            self._emit(TranscriptCompleted(turn.id, text))
            if self._push_to_talk:  # the words wait for the client's response.create
                self.add_user_text(text)
                return
            if turn.speculative_reply is not None:
                self._release(turn.speculative_reply, turn.counters)
                return
            self._cut_reply("turn_detected")
            if self._turn is not None:  # the caller already goes on talking: answer both together
                self._unanswered = self._user_text(text)
                return
            self._start_reply(turn.id, turn.trace, self._user_text(text)).counters = turn.counters
        except asyncio.CancelledError:
            raise
        except Exception as err:  # the session must outlive one bad turn
            self._emit(PipelineError(f"finishing turn {turn.id} failed: {err!r}", "turn_failed"))
        finally:
            self._finishing -= 1

    def _user_text(self, text: str) -> str:
        """A transcript still unanswered from an earlier turn joins the new one into one user message."""
        return f"{self._unanswered} {text}" if self._unanswered else text

    def _answer_pending(self, turn: Turn) -> None:
        text, self._unanswered = self._unanswered, None
        turn.trace.transcript = text or ""
        self._start_reply(turn.id, turn.trace, text).counters = turn.counters

    # ----- replies: LM -> clauses -> TTS -> audio ------------------------------------------------

    def _start_reply(self, turn_id: int, trace: TurnTrace, user_text: str | None, held: bool = False,
                     options: ResponseOptions = SESSION_DEFAULTS, after_input: bool = False) -> Reply:
        """Answer; a ``held`` reply keeps its output back until :meth:`_release` (speculative start); one
        ``after_input`` first waits for the input sent before it (:meth:`_input_heard`)."""
        self._unanswered = None
        self._audio_gen += 1
        reply = Reply(turn_id, trace, self.output_rate, history_mark=self._lm.mark(), held=held,
                      options=options)
        if not held:
            reply.confirmed.set()
        self._reply = reply
        loop = asyncio.get_running_loop()
        reply.lm_task = loop.create_task(self._think(reply, user_text, after_input))
        reply.tts_task = loop.create_task(self._speak(reply, self._audio_gen))
        return reply

    def _release(self, reply: Reply, counters: dict[str, int]) -> None:
        """The turn really ended: what the speculative reply has produced so far goes out now."""
        reply.counters = counters
        reply.held = False
        reply.confirmed.set()
        held, reply.held_output = reply.held_output, []
        for item in held:
            if isinstance(item, np.ndarray):
                self._emit_audio(reply, reply.generation, item)
            else:
                self._emit(item)
        if reply.done_while_held:
            self._finish(reply, "".join(reply.text), cancelled=False)

    async def _input_heard(self) -> None:
        """Wait until the audio and commits queued before now are in the history: a response asked for right
        after a commit answers the committed words, not the history before them."""
        await self._on_input_task(lambda: None, closed=None)
        if self._finishers:
            await asyncio.wait(set(self._finishers))

    async def _think(self, reply: Reply, user_text: str | None, after_input: bool = False) -> None:
        streaming = self.config.turn.stream_tts
        chunker = ClauseChunker(self.config.chunker)
        tools = 0
        try:
            if after_input:
                await self._input_heard()
            reply.in_history = True
            async for out in self._lm.reply(user_text, before_tool=reply.confirmed.wait, options=reply.options,
                                            usage=reply.usage):
                if isinstance(out, ToolCall):
                    tools += 1
                    reply.trace.mark(f"tool_call_{tools}")
                    self._emit_for(reply, ToolCallEvent(reply.turn_id, out.name, out.arguments, out.result))
                    continue
                reply.trace.mark("lm_first_text")
                reply.text.append(out)
                self._emit_for(reply, ReplyTextDelta(reply.turn_id, out))
                for clause in chunker.push(out) if streaming else ():
                    reply.trace.mark("first_clause")
                    reply.clauses.put_nowait(clause)
            reply.trace.mark("lm_done")
            if self._lm.stopped_at_cap:
                reply.end_reason = "max_output_tokens"
            for clause in chunker.flush() if streaming else [" ".join("".join(reply.text).split())]:
                reply.clauses.put_nowait(clause)
        except asyncio.CancelledError:
            raise
        except PromptTooLong as err:  # a typed message longer than the model's context
            reply.error = PipelineError(str(err), "context_length_exceeded", caller_at_fault=True)
            self._emit(reply.error)
        except Exception as err:
            reply.error = PipelineError(f"the language model failed: {err!r}", "lm_failed")
            self._emit(reply.error)
        finally:
            reply.lm_done = True
            reply.clauses.put_nowait(END_OF_REPLY)

    async def _speak(self, reply: Reply, generation: int) -> None:
        reply.generation = generation

        async def sink(pcm: np.ndarray) -> None:
            self._emit_audio(reply, generation, pcm)

        try:
            await speak_clauses(
                reply.clauses, self.resources.tts, self.output_rate, reply.log, sink,
                lambda: reply.trace.mark("tts_first_audio"),
            )
        except asyncio.CancelledError:
            raise
        except Exception as err:
            self._emit(PipelineError(f"text to speech failed: {err!r}", "tts_failed"))
        if reply.held:
            reply.done_while_held = True
        elif generation == self._audio_gen and not reply.finished:
            self._finish(reply, "".join(reply.text), cancelled=False)

    def _emit_audio(self, reply: Reply, generation: int, pcm: np.ndarray) -> None:
        if generation != self._audio_gen:
            return  # a barge-in or cancel made this audio stale
        if reply.held:
            reply.held_output.append(pcm)
            return
        now = time.monotonic()
        if (idx := first_audible(pcm)) is not None:
            reply.trace.mark("first_audio_out", now + idx / self.output_rate)
        reply.note_emitted(len(pcm), now)
        self._emit(AudioOut(reply.turn_id, pcm, self.output_rate))

    def _assistant_audible(self) -> bool:
        return self._reply is not None and self._reply.audible()

    def _pause(self, reply: Reply) -> None:
        """Stop the reply's audio now (barge-in); the LM keeps going until the interruption is judged."""
        self._audio_gen += 1
        reply.paused = True
        reply.paused_at_sample = reply.played()
        if reply.tts_task is not None:
            reply.tts_task.cancel()
        reply.trace.interrupted = True
        self._emit(AudioCleared(reply.turn_id))

    def _resume(self, reply: Reply) -> None:
        """The interruption was noise: speak again from the clause that was cut."""
        leftover: list[str | None] = []
        while not reply.clauses.empty():
            leftover.append(reply.clauses.get_nowait())
        queue: asyncio.Queue[str | None] = asyncio.Queue()
        for clause in [*reply.log.rewind(reply.paused_at_sample), *leftover]:
            queue.put_nowait(clause)
        if reply.lm_done and END_OF_REPLY not in leftover:
            queue.put_nowait(END_OF_REPLY)
        reply.clauses, reply.paused = queue, False
        reply.trace.interrupted = False
        self._audio_gen += 1
        reply.tts_task = asyncio.get_running_loop().create_task(self._speak(reply, self._audio_gen))

    def _drop(self, reply: Reply, reason: str) -> None:
        """End a paused reply for good (``reason``: ResponseDone's); the history keeps only the words played."""
        if reply.dropped:
            return
        reply.dropped = True
        reply.end_reason = reason
        if reply.lm_task is not None:
            reply.lm_task.cancel()
        heard = reply.log.heard(reply.paused_at_sample)
        if reply.finished:  # all handed over, cut while it played out: its record goes out saying so
            self._lm.amend_last_reply(heard)
            reply.record.update(interrupted=True, reply=" ".join(heard.split()))
        else:
            self._finish(reply, heard, cancelled=True)

    def _cut_reply(self, reason: str) -> None:
        """Stop the latest reply if it is still being produced, audible or paused (barge-in, cancel, new reply;
        ``reason``: ResponseDone's). One still held back in a turn's hangover is discarded instead: nothing of it
        went out to cancel."""
        reply = self._reply
        if reply is None or reply.dropped or not (reply.producing or reply.paused or reply.audible()):
            return
        if reply.held and self._turn is not None and self._turn.speculative_reply is reply:
            self._discard_speculative_reply(self._turn)
            return
        if not reply.paused:
            self._pause(reply)
        self._drop(reply, reason)

    def _finish(self, reply: Reply, text: str, cancelled: bool) -> None:
        """The reply's ResponseDone carries all it said; the history keeps only what the caller heard of it when
        the client truncated it on the way."""
        reply.finished = True
        text = " ".join(text.split())
        self._lm.record_reply(reply.log.heard(reply.played()) if reply.truncated else text)
        self._add_typed_after_reply()
        reply.trace.reply = text
        record = reply.record = reply.trace.to_dict()
        record.update(reply.counters)
        if reply.audible() or reply.paused:
            self._spawn(self._record_after_playout(reply))
        else:
            self._record(record)
        self._emit(ResponseDone(reply.turn_id, text, cancelled, record, error=reply.error, reason=reply.end_reason,
                                usage=dataclasses.replace(reply.usage)))

    async def _record_after_playout(self, reply: Reply) -> None:
        """A reply handed over faster than it plays can still be cut by a barge-in, which :meth:`_drop` writes
        into its record (the ResponseDone's trace, the same dict). Its metrics and trace line wait until the
        caller has heard it out, so that each turn gets one record, and a true one: a corrected second record
        would count the turn's latencies twice and leave a trace file with two lines that disagree."""
        try:
            while not reply.dropped and (reply.paused or (reply.audible()
                                                          and time.monotonic() < reply.playout_until + PLAYOUT_GRACE_S)):
                await asyncio.sleep(PLAYOUT_POLL_S)
        finally:  # closing the conversation records what it holds
            self._record(reply.record)

    def _record(self, record: dict[str, Any]) -> None:
        self.resources.metrics.observe(record)
        if self._on_trace is not None:
            self._on_trace(record)

    # ----- plumbing --------------------------------------------------------------------------

    def _emit_for(self, reply: Reply, event: PipelineEvent) -> None:
        """A reply's own event: held back with its audio while the reply is speculative."""
        if reply.held:
            reply.held_output.append(event)
        else:
            self._emit(event)

    def _emit(self, event: PipelineEvent) -> None:
        if not self._closed:
            self._events.put_nowait(event)

    def _new_turn_id(self) -> int:
        turn_id, self._next_turn = self._next_turn, self._next_turn + 1
        return turn_id

    def _spawn(self, coro: Any) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task
