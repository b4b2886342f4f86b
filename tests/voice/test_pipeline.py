"""The whole pipeline on real components: Piper speaks the caller's questions, Whisper hears them, the LM
answers, Piper speaks the answer, and file mode plays the caller (fast mode: the timeline waits for compute).

The LM is the shipped demo checkpoint.
"""

from __future__ import annotations

import asyncio
import time
from functools import partial
from typing import Any

import numpy as np
import pytest
import torch

from dlm.engine import Engine
from tests.conftest import (
    ANSWER_GATE_REASON,
    NOISE_FREE_VOICE,
    demo_answers_correctly,
    noise_burst,
    push_live,
)
from voice.asr import WhisperAsr
from voice.config import PipelineConfig, load_config
from voice.events import (
    AudioCleared,
    PipelineError,
    ReplyTextDelta,
    ResponseDone,
    SpeechStarted,
    ToolCallEvent,
    TranscriptCompleted,
    TranscriptDelta,
)
from voice.file_mode import CALLER_RATE, FileModeOptions, FileModeResult, run_files
from voice.pipeline import VoicePipeline, first_audible
from voice.resources import Resources, warm_engine
from voice.trace import MARKS
from voice.tts import PiperTts

needs_capable_model = pytest.mark.skipif(not demo_answers_correctly(), reason=ANSWER_GATE_REASON)


def test_config() -> PipelineConfig:
    """The default config (the demo checkpoint). Piper speaks without its random noise, so a caller's clip and
    what Whisper hears in it are the same on every run."""
    return load_config("default").replace(tts=NOISE_FREE_VOICE)


test_config.__test__ = False  # a helper, not a test


@pytest.fixture(scope="module")
def resources() -> Resources:
    torch.set_num_threads(1)
    config = test_config()
    engine = Engine.from_dir(config.lm.checkpoint_path())
    asyncio.run(warm_engine(engine))
    res = Resources(config, engine, WhisperAsr(config.asr), PiperTts(config.tts))
    yield res
    res.close()
    engine.close()


def say(resources: Resources, text: str) -> np.ndarray:
    return resources.tts.synthesize(text, CALLER_RATE)


def trimmed(pcm: np.ndarray) -> np.ndarray:
    """Without Piper's leading and trailing silence, so a gap put between two clips is the whole pause."""
    start, end = first_audible(pcm), len(pcm) - first_audible(pcm[::-1])
    return pcm[start:end]


async def converse(
    resources: Resources, clips: list[np.ndarray], config: PipelineConfig | None = None, **options: object
) -> tuple[FileModeResult, VoicePipeline]:
    pipeline = VoicePipeline(resources, config)
    try:
        result = await run_files(pipeline, clips, FileModeOptions(**{"fast": True, **options}))  # type: ignore[arg-type]
    finally:
        await pipeline.close()
    return result, pipeline


def of_type(result: FileModeResult | list[Any], kind: type) -> list:
    """The events of ``kind`` a file-mode run (or a list of events) holds."""
    return [e for e in (result if isinstance(result, list) else result.events) if isinstance(e, kind)]


def audible_after(result: FileModeResult, seconds: float) -> bool:
    return first_audible(result.output[int(seconds * result.output_rate) :]) is not None


async def test_one_spoken_question_gets_a_spoken_reply_and_a_complete_trace(resources: Resources) -> None:
    result, pipeline = await converse(resources, [say(resources, "What is twelve times four?")])

    assert len(of_type(result, SpeechStarted)) == 1
    [completed] = of_type(result, TranscriptCompleted)
    words = completed.text.lower()
    assert "twelve" in words or "12" in words
    assert "four" in words or "4" in words
    assert of_type(result, TranscriptDelta), "partial transcripts while the caller spoke"
    assert "".join(e.text for e in of_type(result, ReplyTextDelta)).strip()
    [done] = of_type(result, ResponseDone)
    assert not done.cancelled and done.text

    speech_end = result.speech_spans[0][1]
    assert not audible_after(result, 0) or first_audible(result.output) >= speech_end * result.output_rate
    assert audible_after(result, speech_end), "the assistant's voice follows the question"

    [trace] = result.traces
    assert trace == done.trace
    assert all(trace[mark] is not None for mark in MARKS), trace
    assert trace["speech_end"] == 0
    assert trace["asr_final"] <= trace["lm_first_text"] <= trace["tts_first_audio"] <= trace["first_audio_out"]
    assert trace["voice_to_voice_ms"] == trace["first_audio_out"] > 0
    assert all(v is not None and v >= 0 for v in trace["durations_ms"].values())
    assert trace["transcript"] == completed.text and trace["reply"] == done.text

    users = [m["content"] for m in pipeline.history if m["role"] == "user"]
    assert users == [completed.text]
    assert pipeline.history[-1] == {"role": "assistant", "content": done.text}
    # A tool the model called sits between the question and the answer, with its real result.
    for call in of_type(result, ToolCallEvent):
        assert {"role": "tool", "name": call.name, "content": call.result} in pipeline.history


