"""Speech recognition: faster-whisper tiny.en, streamed with LocalAgreement-2 and a speculative final.

Whisper pads every input to a 30 s window, so each pass costs a fixed few hundred ms on this CPU no
matter how short the audio. Two consequences shape this module:

* while the person talks, the growing turn buffer is re-transcribed every ``partial_interval_ms`` of new
  audio (only when no pass is already running, so a slow CPU simply gets fewer partials), and words
  that two consecutive passes agree on are confirmed for the LM to prefill;
* the final pass starts speculatively when silence begins, so it is ready when the hangover ends; if
  the person resumes, its result is demoted to one more partial hypothesis.

Whisper invents text on silence and noise ("you", "Thank you.", "Subtitles by ..."); :meth:`WhisperAsr.
transcribe` rejects such output and says why, rather than letting a phantom turn reach the LM.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from voice.audio import as_pcm16, rms
from voice.local_agreement import LocalAgreement
from voice.models import whisper_model_dir

ASR_RATE = 16000
_SPEECH_TAIL_S = 0.05
"""Audio a pass must have heard past the end of speech to stand in for the final pass."""
_LOG = logging.getLogger(__name__)

PHANTOM_PHRASES = frozenset(
    {
        "you",
        "thank you",
        "thank you very much",
        "thanks",
        "thanks for watching",
        "thank you for watching",
        "thanks for listening",
        "thank you for listening",
        "please subscribe",
        "like and subscribe",
        "bye",
        "bye bye",
        "see you next time",
        "the end",
        "so",
        "oh",
        "hmm",
    }
)
"""What Whisper says on silence and noise; kept only when it is confident it heard speech."""

PHANTOM_PREFIXES = ("subtitles by", "captions by", "transcribed by", "translated by", "transcription by")
"""Credits Whisper learned from subtitle files; never real speech addressed to an assistant."""


def normalize_text(text: str) -> str:
    """Lower-case words without punctuation, for comparing against phantom phrases."""
    return " ".join(re.findall(r"[a-z0-9']+", text.lower()))


@dataclass(frozen=True)
class AsrConfig:
    """Whisper decoding and hallucination-guard settings."""

    cpu_threads: int = 2
    beam_size: int = 1
    """Greedy decoding: tiny.en gains little from a beam and each pass is on the critical path."""
    no_speech_threshold: float = 0.6
    """Reject a pass whose no-speech probability is above this."""
    phantom_max_no_speech: float = 0.3
    phantom_min_logprob: float = -0.6
    """A phantom phrase survives only with no-speech prob below and average log-prob above these."""
    min_audio_ms: int = 300
    """Shorter turns are rejected without running Whisper."""
    min_rms: float = 30.0
    """Turns quieter than this RMS (int16 units, about -60 dBFS) are silence; Whisper is not run."""
    partial_interval_ms: int = 400
    """New audio between two partial passes."""
    partial_quiet_db: float = 30.0
    """No partial pass starts on a chunk this far below the turn's loudest: the person is pausing or
    done, and a pass started now would hold the CPU just when the final pass needs it."""
    agreement_n: int = 2


def guard_reason(text: str, no_speech_prob: float, avg_logprob: float, config: AsrConfig) -> str | None:
    """Why a Whisper output is not to be believed (empty, no_speech, phantom), or None if it is."""
    norm = normalize_text(text)
    if not norm:
        return "empty"
    if no_speech_prob > config.no_speech_threshold:
        return "no_speech"
    if norm.startswith(PHANTOM_PREFIXES):
        return "phantom"
    unsure = no_speech_prob >= config.phantom_max_no_speech or avg_logprob <= config.phantom_min_logprob
    if norm in PHANTOM_PHRASES and unsure:
        return "phantom"
    return None


@dataclass(frozen=True)
class Transcription:
    """One Whisper pass over a buffer; ``text`` is empty when the guard rejected it (see ``rejected``)."""

    text: str
    raw_text: str
    """What Whisper produced before the guard."""
    audio_ms: float
    compute_ms: float
    no_speech_prob: float | None
    avg_logprob: float | None
    """Whisper's figures (None when the guard rejected the audio without running Whisper)."""
    rejected: str | None = None
    """Why the text was discarded: too_short, silence, no_speech, phantom or empty."""

    @property
    def words(self) -> tuple[str, ...]:
        return tuple(self.text.split())


