"""The pipeline's configuration: one dataclass per stage, loaded from a named TOML file in ``configs/``.

Every named config is read on top of ``configs/default.toml`` (so a profile such as ``phone`` only says
what differs), and every key is checked against the dataclasses: a typo in a config file is an error
that names the key, not a setting silently ignored.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from dlm.decoding.confidence import check_pass_rule
from dlm.decoding.logit_bias import COPY_FOLLOW
from dlm.effort import EFFORTS
from dlm.toml_file import read_toml
from voice.asr import AsrConfig
from voice.audio import AudioFormatError, check_rate
from voice.chunker import ChunkerConfig
from voice.tts import TtsConfig
from voice.vad import VadConfig

ROOT = Path(__file__).resolve().parents[1]
CONFIG_DIR = ROOT / "configs"
DEFAULT_NAME = "default"


class ConfigError(ValueError):
    """A config file that is missing, malformed or names settings that do not exist."""


BargeIn = Literal["vad", "ignore_while_speaking"]


@dataclass(frozen=True)
class LmConfig:
    """Which checkpoint answers and how it decodes."""

    checkpoint: str = "dlm/assets/demo"
    """Checkpoint directory; relative paths are resolved against the repository root."""
    device: str = "auto"
    """``auto`` (a CUDA GPU when torch sees one, else the CPU), ``cpu``, ``cuda`` or ``cuda:N``."""
    dtype: str = "float32"
    threads: int = 2
    """torch threads when the LM is on the CPU."""
    system_prompt: str = "you are a helpful voice assistant. keep answers short."
    max_new_tokens: int = 64
    block_size: int | None = None
    first_block_size: int | None = None
    """A small first block gets the first words out sooner (when the checkpoint was trained for it)."""
    effort: str | None = None
    """The engine's one-word compute knob (low / medium / high); explicit knobs override it."""
    threshold: float | None = 0.9
    passes_per_block: int | None = None
    """A fixed number of passes per block instead of the threshold (block_size 1 with 1 pass = autoregressive)."""
    temperature: float = 0.0
    tools: bool = True
    """Let the model call the tools of ``dlm.tools`` (results go back to it before it answers)."""
    max_tool_rounds: int = 2
    copy_bias: float = COPY_FOLLOW
    """How strongly a reply keeps to what it repeats, the caller's words or a tool's result (a logit added to a
    copied phrase's next token, ``dlm.decoding.logit_bias``, twice this after a tool's result); 0 turns it off."""
    fallback_reply: str = "sorry, I did not get that."
    """Said when the model produces nothing speakable (after a tool call, the tool's own spoken result)."""

    def __post_init__(self) -> None:
        """Refused when the config loads: a bad value here had failed every reply, or start-up with a traceback."""
        least = {"threads": (self.threads, 1), "max_new_tokens": (self.max_new_tokens, 1),
                 "block_size": (self.block_size, 1), "first_block_size": (self.first_block_size, 1),
                 "passes_per_block": (self.passes_per_block, 1), "max_tool_rounds": (self.max_tool_rounds, 0)}
        for name, (value, lowest) in least.items():
            if value is not None and value < lowest:
                raise ValueError(f"{name} must be at least {lowest}, got {value}")
        if self.effort is not None and self.effort not in EFFORTS:
            raise ValueError(f"effort must be one of {', '.join(EFFORTS)}, got {self.effort!r}")
        check_pass_rule(self.threshold, None)
        for name, value in (("temperature", self.temperature), ("copy_bias", self.copy_bias)):
            if not 0 <= value < math.inf:
                raise ValueError(f"{name} must be a number >= 0, got {value}")

    def checkpoint_path(self) -> Path:
        path = Path(self.checkpoint).expanduser()
        return path if path.is_absolute() else ROOT / path


@dataclass(frozen=True)
class TurnConfig:
    """Turn-taking and the latency-saving tricks (each one can be switched off for the baseline)."""

    barge_in: BargeIn = "vad"
    """``vad``: speech while the assistant talks interrupts it. ``ignore_while_speaking``: input is
    dropped until the assistant's audio has played out (speakerphones without echo cancellation)."""
    barge_in_min_ms: int = 300
    """Speech must last this long before it interrupts, so a cough or a click does not."""
    speculative_asr: bool = True
    """Run the final ASR pass when silence starts, not when the hangover ends."""
    speculative_reply: bool = True
    """Start the LM and TTS on that speculative transcript during the hangover, holding their output
    until the turn really ends (thrown away if the caller resumes). Needs ``speculative_asr``."""
    prefill_during_speech: bool = True
    """Prefill confirmed partial words into the LM cache while the person is still talking."""
    stream_tts: bool = True
    """Speak each clause as it completes; off: synthesise the whole reply at once."""