async def test_barge_in_clears_audio_and_history_keeps_only_what_was_played(resources: Resources) -> None:
    # A chat question: a reply with tool calls and results can fill the demo model's short context, and
    # then the history rightly forgets the first exchange, which this test needs to inspect.
    question = say(resources, "How are you doing today?")
    interruption = say(resources, "Please tell me what time it is.")
    result, pipeline = await converse(resources, [question, interruption], barge_in_at=0.6)

    assert [e.interrupted_reply for e in of_type(result, SpeechStarted)] == [False, True]
    assert [e.turn_id for e in of_type(result, AudioCleared)][:1] == [1]
    # The caller stops hearing the first reply soon after speaking over it (the barge-in threshold
    # plus the VAD's minimum speech and a frame or two) and hears nothing while still speaking.
    barge_start, barge_end = result.speech_spans[1]
    cut = barge_start + (pipeline.config.turn.barge_in_min_ms + 300) / 1000
    rate = result.output_rate
    assert first_audible(result.output[int((barge_start - 0.6) * rate) : int(barge_start * rate)]) is not None
    assert first_audible(result.output[int(cut * rate) : int(barge_end * rate)]) is None
    assert audible_after(result, barge_end), "the interruption was answered"

    full_first = "".join(e.text for e in of_type(result, ReplyTextDelta) if e.turn_id == 1).split()
    users = [i for i, m in enumerate(pipeline.history) if m["role"] == "user"]
    between = pipeline.history[users[0] + 1 : users[1]]
    kept = " ".join(m["content"] for m in between if m["role"] == "assistant").split()
    assert len(kept) < len(full_first), "only the played part of the interrupted reply is kept"
    assert kept == full_first[: len(kept)]


async def test_without_echo_cancellation_speech_during_playback_can_be_ignored(resources: Resources) -> None:
    config = resources.config.replace(turn={"barge_in": "ignore_while_speaking"})
    # A short interjection early in the reply, so it lies wholly inside playback whatever the reply's length.
    clips = [say(resources, "Tell me a long story about the sea."), say(resources, "Stop.")]
    result, _ = await converse(resources, clips, config, barge_in_at=0.3)

    assert not of_type(result, AudioCleared)
    assert len(of_type(result, SpeechStarted)) == 1, "the speech over the assistant is not a turn"
    [done] = of_type(result, ResponseDone)
    assert not done.cancelled and done.turn_id == 1


async def test_a_noise_over_the_reply_pauses_it_and_the_reply_resumes(resources: Resources) -> None:
    noise = noise_burst(CALLER_RATE)
    result, pipeline = await converse(resources, [say(resources, "Tell me a long story about the sea."), noise],
                                      barge_in_at=0.6)

    kinds = [type(e).__name__ for e in result.events if not isinstance(e, (TranscriptDelta, ReplyTextDelta))]
    cleared = kinds.index("AudioCleared")
    assert "AudioOut" in kinds[cleared:], "the reply's audio comes back after the noise"
    assert [e.turn_id for e in of_type(result, TranscriptCompleted) if e.text] == [1], "the noise is no turn"
    [done] = of_type(result, ResponseDone)
    assert not done.cancelled
    assert audible_after(result, result.speech_spans[1][1])
    full = "".join(e.text for e in of_type(result, ReplyTextDelta))
    assert pipeline.history[-1] == {"role": "assistant", "content": " ".join(full.split())}


