"""The training run's settings, read from a TOML file such as configs/demo.toml."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, get_args, get_origin, get_type_hints

from dlm.toml_file import read_toml
from dlm.train.data import EARLIER_TURN, check_mix


class RunConfigError(ValueError):
    """A run config, or a checkpoint, corpus or directory it names, that training cannot use: `python -m
    dlm.train` prints it as one line, where any other error (a bug) keeps its traceback."""


@dataclass
class DataConfig:
    train_examples: int = 40000
    seed: int = 0
    vocab_size: int = 2048
    max_length: int = 256
    intents: list[str] = field(default_factory=list)  # only these intents (see dlm.train.intents); empty = all
    intent_weights: dict[str, float] = field(default_factory=dict)  # override INTENTS' sampling weights
    earlier_turn: float = EARLIER_TURN  # share of dialogues with an unrelated request before the final one
    max_token_length: int = 0  # BpeTrainer's limit on a token's characters (0: none); tokenizers 0.21 keeps
    # every token shorter than it (huggingface/tokenizers#1461)
    tokenizer: str = ""  # a tokenizer.json to use rather than train one on the corpus (a run's own
    # state_dir/tokenizer.json): a change to the data then changes only the data, not every token id and with
    # them the initial weights and the copying race (see dlm.train.train.run_tokenizer)


@dataclass
class ShapeConfig:
    hidden_size: int = 256
    num_layers: int = 4
    num_heads: int = 4
    num_kv_heads: int = 2
    head_dim: int = 64
    intermediate_size: int = 640
    rope_theta: float = 10000.0
    block_size: int = 8  # the checkpoint's default decoding block


@dataclass
class OptimConfig:
    out_dir: str = "runs/train"  # configs/demo.toml names dlm/assets/demo; a default must not overwrite it
    state_dir: str = "runs/train-state"
    seed: int = 0
    steps: int = 2500
    batch_size: int = 16
    lr: float = 2e-3
    warmup_steps: int = 100
    min_lr_ratio: float = 0.05
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    block_sizes: list[int] = field(default_factory=lambda: [4, 8, 16])
    mask_eps: float = 0.05
    loss_weighting: str = "masked_mean"  # or "inverse_t" (the 1/t ELBO weighting of BD3-LM/LLaDA)
    complementary_masks: bool = False  # a second noisy copy masking what the first left clean
    checkpoint_every: int = 200
    threads: int = 2
    compile: bool = False  # torch.compile each decoder layer: about 20 s of compiling, then steps 1.24x as
    # fast on the 2-core CPU (fused norms, RoPE and SwiGLU; `python -m latency_bench train-step`)
    bf16: bool = False  # autocast the step's matmuls to bf16 (fp32 weights, optimiser and attention): on a
    # CPU with AMX the compiled demo step is 1.27x as fast (`python -m latency_bench train-step`)
    init_from: str = ""  # a checkpoint directory to fine-tune: its tokenizer and weights instead of a new
    # tokenizer and random weights ([model] must have its shape; `python -m dlm.train --init-from DIR`, which
    # sets aside [data] tokenizer, since a fine-tune keeps its checkpoint's tokenizer)
    max_minutes: float = 28.0  # training time (all sessions of a run) after which it stops, saved and exported,
    # and by which its learning rate has decayed (see train.learning_rate)


@dataclass
class CurriculumConfig:
    """The run's first steps train on dialogues of `intents` alone (`examples` of them), the rest on the full
    corpus. Copying is learned in a sudden phase change that a corpus of nothing but copies reaches within
    minutes and the full mix, where copies are diluted, does not reach in a whole run. When that change comes
    varies from seed to seed, so the curriculum can end on its loss (`until_loss`: the mean over its last
    `loss_window` steps falls below it) rather than at a fixed step; `steps` is then its most. With
    `candidates` > 1 that many seeds run it side by side, and the first to reach `until_loss` (or, failing
    that, the lowest loss) carries on (dlm.train.candidates)."""

    intents: list[str] = field(default_factory=list)
    steps: int = 0
    examples: int = 8000
    until_loss: float = 0.0  # 0: always run all `steps`
    loss_window: int = 100
    candidates: int = 1  # seeds that run the curriculum side by side, one thread each; the best goes on
    bf16: bool = True  # whether its steps follow [train] bf16; false keeps them fp32, and so the race's draw
    # as an fp32 run draws it (bf16 rounds every step otherwise, and which seed copies first changes with it)
    batch_size: int = 0  # dialogues per step (0: [train] batch_size): the race keeps its draw at 16 while the
    # full mix takes bigger batches, which bf16 steps through faster per dialogue (latency_bench train-step)
    cosine_steps: int = 0  # the length of the cosine the curriculum's learning rate follows (0: [train] steps,
    # the rest of the run's): fixed, [train] steps can change without changing the curriculum's rates and with
    # them when each seed's copying emerges (docs/demo-model.md, N and S)


@dataclass
class FinishConfig:
    """The run's last `steps` steps train on freshly drawn dialogues (`examples` of them, from data seed
    `seed`) of a mix that weights some intents otherwise (`intent_weights`, over [data]'s): what a fine-tune
    on that mix does after the run, inside the run and its time budget, at the low end of its learning
    rate. It begins when the schedule is `steps` from its end (dlm.train.train.schedule_step: on the clock,
    for a run behind pace)."""

    steps: int = 0  # 0: no finish, the full mix to the end
    examples: int = 20000
    seed: int = 1  # the finish's data seed: other dialogues than [data] seed's
    intent_weights: dict[str, float] = field(default_factory=dict)


@dataclass
class RunConfig:
    data: DataConfig = field(default_factory=DataConfig)
    model: ShapeConfig = field(default_factory=ShapeConfig)
    train: OptimConfig = field(default_factory=OptimConfig)
    curriculum: CurriculumConfig = field(default_factory=CurriculumConfig)
    finish: FinishConfig = field(default_factory=FinishConfig)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


_AT_LEAST = {  # the least value of each count, by section: a zero where one is needed had surfaced as a
    # ZeroDivisionError minutes into a run, while [curriculum] and [finish] steps 0 mean none
    "data": {"train_examples": 1, "vocab_size": 1, "max_length": 1, "max_token_length": 0},
    "model": {"hidden_size": 1, "num_layers": 1, "num_heads": 1, "num_kv_heads": 1, "head_dim": 1,
              "intermediate_size": 1, "block_size": 1},
    "train": {"steps": 1, "batch_size": 1, "checkpoint_every": 1, "threads": 1, "warmup_steps": 0,
              "weight_decay": 0, "min_lr_ratio": 0, "mask_eps": 0},
    "curriculum": {"steps": 0, "examples": 1, "batch_size": 0},
    "finish": {"steps": 0, "examples": 1},
}
# over 0: AdamW's refusal of a negative rate had been a traceback, and a negative clip norm turns every step into
# gradient ascent
_POSITIVE = {"model": {"rope_theta"}, "train": {"lr", "grad_clip", "max_minutes"}}


def _fits(value: Any, expected: Any) -> bool:
    """Whether a TOML value is of a field's type, element by element (an int where a float is expected)."""
    origin = get_origin(expected)
    if origin is list:
        return isinstance(value, list) and all(_fits(v, get_args(expected)[0]) for v in value)
    if origin is dict:
        return isinstance(value, dict) and all(_fits(v, get_args(expected)[1]) for v in value.values())
    if expected is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    return isinstance(value, expected) and (expected is bool or not isinstance(value, bool))


def _finite(value: Any) -> bool:
    """Whether every number in a value is finite: a NaN passes every range check and then every comparison."""
    if isinstance(value, list | dict):
        return all(map(_finite, value.values() if isinstance(value, dict) else value))
    return not isinstance(value, float) or math.isfinite(value)


def _check_value(name: str, key: str, value: Any, expected: Any) -> None:
    """Refuse a value of the wrong type or out of its section's range, naming it."""
    if not _fits(value, expected):
        wanted = expected.__name__ if isinstance(expected, type) else str(expected)
        raise RunConfigError(f"[{name}] {key} must be of type {wanted}, got {value!r}")
    if not _finite(value):
        raise RunConfigError(f"[{name}] {key} must be finite, got {value!r}")
    least = _AT_LEAST.get(name, {}).get(key)
    if least is not None and value < least:
        raise RunConfigError(f"[{name}] {key} must be at least {least}, got {value}")
    if key in _POSITIVE.get(name, set()) and value <= 0:
        raise RunConfigError(f"[{name}] {key} must be over 0, got {value}")


def _section(cls: type, raw: dict[str, Any], name: str) -> Any:
    """The section's dataclass, each value of its field's type and in range: a wrong one had surfaced as a
    ZeroDivisionError or TypeError minutes into a run."""
    if not isinstance(raw, dict):
        raise RunConfigError(f"[{name}] must be a table of settings, got {raw!r}")
    known = {f.name for f in fields(cls)}
    unknown = set(raw) - known
    if unknown:
        raise RunConfigError(f"[{name}]: unknown keys {', '.join(sorted(unknown))}; known: {', '.join(sorted(known))}")
    types = get_type_hints(cls)
    for key, value in raw.items():
        _check_value(name, key, value, types[key])
    return cls(**raw)


def from_dict(raw: dict[str, Any]) -> RunConfig:
    unknown = set(raw) - {"data", "model", "train", "curriculum", "finish"}
    if unknown:
        raise RunConfigError(f"unknown config sections {', '.join(sorted(unknown))}; "
                             "use [data], [model], [train], [curriculum], [finish]")
    run = RunConfig(_section(DataConfig, raw.get("data", {}), "data"),
                    _section(ShapeConfig, raw.get("model", {}), "model"),
                    _section(OptimConfig, raw.get("train", {}), "train"),
                    _section(CurriculumConfig, raw.get("curriculum", {}), "curriculum"),
                    _section(FinishConfig, raw.get("finish", {}), "finish"))
    if not run.train.block_sizes or any(b < 1 for b in run.train.block_sizes):
        raise RunConfigError("[train] block_sizes must be a non-empty list of block sizes >= 1")
    if run.model.num_heads % run.model.num_kv_heads:
        raise RunConfigError(f"[model] num_kv_heads ({run.model.num_kv_heads}) must divide num_heads "
                             f"({run.model.num_heads}): each key/value head serves a group of query heads")
    if not 0 <= run.data.earlier_turn <= 1:
        raise RunConfigError("[data] earlier_turn is a share of the dialogues: between 0 and 1")
    if run.train.loss_weighting not in ("masked_mean", "inverse_t"):
        raise RunConfigError("[train] loss_weighting must be 'masked_mean' or 'inverse_t'")
    if run.curriculum.steps and not run.curriculum.intents:
        raise RunConfigError("[curriculum] steps needs intents: the first steps train on those intents only")
    if run.curriculum.until_loss < 0 or run.curriculum.loss_window < 1:
        raise RunConfigError("[curriculum] until_loss must be >= 0 and loss_window >= 1")
    if run.curriculum.candidates < 1 or (run.curriculum.candidates > 1 and not run.curriculum.steps):
        raise RunConfigError("[curriculum] candidates must be >= 1, and more than one needs steps to compare them on")
    if run.curriculum.cosine_steps and run.curriculum.cosine_steps <= run.train.warmup_steps:
        raise RunConfigError("[curriculum] cosine_steps must be 0 (the run's steps) or more than [train] warmup_steps")
    if run.curriculum.until_loss and not run.curriculum.steps:
        raise RunConfigError("[curriculum] until_loss needs steps: the most steps the curriculum may take")
    if run.data.tokenizer and run.train.init_from:
        raise RunConfigError("[data] tokenizer and [train] init_from both name a tokenizer: a fine-tune keeps its "
                             "checkpoint's, so leave [data] tokenizer out")
    check_finish(run)
    for section, intents, weights in (("data", run.data.intents, run.data.intent_weights),
                                      ("curriculum", run.curriculum.intents, {}),
                                      ("finish", run.data.intents, run.finish.intent_weights)):
        try:
            check_mix(intents, weights)
        except ValueError as err:
            raise RunConfigError(f"[{section}] {err}") from None
    return run


def check_finish(run: RunConfig) -> None:
    """Refuse a finish as long as the run (`--steps` can shorten the run after the config was read)."""
    if run.finish.steps >= run.train.steps:
        raise RunConfigError(f"[finish] steps ({run.finish.steps}) must be under [train] steps "
                             f"({run.train.steps}): lower it, or leave [finish] out")


def load_run_config(path: str | Path) -> RunConfig:
    return from_dict(read_toml(path, RunConfigError))
