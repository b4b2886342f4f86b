"""Speech recognition: faster-whisper tiny.en, streamed with LocalAgreement-2 and a speculative final.

Whisper was trained on 30 s windows and faster-whisper pads every input to one, so such a pass costs a
fixed ~300 ms on this CPU however short the audio. CTranslate2's encoder also takes a shorter window, at
a cost proportional to its length: partial passes over a turn that fits in ``partial_window_s`` (10 s)
use one (~60-100 ms), so a partial still running when the person stops delays the final pass by that
much at most instead of by up to a whole pass. Final passes use a 10 s window too (``final_window_s``),
which heard as well as 30 s on `python -m latency_bench asr-window`; when the guard rejects what it heard (a
lone short word can read as no speech or a phantom in it) the final listens again through 30 s. The exact audio
length with no padding is not an option: the decoder then repeats itself until ``max_tokens``.
Two more consequences of a pass being slow shape this module:

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
from voice.neighbours import import_ctranslate2_on_its_own_openmp, one_blas_thread

import_ctranslate2_on_its_own_openmp()

ASR_RATE = 16000
WHISPER_WINDOW_S = 30
_MEL_FRAMES_PER_S = 100
_SHORT_WINDOW_MIN_S = 1.0
"""Shorter audio always gets the 30 s window: a lone first word in a 10 s one reads as no speech (0.85)."""
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
    partial_window_s: int = 10
    """Encoder window of partial passes over turns that fit in it (seconds, 1..30; 30 = off)."""
    final_window_s: int = 10
    """Encoder window of the final pass over turns that fit in it. ~4x cheaper than 30 s and heard the same
    words or better on `python -m latency_bench asr-window`; when the guard rejects what it heard (a lone
    short word can read as no speech or a phantom in it) the pass listens again through the full 30 s."""
    max_tokens: int = 224
    """Decoding of one window stops here (half of Whisper's text context): 30 s of speech is ~100 tokens."""

    def __post_init__(self) -> None:
        for name in ("partial_window_s", "final_window_s"):
            if not 1 <= getattr(self, name) <= WHISPER_WINDOW_S:
                raise ValueError(f"asr {name} must be 1..{WHISPER_WINDOW_S}, got {getattr(self, name)}")


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")  # "3.5" is no end: the space after the mark says it is one


LOOP_REPEATS = 3
"""A sentence this many times in a row is Whisper looping, not a caller: people say a thing twice, not thrice."""


def collapse_repeats(text: str) -> str:
    """A caller's turn as the LM should get it. Whisper caught in a loop writes a sentence again and again to its
    token cap ("How are you doing today? How are you doing today? ..."), and the turn's prompt then overflows the
    LM's context: a run of :data:`LOOP_REPEATS` or more of one sentence is kept once (a sentence said twice stays
    twice). Not for transcripts of recordings, which may well repeat themselves."""
    runs: list[list[str]] = []
    for sentence in (s.strip() for s in _SENTENCE_END.split(text)):
        if sentence and runs and normalize_text(sentence) == normalize_text(runs[-1][0]):
            runs[-1].append(sentence)
        elif sentence:
            runs.append([sentence])
    return " ".join(" ".join(run[:1] if len(run) >= LOOP_REPEATS else run) for run in runs)


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
        from faster_whisper.tokenizer import Tokenizer

        self.config = config or AsrConfig()
        one_blas_thread()
        self._model = WhisperModel(
            str(model_dir or whisper_model_dir()),
            device="cpu",
            compute_type="int8",
            cpu_threads=self.config.cpu_threads,
            local_files_only=True,
        )
        multilingual = self._model.model.is_multilingual
        self._tokenizer = Tokenizer(self._model.hf_tokenizer, multilingual, task="transcribe", language="en")
        self._prompt = [*self._tokenizer.sot_sequence, self._tokenizer.no_timestamps]
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="whisper")
        # The first pass allocates CTranslate2's buffers and costs about twice a warm one.
        self._decode(np.zeros(ASR_RATE, dtype=np.int16), WHISPER_WINDOW_S)

    def close(self) -> None:
        self._executor.shutdown(wait=True)

    def _decode(self, pcm: np.ndarray, window_s: int) -> tuple[str, float, float]:
        """Greedy decoding without timestamps or previous-text conditioning, window after window.

        A domain prompt as previous text cost tiny.en dearly on the `asr-window` benchmark's 90 clips (10 s
        window): WER 2.1% -> 31% for a sentence describing the domain, 77% for three example requests, which it
        repeated ("Stop. Stop. Stop. ...") and whose style it copied ("ten" for "10"), though the examples did
        turn one "capital of friends" back into "France" (measured 2026-12-06, a scratch run, not kept).

        faster-whisper's own ``transcribe`` would pad to 30 s; the model's encoder and generator are
        called directly so the window can be shorter. Its fallbacks (temperature, compression ratio,
        log-prob and no-speech skipping) are left out: the guard decides with the raw figures.
        """
        features = self._model.feature_extractor(pcm.astype(np.float32) / 32768.0)
        frames = features.shape[1]
        if not _SHORT_WINDOW_MIN_S * _MEL_FRAMES_PER_S <= frames <= window_s * _MEL_FRAMES_PER_S:
            window_s = WHISPER_WINDOW_S
        size = window_s * _MEL_FRAMES_PER_S
        windows = [self._decode_window(features[:, i : i + size], size) for i in range(0, frames, size)]
        spoken = [w for w in windows if w[0]]
        if not spoken:
            return "", max(w[1] for w in windows), -100.0
        text = " ".join(w[0] for w in spoken)
        return text, max(w[1] for w in spoken), float(np.mean([w[2] for w in spoken]))

    def _decode_window(self, features: np.ndarray, size: int) -> tuple[str, float, float]:
        """Text, no-speech probability and average log-prob of up to ``size`` mel frames, zero-padded."""
        window = np.zeros((1, features.shape[0], size), dtype=np.float32)
        window[0, :, : features.shape[1]] = features
        result = self._model.model.generate(
            self._model.encode(window),
            [self._prompt],
            beam_size=self.config.beam_size,
            max_length=self.config.max_tokens,
            return_scores=True,
            return_no_speech_prob=True,
            suppress_blank=True,
        )[0]
        tokens = [t for t in result.sequences_ids[0] if t < self._tokenizer.eot]
        if not tokens:
            return "", result.no_speech_prob, -100.0
        # scores[0] is the log-prob sum over the length; faster-whisper's average counts the end token too
        avg_logprob = result.scores[0] * len(tokens) / (len(tokens) + 1)
        return self._tokenizer.decode(tokens).strip(), result.no_speech_prob, avg_logprob

    def transcribe(self, samples: np.ndarray, window_s: int = WHISPER_WINDOW_S, sure: bool = False) -> Transcription:
        """Blocking: transcribe 16 kHz PCM and apply the hallucination guard.

        ``window_s``: the encoder window when the audio fits in it (see ``AsrConfig.partial_window_s``).
        ``sure``: when the guard rejects what a shorter window heard, listen again through the full 30 s one.
        """
        pcm = as_pcm16(samples)
        audio_ms = 1000 * len(pcm) / ASR_RATE
        cfg = self.config
        if audio_ms < cfg.min_audio_ms:
            return Transcription("", "", audio_ms, 0.0, None, None, "too_short")
        if rms(pcm) < cfg.min_rms:
            return Transcription("", "", audio_ms, 0.0, None, None, "silence")
        start = time.perf_counter()
        text, no_speech, logprob = self._decode(pcm, window_s)
        rejected = guard_reason(text, no_speech, logprob, cfg)
        if sure and rejected and window_s < WHISPER_WINDOW_S:
            text, no_speech, logprob = self._decode(pcm, WHISPER_WINDOW_S)
            rejected = guard_reason(text, no_speech, logprob, cfg)
        compute_ms = 1000 * (time.perf_counter() - start)
        return Transcription(
            "" if rejected else text, text, audio_ms, compute_ms, no_speech, logprob, rejected
        )

    async def transcribe_async(
        self, samples: np.ndarray, window_s: int = WHISPER_WINDOW_S, sure: bool = False
    ) -> Transcription:
        """:meth:`transcribe` on the worker thread, so the event loop keeps moving audio meanwhile."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self.transcribe, samples, window_s, sure)

    async def transcribe_recording(self, samples: np.ndarray) -> Transcription:
        """A whole recording (an API upload), one 30 s window per job on the worker thread: the passes of live
        calls queued meanwhile run between its windows rather than after all of it (minutes of audio take
        tens of seconds here)."""
        step = WHISPER_WINDOW_S * ASR_RATE
        parts = [await self.transcribe_async(samples[i : i + step]) for i in range(0, max(len(samples), 1), step)]
        return join_transcriptions(parts)


def join_transcriptions(parts: list[Transcription]) -> Transcription:
    """Consecutive pieces of one recording as one: the believed text of each in order, with Whisper's figures
    combined over the believed pieces as :meth:`WhisperAsr._decode` combines windows (the least sure no-speech
    probability, the mean log-prob). When none was believed, the first piece says why."""
    heard = [p for p in parts if not p.rejected]
    raw_text = " ".join(p.raw_text for p in parts if p.raw_text)
    audio_ms, compute_ms = sum(p.audio_ms for p in parts), sum(p.compute_ms for p in parts)
    if not heard:
        return Transcription("", raw_text, audio_ms, compute_ms, None, None, parts[0].rejected)
    return Transcription(
        " ".join(p.text for p in heard), raw_text, audio_ms, compute_ms,
        max(p.no_speech_prob or 0.0 for p in heard), float(np.mean([p.avg_logprob or 0.0 for p in heard])),
    )


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
            task = self._start_pass(self.asr.config.partial_window_s)
            self._partial = (task, self._samples)
            task.add_done_callback(self._partial_done_callback())

    def _start_pass(self, window_s: int, sure: bool = False) -> asyncio.Task[Transcription]:
        if len(self._chunks) > 1:
            self._chunks = [np.concatenate(self._chunks)]
        audio = self._chunks[0] if self._chunks else np.zeros(0, dtype=np.int16)
        self.passes += 1
        return asyncio.get_running_loop().create_task(self.asr.transcribe_async(audio, window_s, sure))

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
        second pass behind it (its shorter window gave the same transcripts on the benchmark questions).
        """
        if self._final_task is None:
            covering = self._partial_covering(speech_end)
            self._final_task = covering or self._start_pass(self.asr.config.final_window_s, sure=True)
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