async def test_a_finished_reply_a_noise_paused_is_heard_out(resources: Resources) -> None:
    """All handed over and still playing when the noise came: file mode had stopped waiting once the reply was
    done, and nothing of it was heard after the noise."""
    noise = noise_burst(CALLER_RATE)
    result, _ = await converse(resources, [say(resources, "What is two plus two?"), noise], barge_in_at=1.0)
    [done] = of_type(result, ResponseDone)
    assert result.events.index(done) < next(i for i, e in enumerate(result.events) if isinstance(e, AudioCleared))
    assert audible_after(result, result.speech_spans[1][1])


async def test_a_commit_awaited_as_the_pipeline_closes_returns(resources: Resources) -> None:
    """The commit is run by the input task, which closing cancels: one awaited then had hung for good."""
    pipeline = VoicePipeline(resources)
    commit = asyncio.ensure_future(pipeline.commit_turn())
    await pipeline.close()
    async with asyncio.timeout(5):
        assert await commit is False
        assert await pipeline.commit_turn() is False


async def test_a_clause_cut_inside_piper_is_spoken_when_the_reply_resumes(resources: Resources, monkeypatch) -> None:
    """A noise barge-in while Piper synthesised a clause had lost it: off the clause queue and not yet in the spoken
    log, the resumed reply skipped it, though the history says it was said. Piper is held on the second clause so
    the barge-in lands there on any machine."""
    synthesize, asked = resources.tts.synthesize_async, []
    second_in_piper = asyncio.Event()

    async def hold_the_second_clause(text: str, rate: int | None = None) -> np.ndarray:
        asked.append(text)
        if len(asked) == 2:
            second_in_piper.set()
            await asyncio.Event().wait()  # until the barge-in cancels it
        return await synthesize(text, rate)

    monkeypatch.setattr(resources.tts, "synthesize_async", hold_the_second_clause)
    pipeline = VoicePipeline(resources)
    events: list[Any] = []

    async def collect() -> None:
        async for event in pipeline.events():
            events.append(event)

    collector = asyncio.create_task(collect())
    await pipeline.respond("How are you doing today?")  # the demo model answers in two clauses
    async with asyncio.timeout(60):
        await second_in_piper.wait()
    await push_live(pipeline, np.concatenate([noise_burst(CALLER_RATE), np.zeros(CALLER_RATE, dtype=np.int16)]),
                    CALLER_RATE)
    async with asyncio.timeout(60):
        while not of_type(events, ResponseDone):
            await asyncio.sleep(0.05)
    await pipeline.close()
    await collector

    assert of_type(events, AudioCleared) and not [e for e in of_type(events, TranscriptCompleted) if e.text], \
        "a barge-in, then no turn"
    [done] = of_type(events, ResponseDone)
    assert not done.cancelled
    assert asked[1] in asked[2:], "the clause Piper was cut in is spoken after the resume"
    assert pipeline.history[-1] == {"role": "assistant", "content": done.text}


async def test_speech_resuming_in_the_hangover_discards_the_speculative_final(resources: Resources) -> None:
    # The pause is well over silence_start_ms and under the hangover even with Piper's variable fade-out.
    gap = np.zeros(int(0.2 * CALLER_RATE), dtype=np.int16)
    clip = np.concatenate([trimmed(say(resources, "What is twelve")), gap, trimmed(say(resources, "times four?"))])
    result, pipeline = await converse(resources, [clip], resources.config.replace(vad={"hangover_ms": 600}))

    [completed] = of_type(result, TranscriptCompleted)
    words = completed.text.lower()
    assert ("twelve" in words or "12" in words) and ("four" in words or "4" in words)
    assert len(of_type(result, SpeechStarted)) == 1, "one turn, not two"
    assert result.traces[0]["speculative_finals_discarded"] >= 1
    # A reply started on the discarded transcript never reached the caller or the history.
    [done] = of_type(result, ResponseDone)
    assert done.trace["transcript"] == completed.text
    assert [m["content"] for m in pipeline.history if m["role"] == "user"] == [completed.text]


def long_hangover(resources: Resources, barge_in: str = "vad") -> PipelineConfig:
    """A hangover long enough for the speculative final and reply to start inside it on any machine."""
    return resources.config.replace(vad={"hangover_ms": 3000}, turn={"barge_in": barge_in})


