"""Text to speech: Piper with the bundled joe voice, producing PCM at whatever rate the transport wants.

Piper renders one sentence per call to its ONNX model (~70-95 ms for a short clause here, ~230 ms
for the very first call), so the voice is loaded and warmed once at start and fed one clause at a
time by the chunker. Output is resampled from the voice rate (22.05 kHz) to the transport's rate.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from voice.audio import check_rate, resample
from voice.models import piper_voice_files

if TYPE_CHECKING:
    from piper import PiperVoice


@dataclass(frozen=True)
class TtsConfig:
    length_scale: float | None = None
    """Speaking rate: < 1 faster, > 1 slower; None keeps the voice's own."""
    volume: float = 0.8
    """Piper normalises each sentence to full scale; this leaves headroom so resampling cannot clip."""
    max_trailing_silence_ms: int = 150
    """Piper ends each sentence with up to ~280 ms of silence; this much is kept as the pause."""
    noise_scale: float | None = None
    """Generator noise; None keeps the voice's own. 0 (with ``noise_w_scale`` 0) makes the same text give
    the same samples every time, which reproducible tests and benchmarks need."""
    noise_w_scale: float | None = None
    """Phoneme-duration noise; None keeps the voice's own."""

    def __post_init__(self) -> None:
        """A volume of nan or below 0 had made every reply silent (Piper gave no samples)."""
        for name in ("length_scale", "volume", "noise_scale", "noise_w_scale"):
            value = getattr(self, name)
            if value is not None and not 0 <= value < math.inf:
                raise ValueError(f"{name} must be a number >= 0, got {value}")
        if self.length_scale == 0:
            raise ValueError("length_scale must be above 0 (it scales each sound's length)")
        if self.max_trailing_silence_ms < 0:
            raise ValueError(f"max_trailing_silence_ms must be >= 0, got {self.max_trailing_silence_ms}")


MAX_SENTENCE_PHONEMES = 300
"""Longest stretch handed to Piper's model in one call (~8 s of English, ~15 s of a script the voice spells out).
The call's memory grows with its audio (~20 MB a second here) and Piper ends a sentence only at punctuation:
400 unpunctuated Chinese characters (each read as "chinese letter") had been one call of minutes of audio, +3.7 GB."""
_SENTENCE_CUT = re.compile(r"[.!?]+\s+|[。！？]+\s*")
_WORD_CUT = re.compile(r"\s+")
_SILENCE_LEVEL = 300  # about -40 dBFS: below this a sample counts as silence
_LEAD_KEEP_S = 0.005


def trim_silence(pcm: np.ndarray, sample_rate: int, max_trailing_ms: int) -> np.ndarray:
    """Drop leading silence (up to 60 ms in Piper's output, and every ms of it is latency) and cap
    the trailing silence; keep a few ms before the onset so it does not click."""
    loud = np.nonzero(np.abs(pcm.astype(np.int32)) > _SILENCE_LEVEL)[0]
    if len(loud) == 0:
        return pcm[:0]
    start = max(0, loud[0] - round(_LEAD_KEEP_S * sample_rate))
    stop = min(len(pcm), loud[-1] + 1 + round(max_trailing_ms * sample_rate / 1000))
    return pcm[start:stop]


def split_long(text: str, fits: Callable[[str], bool]) -> list[str]:
    """``text`` as consecutive pieces that each ``fits`` (or are one character), cut only where it does not: after
    a sentence's end where there is one, else at whitespace, else between characters, each cut nearest the
    middle of the piece being cut so that the pieces come out of similar size."""
    if len(text) < 2 or fits(text):
        return [text]
    cut = _cut_point(text)
    return split_long(text[:cut], fits) + split_long(text[cut:], fits)


