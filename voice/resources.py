"""The heavy parts every conversation shares, loaded and warmed once per process.

Loading Whisper, Piper and the LM takes seconds and their first calls cost several times a warm
one, so a server loads them at start and every conversation borrows them; conversations only own
their LM session (the KV cache) and their small per-turn state.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import torch

from voice.asr import WhisperAsr
from voice.config import ConfigError, PipelineConfig
from voice.trace import TraceMetrics
from voice.tts import PiperTts

_WARM_MESSAGES = [{"role": "user", "content": "Hello."}]


def load_engine(config: PipelineConfig) -> Any:
    """The LM engine for ``config.lm``, with a clear error when the checkpoint is not there."""
    from dlm.checkpoint import placement
    from dlm.engine import Engine

    path = config.lm.checkpoint_path()
    if not (path / "config.json").is_file():
        raise ConfigError(
            f"LM checkpoint {path} not found (lm.checkpoint in config {config.name!r}); "
            "train the demo model with `make demo-model` or point lm.checkpoint at a checkpoint directory"
        )
    try:
        device, dtype = placement(config.lm.device, config.lm.dtype)
    except ValueError as exc:  # a GPU that is not there, an unknown device or dtype
        raise ConfigError(f"lm.device / lm.dtype in config {config.name!r}: {exc}") from None
    if device.type == "cpu":
        torch.set_num_threads(config.lm.threads)
    return Engine.from_dir(path, dtype, device)


async def warm_engine(engine: Any) -> None:
    """One tiny generation, copy-biased as a turn is, so the first caller does not pay for lazy allocations or
    for reading the vocabulary's pieces (`Engine.pieces`, one decode per token id)."""
    session = engine.new_session()
    try:
        async for _ in engine.stream(_WARM_MESSAGES, session=session, max_new_tokens=8,
                                     bias=engine.copy_bias(_WARM_MESSAGES)):
            pass
    finally:
        session.close()


@dataclass
class Resources:
    """Engine, ASR and TTS of one process, plus the Prometheus histograms all its turns feed."""

    config: PipelineConfig
    engine: Any
    asr: WhisperAsr
    tts: PiperTts
    metrics: TraceMetrics = field(default_factory=TraceMetrics)

    @classmethod
    async def load(cls, config: PipelineConfig) -> Resources:
        """Load and warm everything (model files are verified against their pinned hashes)."""
        loop = asyncio.get_running_loop()
        engine = await loop.run_in_executor(None, load_engine, config)
        asr = await loop.run_in_executor(None, WhisperAsr, config.asr)
        tts = await loop.run_in_executor(None, PiperTts, config.tts)
        await warm_engine(engine)
        return cls(config, engine, asr, tts)

    def close(self) -> None:
        self.asr.close()
        self.tts.close()