@pytest.mark.parametrize("barge_in", ["vad", "ignore_while_speaking"])
async def test_reply_started_in_the_hangover_is_held_until_the_turn_ends(resources: Resources, barge_in: str) -> None:
    clip = trimmed(say(resources, "What is twelve times four?"))
    result, _ = await converse(resources, [clip], long_hangover(resources, barge_in), fast=False, gap_s=0.3)

    [trace] = result.traces
    turn_end = trace["other_marks_ms"]["turn_end_detected"]
    assert trace["asr_final"] < turn_end, "the final transcript was ready inside the hangover"
    assert trace["first_audio_out"] >= turn_end, "but nothing was heard before the turn ended"
    assert not audible_after(result, 0) or first_audible(result.output) / result.output_rate >= (
        result.speech_spans[0][1] + 2.9
    )
    assert trace["speculative_replies_discarded"] == 0


async def test_a_held_reply_reads_a_tool_at_once_but_sets_a_timer_only_after_the_turn(resources: Resources) -> None:
    """A speculative reply had waited for the end of the turn before any tool, so its tool call, the reply and
    its audio were all still to come when the hangover ended; a tool that only reads now runs at once."""
    config = long_hangover(resources).replace(lm={"max_new_tokens": 96})  # room for a call (32 tokens cut it)
    for question, tool, runs_in_the_hangover in [("What is twelve times four?", "calculator", True),
                                                  ("Set a timer for five minutes.", "set_timer", False)]:
        result, _ = await converse(resources, [trimmed(say(resources, question))], config, fast=False, gap_s=0.3)
        assert [call.name for call in of_type(result, ToolCallEvent)] == [tool], result.traces
        [trace] = result.traces
        marks = trace["other_marks_ms"]
        assert (marks["tool_call_1"] < marks["turn_end_detected"]) == runs_in_the_hangover, marks
        # the reply that answered was the one held in the final hangover; one started in a pause mid-sentence
        # ("set a timer ... for five minutes", when recognition beats the pause) is rightly dropped as the caller
        # goes on, with the final it came from, and no reply is dropped otherwise
        assert trace["asr_final"] < marks["turn_end_detected"], trace
        assert trace["speculative_replies_discarded"] <= trace["speculative_finals_discarded"], trace