def _cut_point(text: str) -> int:
    """Where :func:`split_long` cuts ``text`` (at least 2 characters): strictly inside it, so both sides shrink."""
    middle = len(text) // 2
    for pattern in (_SENTENCE_CUT, _WORD_CUT):
        cuts = [m.end() for m in pattern.finditer(text) if 0 < m.end() < len(text)]
        if cuts:
            return min(cuts, key=lambda cut: abs(cut - middle))
    return middle


def load_voice(model_path: Path, config_path: Path) -> PiperVoice:
    """The Piper voice on an onnxruntime session whose threads sleep between runs rather than spin.

    Why: onnxruntime's CPU threads spin for work after each run by default, and Piper runs while the LM decodes
    the next clause. ``python -m latency_bench neighbours`` (2-core AMD EPYC): a demo-checkpoint turn right after a
    clause took 48.4 ms beside spinning threads, 21.1 beside sleeping ones; a clause and two turns side by side,
    239 and 152 ms against 175 and 104; a clause alone 106 against 103 ms."""
    import onnxruntime
    from piper import PiperVoice
    from piper.config import PiperConfig

    options = onnxruntime.SessionOptions()
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    session = onnxruntime.InferenceSession(str(model_path), sess_options=options, providers=["CPUExecutionProvider"])
    return PiperVoice(session=session, config=PiperConfig.from_dict(json.loads(config_path.read_text("utf-8"))))


class PiperTts:
    """The Piper voice, loaded once and warmed; synthesis runs on one worker thread."""

    def __init__(
        self,
        config: TtsConfig | None = None,
        model_path: Path | None = None,
        config_path: Path | None = None,
    ) -> None:
        from piper import SynthesisConfig

        self.config = config or TtsConfig()
        if model_path is None:
            model_path, default_config = piper_voice_files()
            config_path = config_path or default_config
        self._voice = load_voice(model_path, config_path or Path(f"{model_path}.json"))
        self._syn_config = SynthesisConfig(
            length_scale=self.config.length_scale, volume=self.config.volume,
            noise_scale=self.config.noise_scale, noise_w_scale=self.config.noise_w_scale)
        self.sample_rate: int = self._voice.config.sample_rate
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="piper")
        self.synthesize("Hello.")  # the first run sets up onnxruntime and costs ~3x a warm one

    def close(self) -> None:
        self._executor.shutdown(wait=True)

    def stream(self, text: str, out_rate: int | None = None) -> Iterator[np.ndarray]:
        """Int16 PCM at ``out_rate`` (default: the voice rate), one array per sentence Piper renders."""
        rate = check_rate(out_rate or self.sample_rate)
        if not any(ch.isalnum() for ch in text):
            return
        for piece in split_long(text, self._fits):
            for chunk in self._voice.synthesize(piece, self._syn_config):
                pcm = trim_silence(chunk.audio_int16_array, self.sample_rate, self.config.max_trailing_silence_ms)
                if len(pcm):
                    yield resample(pcm, self.sample_rate, rate)

    def sentence_phonemes(self, text: str) -> list[int]:
        """The phonemes of each sentence Piper would render ``text`` as: what its time and memory follow, about
        22 a second of English speech; a script the voice spells out letter by letter takes 15 a character."""
        return [len(sentence) for sentence in self._voice.phonemize(text)]

    def _fits(self, text: str) -> bool:
        """Whether Piper may render ``text`` as it is: no sentence over MAX_SENTENCE_PHONEMES (espeak takes ~0.4 ms
        for a clause, against Piper's ~80 ms)."""
        return all(count <= MAX_SENTENCE_PHONEMES for count in self.sentence_phonemes(text))

    def synthesize(self, text: str, out_rate: int | None = None) -> np.ndarray:
        """All of ``text`` as one int16 PCM array (empty when there is nothing to say)."""
        pieces = list(self.stream(text, out_rate))
        return np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.int16)

    async def synthesize_async(self, text: str, out_rate: int | None = None) -> np.ndarray:
        """:meth:`synthesize` on the worker thread, so the event loop keeps pacing audio meanwhile."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self.synthesize, text, out_rate)