@dataclass(frozen=True)
class PipelineConfig:
    name: str = DEFAULT_NAME
    output_rate: int = 24000
    """Rate of the assistant audio handed to the transport."""
    vad: VadConfig = field(default_factory=VadConfig)
    asr: AsrConfig = field(default_factory=AsrConfig)
    lm: LmConfig = field(default_factory=LmConfig)
    tts: TtsConfig = field(default_factory=TtsConfig)
    chunker: ChunkerConfig = field(default_factory=ChunkerConfig)
    turn: TurnConfig = field(default_factory=TurnConfig)

    def __post_init__(self) -> None:
        try:  # checked here, not when the first call's pipeline is built
            check_rate(self.output_rate)
        except AudioFormatError as err:
            raise ValueError(f"output_rate: {err}") from None

    def replace(self, **sections: dict[str, Any]) -> PipelineConfig:
        """A copy with some fields of some sections changed: ``cfg.replace(turn={"stream_tts": False})``."""
        changes = {
            name: dataclasses.replace(getattr(self, name), **values) if isinstance(values, dict) else values
            for name, values in sections.items()
        }
        return dataclasses.replace(self, **changes)


def _check_type(value: Any, hint: Any, where: str) -> Any:
    """Coerce ints to floats where a float is expected and reject anything else that does not fit."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in typing.get_args(hint):
            return None
        options = [a for a in typing.get_args(hint) if a is not type(None)]
        for option in options:
            try:
                return _check_type(value, option, where)
            except ConfigError:
                continue
        raise ConfigError(f"{where}: {value!r} does not fit {hint}")
    if origin is Literal:
        if value not in typing.get_args(hint):
            raise ConfigError(f"{where}: {value!r} is not one of {', '.join(map(repr, typing.get_args(hint)))}")
        return value
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if hint in (int, float, str, bool) and (type(value) is not hint):
        raise ConfigError(f"{where}: expected {hint.__name__}, got {value!r}")
    return value


def _build(cls: type, values: dict[str, Any], where: str) -> Any:
    if not isinstance(values, dict):
        raise ConfigError(f"{where}: expected a table, got {values!r}")
    hints = typing.get_type_hints(cls)
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ConfigError(f"{where}: unknown setting(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    kwargs = {}
    for name, value in values.items():
        hint = hints[name]
        if dataclasses.is_dataclass(hint):
            kwargs[name] = _build(hint, value, f"{where}.{name}")
        else:
            kwargs[name] = _check_type(value, hint, f"{where}.{name}")
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as err:
        raise ConfigError(f"{where}: {err}") from None


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def voice_profiles() -> list[str]:
    """The names of the voice assistant's profiles in ``configs/``; the training configs beside them (those with a
    ``[train]`` section) are not among them."""
    return sorted(p.stem for p in CONFIG_DIR.glob("*.toml") if "train" not in read_toml(p, ConfigError))


def config_path(name: str) -> Path:
    """``configs/NAME.toml`` for a bare name, else the path itself."""
    if name.endswith(".toml") or "/" in name:
        return Path(name)
    path = CONFIG_DIR / f"{name}.toml"
    if not path.is_file():
        raise ConfigError(f"no config named {name!r}; voice profiles: {', '.join(voice_profiles())}")
    return path


def load_config(name: str = DEFAULT_NAME) -> PipelineConfig:
    """The named config (or a TOML path) over ``configs/default.toml``."""
    values = read_toml(CONFIG_DIR / f"{DEFAULT_NAME}.toml", ConfigError)
    path = config_path(name)
    if path.resolve() != (CONFIG_DIR / f"{DEFAULT_NAME}.toml").resolve():
        profile = read_toml(path, ConfigError)
        if "train" in profile:
            raise ConfigError(f"{path} is a training config (python -m dlm.train --config {path}), not a voice "
                              f"profile; voice profiles: {', '.join(voice_profiles())}")
        values = _merge(values, profile)
    values["name"] = path.stem
    return _build(PipelineConfig, values, str(path))