class WhisperAsr:
    """The tiny.en model, loaded once, warmed, and run on one worker thread (calls are serialised)."""

    def __init__(self, config: AsrConfig | None = None, model_dir: Path | None = None) -> None:
        from faster_whisper import WhisperModel

        self.config = config or AsrConfig()
        self._model = WhisperModel(
            str(model_dir or whisper_model_dir()),
            device="cpu",
            compute_type="int8",
            cpu_threads=self.config.cpu_threads,
            local_files_only=True,
        )
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="whisper")
        # The first pass allocates CTranslate2's buffers and costs about twice a warm one.
        self._decode(np.zeros(ASR_RATE, dtype=np.int16))

    def close(self) -> None:
        self._executor.shutdown(wait=True)

    def _decode(self, pcm: np.ndarray) -> tuple[str, float, float]:
        segments, _ = self._model.transcribe(
            pcm.astype(np.float32) / 32768.0,
            language="en",
            beam_size=self.config.beam_size,
            temperature=0.0,
            condition_on_previous_text=False,
            without_timestamps=True,
            vad_filter=False,
            # The guard below decides with the raw figures; faster-whisper's own skipping would hide them.
            no_speech_threshold=None,
            log_prob_threshold=None,
            compression_ratio_threshold=None,
        )
        segments = list(segments)
        if not segments:
            return "", 1.0, -100.0  # Whisper produced nothing at all: as sure as it gets that no one spoke
        text = "".join(s.text for s in segments).strip()
        no_speech = max(s.no_speech_prob for s in segments)
        logprob = float(np.mean([s.avg_logprob for s in segments]))
        return text, no_speech, logprob

    def transcribe(self, samples: np.ndarray) -> Transcription:
        """Blocking: transcribe 16 kHz PCM and apply the hallucination guard."""
        pcm = as_pcm16(samples)
        audio_ms = 1000 * len(pcm) / ASR_RATE
        cfg = self.config
        if audio_ms < cfg.min_audio_ms:
            return Transcription("", "", audio_ms, 0.0, None, None, "too_short")
        if rms(pcm) < cfg.min_rms:
            return Transcription("", "", audio_ms, 0.0, None, None, "silence")
        start = time.perf_counter()
        text, no_speech, logprob = self._decode(pcm)
        compute_ms = 1000 * (time.perf_counter() - start)
        rejected = guard_reason(text, no_speech, logprob, cfg)
        return Transcription(
            "" if rejected else text, text, audio_ms, compute_ms, no_speech, logprob, rejected
        )

    async def transcribe_async(self, samples: np.ndarray) -> Transcription:
        """:meth:`transcribe` on the worker thread, so the event loop keeps moving audio meanwhile."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self.transcribe, samples)


@dataclass(frozen=True)
class PartialTranscript:
    confirmed: str
    """Words two passes agreed on; only ever grows within a turn."""
    tentative: str
    """The rest of the latest pass; may still change."""
    newly_confirmed: str
    audio_ms: float
    """How much of the turn the pass heard."""

    @property
    def text(self) -> str:
        return f"{self.confirmed} {self.tentative}".strip()


class StreamingTranscriber:
    """One turn's streaming transcription, driven by the VAD events.

    speech_started -> ``start_turn(event.audio, event.audio_start)``, every audio event ->
    ``feed(event.audio)``, silence_started -> ``start_final(event.timestamp)``, speech_resumed ->
    ``discard_final()``, turn_ended -> ``await final()``. Partial transcripts arrive on
    :attr:`partials`. Must be used from a running event loop.
    """

    def __init__(self, asr: WhisperAsr, partial_interval_ms: int | None = None) -> None:
        self.asr = asr
        self.partial_interval_ms = (
            asr.config.partial_interval_ms if partial_interval_ms is None else partial_interval_ms
        )
        self.partials: asyncio.Queue[PartialTranscript] = asyncio.Queue()
        self.passes = 0
        """Whisper passes started so far (partials and finals), for benchmarks."""
        self._agreement = LocalAgreement(asr.config.agreement_n)
        self._generation = 0
        self._chunks: list[np.ndarray] = []
        self._samples = 0
        self._origin: float | None = None
        self._last_partial_at = 0
        self._peak_rms = 0.0
        self._partial: tuple[asyncio.Task[Transcription], int] | None = None  # the pass and what it hears
        self._final_task: asyncio.Task[Transcription] | None = None
        self._final_is_partial = False

    @property
    def audio_ms(self) -> float:
        return 1000 * self._samples / ASR_RATE

    def reset(self) -> None:
        """Forget the turn; passes still running for it will not post anything."""
        self._generation += 1
        self._chunks, self._samples, self._last_partial_at, self._peak_rms = [], 0, 0, 0.0
        self._origin = None
        self._agreement.reset()
        self._partial, self._final_task, self._final_is_partial = None, None, False

    def start_turn(self, audio: np.ndarray, audio_start: float | None = None) -> None:
        """Begin a new turn with the pre-rolled audio of the speech_started event.

        ``audio_start`` (the event's monotonic time of ``audio[0]``) lets :meth:`start_final` tell
        whether a pass already running has heard all of the speech.
        """
        self.reset()
        self._origin = audio_start
        self.feed(audio)

    def feed(self, samples: np.ndarray) -> None:
        """Append 16 kHz turn audio; starts a partial pass in the background when one is due."""
        pcm = as_pcm16(samples)
        self._chunks.append(pcm)
        self._samples += len(pcm)
        level = rms(pcm)
        self._peak_rms = max(self._peak_rms, level)
        quiet = level < self._peak_rms * 10 ** (-self.asr.config.partial_quiet_db / 20)
        due = 1000 * (self._samples - self._last_partial_at) / ASR_RATE >= self.partial_interval_ms
        if due and not quiet and self._final_task is None and self._partial is None:
            self._last_partial_at = self._samples
            task = self._start_pass()
            self._partial = (task, self._samples)
            task.add_done_callback(self._partial_done_callback())

    def _start_pass(self) -> asyncio.Task[Transcription]:
        if len(self._chunks) > 1:
            self._chunks = [np.concatenate(self._chunks)]
        audio = self._chunks[0] if self._chunks else np.zeros(0, dtype=np.int16)
        self.passes += 1
        return asyncio.get_running_loop().create_task(self.asr.transcribe_async(audio))

    def _partial_done_callback(self) -> Callable[[asyncio.Task[Transcription]], None]:
        generation = self._generation

        def done(task: asyncio.Task[Transcription]) -> None:
            if generation != self._generation:
                return
            if self._partial is not None and self._partial[0] is task:
                self._partial = None
            self._post_partial(task)

        return done

    def _post_partial(self, task: asyncio.Task[Transcription]) -> None:
        if task.cancelled():
            return
        if task.exception() is not None:
            _LOG.warning("partial ASR pass failed", exc_info=task.exception())
            return
        result = task.result()
        if result.rejected:
            return
        agreement = self._agreement.update(result.words)
        self.partials.put_nowait(
            PartialTranscript(
                " ".join(agreement.confirmed),
                " ".join(agreement.tentative),
                " ".join(agreement.newly_confirmed),
                result.audio_ms,
            )
        )

    def start_final(self, speech_end: float | None = None) -> asyncio.Task[Transcription]:
        """Speculatively run the final pass over the audio so far (the person just went quiet).

        With ``speech_end`` (the silence_started timestamp) and the turn's ``audio_start``, a partial
        pass already running that heard all of the speech is taken as the final instead of queueing a
        second pass behind it.
        """
        if self._final_task is None:
            covering = self._partial_covering(speech_end)
            self._final_task = covering or self._start_pass()
            self._final_is_partial = covering is not None
        return self._final_task

    def _partial_covering(self, speech_end: float | None) -> asyncio.Task[Transcription] | None:
        if self._partial is None or speech_end is None or self._origin is None:
            return None
        task, heard = self._partial
        needed = round((speech_end - self._origin + _SPEECH_TAIL_S) * ASR_RATE)
        return task if heard >= needed else None

    def discard_final(self) -> None:
        """The person resumed: the speculative final becomes one more partial hypothesis."""
        task, self._final_task = self._final_task, None
        if task is not None and not self._final_is_partial:  # a reused partial posts itself
            task.add_done_callback(self._partial_done_callback())
        self._final_is_partial = False

    async def final(self) -> Transcription:
        """The turn's transcript: the speculative pass if one is standing, else a fresh pass now.

        Audio fed after :meth:`start_final` is hangover silence, so the speculative pass is complete.
        """
        return await self.start_final()

    async def idle(self) -> None:
        """Wait until no partial pass is running (for driving the transcriber faster than real time)."""
        while self._partial is not None:
            await asyncio.wait({self._partial[0]})