@pytest.mark.parametrize("action", ["cancel", "typed", "clear"])
async def test_a_cancel_or_a_typed_response_discards_the_reply_held_in_the_hangover(resources: Resources,
                                                                                    action: str) -> None:
    """A Realtime response.cancel or response.create arriving while the turn's speculative reply was held back
    had failed (the held reply has no end of speech to report) and left the session stuck. Now the held reply is
    discarded unseen, and the turn is answered when it ends. An input_audio_buffer.clear drops the turn, and the
    held reply with it: it had stayed, never released, its question in the history."""
    pipeline = VoicePipeline(resources, long_hangover(resources))
    events: list[Any] = []

    async def collect() -> None:
        async for event in pipeline.events():
            events.append(event)

    collector = asyncio.create_task(collect())
    pcm = np.concatenate([np.zeros(CALLER_RATE // 2, dtype=np.int16), trimmed(say(resources, "What time is it?")),
                          np.zeros(4 * CALLER_RATE, dtype=np.int16)])
    step, start, acted = CALLER_RATE // 50, time.monotonic(), False
    for at in range(0, len(pcm), step):
        await pipeline.push_audio(pcm[at:at + step], CALLER_RATE, timestamp=start + at / CALLER_RATE)
        await asyncio.sleep(max(0.0, start + (at + step) / CALLER_RATE - time.monotonic()))
        turn = pipeline._turn  # private: the only way to act at the moment a reply is held
        if not acted and turn is not None and turn.speculative_reply is not None:
            acted = True
            actions = {"cancel": pipeline.cancel_response, "typed": partial(pipeline.respond, "hello"),
                       "clear": pipeline.clear_input}
            await actions[action]()
    assert acted, "a reply was held during the hangover"
    if action == "clear":  # four seconds of silence went by after it: a reply held or released would be done
        await pipeline.close()
        await collector
        assert not of_type(events, ResponseDone) and not of_type(events, PipelineError)
        assert not [m for m in pipeline.history if m["role"] != "system"]
        return
    async with asyncio.timeout(30):
        while not [e for e in of_type(events, ResponseDone) if e.turn_id == 1]:
            await asyncio.sleep(0.05)
    await pipeline.close()
    await collector

    assert not of_type(events, PipelineError)
    [spoken] = [e for e in of_type(events, ResponseDone) if e.turn_id == 1]
    assert not spoken.cancelled and spoken.text and spoken.trace["speculative_replies_discarded"] == 1
    if action == "typed":
        assert [e.turn_id for e in of_type(events, ResponseDone)] == [2, 1], "the typed reply, then the turn's"


async def test_resuming_after_a_long_pause_discards_the_speculative_reply(resources: Resources) -> None:
    # Long enough for the speculative final and reply to start even on a loaded machine, and under the 3 s
    # hangover; Whisper hears both halves of this (noise-free, so identical every run) clip across it.
    gap = np.zeros(int(2.5 * CALLER_RATE), dtype=np.int16)
    clip = np.concatenate([trimmed(say(resources, "What is twelve")), gap, trimmed(say(resources, "times four?"))])
    result, pipeline = await converse(resources, [clip], long_hangover(resources), fast=False, gap_s=0.3)

    [trace] = result.traces
    assert trace["speculative_replies_discarded"] >= 1
    [completed] = of_type(result, TranscriptCompleted)
    assert "four" in completed.text.lower() or "4" in completed.text
    assert first_audible(result.output[: int(result.speech_spans[0][1] * result.output_rate)]) is None
    assert [m["content"] for m in pipeline.history if m["role"] == "user"] == [completed.text]
    assert len(of_type(result, ResponseDone)) == 1


async def test_silence_and_noise_alone_get_no_reply(resources: Resources) -> None:
    rng = np.random.default_rng(0)
    noise = (rng.normal(0, 300, int(1.0 * CALLER_RATE))).astype(np.int16)
    click = np.zeros(int(0.5 * CALLER_RATE), dtype=np.int16)
    click[4000:4400] = 20000
    result, pipeline = await converse(resources, [noise, click])

    assert not of_type(result, ResponseDone)
    assert first_audible(result.output) is None
    assert [m["role"] for m in pipeline.history] == ["system"]


@needs_capable_model
async def test_spoken_arithmetic_gets_the_right_spoken_number(resources: Resources) -> None:
    result, _ = await converse(resources, [say(resources, "What is twelve times four?")])
    reply_audio = result.output[int(result.speech_spans[0][1] * result.output_rate) :]
    from voice.audio import resample

    heard = resources.asr.transcribe(resample(reply_audio, result.output_rate, 16000)).text.lower()
    assert "48" in heard or "forty-eight" in heard or "forty eight" in heard, heard


@needs_capable_model
async def test_two_turns_keep_context(resources: Resources) -> None:
    # Japan, not France: tiny.en hears this voice's "France" as "friends" here (tests/transports/live_server.py)
    clips = [say(resources, "What is the capital of Japan?"), say(resources, "And of Spain?")]
    result, pipeline = await converse(resources, clips)
    replies = [e.text.lower() for e in of_type(result, ResponseDone)]
    assert len(replies) == 2
    assert "tokyo" in replies[0] and "madrid" in replies[1], replies
    assert [m["role"] for m in pipeline.history if m["role"] in ("user", "assistant")][:2] == ["user", "assistant"]


async def test_a_finished_reply_cut_while_it_plays_out_is_recorded_as_heard(resources: Resources) -> None:
    """A reply whose audio was all handed over (Piper faster than real time), then cut by the caller's words, had
    gone to the metrics and the trace file as it was generated: not interrupted, every word. Its record now
    waits for the playout and says what the barge-in left of it."""
    records: list[dict[str, Any]] = []
    pipeline = VoicePipeline(resources, on_trace=records.append)
    events: list[Any] = []

    async def collect() -> None:
        async for event in pipeline.events():
            events.append(event)

    collector = asyncio.create_task(collect())
    await pipeline.respond("How are you doing today?")
    async with asyncio.timeout(60):
        while not of_type(events, ResponseDone):
            await asyncio.sleep(0.01)
    [done] = of_type(events, ResponseDone)
    assert not records, "the caller is still hearing it"
    await push_live(pipeline, np.concatenate([trimmed(say(resources, "What is the capital of Japan?")),
                                              np.zeros(CALLER_RATE, dtype=np.int16)]), CALLER_RATE)
    async with asyncio.timeout(60):
        while not records:
            await asyncio.sleep(0.05)
    await pipeline.close()
    await collector

    record = records[0]
    assert record["interrupted"] and record is done.trace
    heard = record["reply"].split()
    assert len(heard) < len(done.text.split()) and heard == done.text.split()[:len(heard)], (heard, done.text)
