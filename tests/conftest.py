"""Shared paths and helpers for the test suite."""

import asyncio
import json
import os
import time
import wave
from pathlib import Path
from typing import Any

# Triton fixes compiled-vs-interpreter mode when it is first imported: set it before any test module loads it.
os.environ.setdefault("TRITON_INTERPRET", "1")

import numpy as np
import pytest

from dlm.cli import DEMO_CHECKPOINT

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT.parent / "shared" / "fixtures"
FAMILIES = ("sdar", "llada", "fast_dllm_v2", "dream")
# Piper without its random noise: a caller's clip, and what Whisper hears in it, are the same on every run
# (with the noise, one rendering in a few was misheard and failed a test now and then).
NOISE_FREE_VOICE = {"noise_scale": 0.0, "noise_w_scale": 0.0}
# Issue 3's quality bar: checks that a spoken answer is *right* only make sense for a model that meets it.
ANSWER_ACCURACY_BAR = 0.9


def demo_answer_accuracy() -> float:
    """Held-out answer correctness of the shipped demo checkpoint as `python -m dlm.eval` measured it, decoded as
    the voice stage decodes (its tool calls grounded in the caller's words), which is what these tests hear."""
    return float(json.loads((DEMO_CHECKPOINT / "eval.json").read_text())["answer_correct_grounded"])


def demo_answers_correctly() -> bool:
    return demo_answer_accuracy() >= ANSWER_ACCURACY_BAR


def spoken_words_recovered(reply: str, heard: str) -> float:
    """Share of the reply's words that Whisper heard in the assistant's audio: TTS-to-caller fidelity."""
    def words(text: str) -> list[str]:
        return "".join(c if c.isalnum() or c.isspace() else " " for c in text.lower()).split()

    expected, got = words(reply), set(words(heard))
    return sum(w in got for w in expected) / max(len(expected), 1)


ANSWER_GATE_REASON = (
    f"the demo checkpoint answers {demo_answer_accuracy():.0%} of held-out questions correctly "
    f"(dlm/assets/demo/eval.json, from python -m dlm.eval); answer checks need >= {ANSWER_ACCURACY_BAR:.0%}"
)


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    if not FIXTURES.is_dir():
        pytest.fail(f"reference fixtures not found at {FIXTURES} (../shared must sit beside the checkout)")
    return FIXTURES


def read_wav(path: Path) -> tuple[np.ndarray, int]:
    """A 16-bit mono WAV the project wrote, as ``(samples, sample_rate)``."""
    with wave.open(str(path), "rb") as wav:
        assert (wav.getnchannels(), wav.getsampwidth()) == (1, 2), path
        return np.frombuffer(wav.readframes(wav.getnframes()), dtype="<i2"), wav.getframerate()


def noise_burst(rate: int, seconds: float = 0.8) -> np.ndarray:
    """Loud noise: speech to the VAD, no words to Whisper (a cough over the assistant)."""
    return np.random.default_rng(1).normal(0, 6000, int(seconds * rate)).astype(np.int16)


async def push_live(pipeline: Any, pcm: np.ndarray, rate: int) -> None:
    """``pcm`` into ``pipeline`` in 20 ms frames, at the pace a caller speaks it."""
    step, start = rate // 50, time.monotonic()
    for at in range(0, len(pcm), step):
        await pipeline.push_audio(pcm[at:at + step], rate, timestamp=start + at / rate)
        await asyncio.sleep(max(0.0, start + (at + step) / rate - time.monotonic()))
