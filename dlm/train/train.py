"""Train the demo block-diffusion assistant: corpus -> tokenizer -> model -> checkpoint directory.

Reproducible from the seed (data, init, batch order and masks are all derived from it and the step number,
so a resumed run continues exactly as an uninterrupted one would) and resumable from the state file.
"""

from __future__ import annotations

import functools
import json
import math
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import NamedTuple

import torch
from tokenizers import Tokenizer
from tqdm import tqdm

from dlm.checkpoint import load_checkpoint, load_config, save_checkpoint
from dlm.config import ModelConfig
from dlm.model import Transformer
from dlm.train.config import CurriculumConfig, OptimConfig, RunConfig, RunConfigError
from dlm.train.data import Example, generate
from dlm.train.encode import DialogueEncoder, Encoded
from dlm.train.loss_plot import write_run_plot
from dlm.train.objective import Batch, diffusion_loss, make_batch
from dlm.train.phases import CURRICULUM, FINISH, FULL, load_state, save_state, saved_phase_starts
from dlm.train.tokenizer import IM_END, MASK, PAD, SPECIAL_TOKENS, save_tokenizer, train_tokenizer


@dataclass
class TrainResult:
    steps: int
    final_loss: float
    losses: list[float]
    seconds: float
    out_dir: Path
    phase_starts: dict[str, int | None]  # the step each phase began at, by name (None: never reached)


def model_config(run: RunConfig, tokenizer: Tokenizer) -> ModelConfig:
    shape = run.model
    return ModelConfig(
        model_type="sdar", vocab_size=tokenizer.get_vocab_size(), hidden_size=shape.hidden_size,
        num_layers=shape.num_layers, num_heads=shape.num_heads, num_kv_heads=shape.num_kv_heads,
        head_dim=shape.head_dim, intermediate_size=shape.intermediate_size, rope_theta=shape.rope_theta,
        rms_norm_eps=1e-6, qkv_bias=False, qk_norm=True, tie_word_embeddings=True,
        mask_token_id=tokenizer.token_to_id(MASK), block_size=shape.block_size, token_shift=False,
        bidirectional=False, max_position_embeddings=run.data.max_length,
        eos_token_ids=(tokenizer.token_to_id(IM_END), tokenizer.token_to_id(PAD)),
    )


QK_NORM_GAIN = 1.5


def init_weights(model: Transformer, seed: int) -> None:
    """GPT-style small normal init: the default unit-variance embedding makes tied logits explode.

    With q/k RMS-normed, an attention logit is at most sqrt(head_dim) times the two norm gains: 5.7 for
    head_dim 32 at gain 1, too flat to pick one token out of a hundred, which copying a value needs. The
    gains start at QK_NORM_GAIN so sharp attention is reachable from the first steps."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if param.dim() == 2:
                param.copy_(torch.randn(param.shape, generator=gen) * 0.02)
            elif name.endswith(("q_norm.weight", "k_norm.weight")):
                param.fill_(QK_NORM_GAIN)
            elif name.endswith("weight"):
                param.fill_(1.0)


def build_model(run: RunConfig, tokenizer: Tokenizer, compile_layers: bool = False) -> Transformer:
    """A freshly initialised model of the run's shape; `compile_layers` torch.compiles each decoder layer
    (shapes vary with every batch, so dynamically: one graph serves them all)."""
    model = Transformer(model_config(run, tokenizer))
    init_weights(model, run.train.seed)
    if run.train.init_from:
        load_weights(model, Path(run.train.init_from))
    if compile_layers:
        for layer in model.model.layers:
            layer.compile(dynamic=True)
    return model


def new_optimizer(model: Transformer, opt_cfg: OptimConfig) -> torch.optim.AdamW:
    """AdamW with weight decay on the matrices only (not on norms' gains)."""
    decay = [p for p in model.parameters() if p.dim() == 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": opt_cfg.weight_decay},
                              {"params": no_decay, "weight_decay": 0.0}], lr=opt_cfg.lr, betas=(0.9, 0.95))


def optimise(model: Transformer, optimizer: torch.optim.Optimizer, batch: Batch, opt_cfg: OptimConfig,
             bf16: bool) -> float:
    """One optimiser step on `batch` (loss normalised as `loss_weighting` says, matmuls in bf16 if `bf16`,
    gradients clipped); its loss."""
    normaliser = len(batch.labels) if opt_cfg.loss_weighting == "masked_mean" else batch.weights.numel()
    with torch.autocast(batch.ids.device.type, dtype=torch.bfloat16, enabled=bf16):
        loss = diffusion_loss(model, batch, normaliser)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), opt_cfg.grad_clip)
    optimizer.step()
    return loss.item()


def training_batch(items: list[Encoded], block_size: int, cfg: ModelConfig, tokenizer: Tokenizer,
                   opt_cfg: OptimConfig, seed: int) -> Batch:
    """The block-diffusion batch of `items` with the run's masking settings, its masks drawn from `seed`."""
    return make_batch(items, block_size, cfg.mask_token_id, tokenizer.token_to_id(PAD), opt_cfg.mask_eps,
                      opt_cfg.loss_weighting == "inverse_t", torch.Generator().manual_seed(seed),
                      opt_cfg.complementary_masks)


class Phase(NamedTuple):
    """A stretch of the run, from `first_step` on, that draws its batches from one corpus; a phase whose
    start depends on how training goes has `first_step` None until the run begins it."""

    name: str
    first_step: int | None
    corpus: list[Encoded]
    batch_size: int = 0  # 0: the run's batch size


def check_shape(run: RunConfig, source: ModelConfig) -> None:
    """Refuse a checkpoint to fine-tune whose shape is not the run's [model]."""
    differing = [f"{name} {getattr(source, name)} (the run's {getattr(run.model, name)})"
                 for name in ("hidden_size", "num_layers", "num_heads", "num_kv_heads", "head_dim", "intermediate_size")
                 if getattr(source, name) != getattr(run.model, name)]
    if differing:
        raise RunConfigError(f"[train] init_from {run.train.init_from}: its shape is not the run's [model]: "
                         f"{', '.join(differing)}")


def load_weights(model: Transformer, checkpoint: Path) -> None:
    """The weights of the checkpoint being fine-tuned, in the fresh model's fp32."""
    source, _ = load_checkpoint(checkpoint)
    try:
        model.load_state_dict({name: t.float() for name, t in source.state_dict().items()})
    except RuntimeError as err:
        raise RunConfigError(f"[train] init_from {checkpoint}: its shape is not the run's [model] ({err})") from None


def training_corpus(run: RunConfig) -> list[Example]:
    return generate("train", run.data.train_examples, run.data.seed, run.data.intents, run.data.intent_weights,
                    run.data.earlier_turn)


def run_tokenizer(run: RunConfig, corpus: Callable[[], list[Example]], state_dir: Path, resume: bool) -> Tokenizer:
    """The run's tokenizer: reloaded from state_dir when resuming, the fine-tuned checkpoint's with
    `init_from`, [data] `tokenizer` when it names one, else trained on `corpus()` (only called then); saved
    in state_dir.

    A tokenizer trained on the corpus follows every change to it: 39 more chat templates moved 15 of the
    2048 tokens and with them the ids of 1258 others, so the initial weights, and seed 0's copying in the
    race came after step 1800 rather than at 1301. Naming an earlier run's tokenizer keeps all of that."""
    tok_path = state_dir / "tokenizer.json"
    if resume and tok_path.exists():
        return Tokenizer.from_file(str(tok_path))
    if run.train.init_from:
        source = Path(run.train.init_from) / "tokenizer.json"
        if not source.is_file():
            raise RunConfigError(f"[train] init_from {run.train.init_from}: no tokenizer.json there")
        check_shape(run, load_config(run.train.init_from))  # before its tokenizer replaces the run's
        tokenizer = given_tokenizer(source, f"[train] init_from {run.train.init_from}")
    elif run.data.tokenizer:
        tokenizer = given_tokenizer(Path(run.data.tokenizer), f"[data] tokenizer {run.data.tokenizer}",
                                    run.data.vocab_size)
    else:
        renderer = DialogueEncoder(None)  # type: ignore[arg-type]
        tokenizer = train_tokenizer((renderer.render(e) for e in corpus()), run.data.vocab_size,
                                    run.data.max_token_length)
    state_dir.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(tok_path))
    return tokenizer


def given_tokenizer(path: Path, setting: str, vocab_size: int | None = None) -> Tokenizer:
    """The tokenizer in `path`, if it is one the run can use: the project's special tokens (the chat template
    and the mask are written with them), and `vocab_size` tokens when that is given. `setting` is the config
    key that named it, which the one-line refusal starts with."""
    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as err:  # the tokenizers library raises a bare Exception for a missing or malformed file
        raise RunConfigError(f"{setting}: not a tokenizer.json ({err})") from None
    missing = [token for token in SPECIAL_TOKENS if tokenizer.token_to_id(token) is None]
    if missing:
        raise RunConfigError(f"{setting}: its tokenizer lacks the special tokens {', '.join(missing)}")
    if vocab_size is not None and tokenizer.get_vocab_size() != vocab_size:
        raise RunConfigError(f"{setting} has {tokenizer.get_vocab_size()} tokens, [data] vocab_size is {vocab_size}")
    return tokenizer


def prepare_data(run: RunConfig, state_dir: Path, resume: bool,
                 curriculum_only: bool = False) -> tuple[Tokenizer, list[Phase]]:
    """The tokenizer (reloaded when resuming, trained on the full corpus otherwise) and the run's phases:
    the curriculum's corpus from step 0, if it has one, then the full corpus from a step the run decides,
    then the finish's, if it has one, from another. A `curriculum_only` session never draws from the later
    corpora, so their phases are left empty (not encoded: half a minute of one core saved for each candidate
    racing through the curriculum)."""
    curriculum, finish = run.curriculum, run.finish
    skip_later = curriculum_only and curriculum.steps > 0
    corpus = functools.cache(lambda: training_corpus(run))  # generated once, and only if something needs it
    tokenizer = run_tokenizer(run, corpus, state_dir, resume)
    encoder = DialogueEncoder(tokenizer)

    def encode(dialogues: list[Example]) -> list[Encoded]:
        return [enc for enc in map(encoder.encode, dialogues) if len(enc.ids) <= run.data.max_length]

    phases = []
    if curriculum.steps:
        phases.append(Phase(CURRICULUM, 0, encode(generate("train", curriculum.examples, run.data.seed,
                                                           curriculum.intents)), curriculum.batch_size))
    phases.append(Phase(FULL, None if curriculum.steps else 0, [] if skip_later else encode(corpus())))
    if finish.steps:
        weights = {**run.data.intent_weights, **finish.intent_weights}
        phases.append(Phase(FINISH, None, [] if skip_later else
                            encode(generate("train", finish.examples, finish.seed, run.data.intents, weights,
                                                    run.data.earlier_turn))))
    return tokenizer, phases


def batch_schedule(encoded: list[Encoded], batch_size: int, seed: str, epoch: int) -> list[list[int]]:
    """One epoch of batches of similar length (little padding), in a seeded order."""
    rng = random.Random(f"{seed}:epoch{epoch}")
    order = list(range(len(encoded)))
    rng.shuffle(order)
    chunk = batch_size * 50
    batches = []
    for start in range(0, len(order), chunk):
        part = sorted(order[start:start + chunk], key=lambda i: len(encoded[i].ids))
        batches += [part[i:i + batch_size] for i in range(0, len(part) - batch_size + 1, batch_size)]
    rng.shuffle(batches)
    return batches


class BatchSource:
    """The dialogues of each step: each phase's corpus from its first step on, in seeded epochs, so that a
    resumed run (given the steps its phases began at) draws exactly the batches an uninterrupted one would."""

    def __init__(self, phases: list[Phase], batch_size: int, seed: int):
        self.phases, self.batch_size, self.seed = list(phases), batch_size, seed
        for phase in phases:
            placeholder = phase.first_step is None and not phase.corpus  # a phase this session never reaches
            if len(phase.corpus) < self.size(phase) and not placeholder:
                raise RunConfigError(f"a corpus of {len(phase.corpus)} dialogues (phase {phase.name}) "
                                 f"cannot fill a batch of {self.size(phase)}")
        self._cached: tuple[tuple[int, int], list[list[int]]] = ((-1, -1), [])

    def phase_index(self, step: int) -> int:
        return max(i for i, phase in enumerate(self.phases) if phase.first_step is not None
                   and phase.first_step <= step)

    def begin(self, name: str, step: int) -> None:
        """Start phase `name` at `step` (the phases before it end there). A phase the run does not have is refused:
        a saved state that began one (a finish) resumed under a config without it."""
        index = next((i for i, phase in enumerate(self.phases) if phase.name == name), None)
        if index is None:
            raise RunConfigError(f"the run has no {name} phase to begin at step {step} (phases: "
                                 f"{', '.join(self.starts())}): resume it with the config it was started with")
        self.phases[index] = self.phases[index]._replace(first_step=step)

    def started(self, name: str) -> bool:
        return self.starts().get(name) is not None

    def has(self, name: str) -> bool:
        return name in self.starts()

    def starts(self) -> dict[str, int | None]:
        """Each phase's first step by name (None: not begun), as a run's state saves them."""
        return {phase.name: phase.first_step for phase in self.phases}

    def size(self, phase: Phase) -> int:
        return phase.batch_size or self.batch_size

    def batch(self, step: int) -> list[Encoded]:
        index = self.phase_index(step)
        phase = self.phases[index]
        name, first_step, corpus, size = phase.name, phase.first_step, phase.corpus, self.size(phase)
        assert first_step is not None
        if not corpus:
            raise RuntimeError(f"phase {name} began, but its corpus was not loaded in this session")
        epoch, position = divmod(step - first_step, len(corpus) // size)
        if self._cached[0] != (index, epoch):
            self._cached = ((index, epoch), batch_schedule(corpus, size, f"{self.seed}:{index}", epoch))
        return [corpus[i] for i in self._cached[1][position]]


def curriculum_over(curriculum: CurriculumConfig, losses: list[float], steps_done: int) -> str | None:
    """Why the curriculum ends after `steps_done` steps (all of them on its corpus), or None to go on."""
    window = losses[-curriculum.loss_window:]
    if curriculum.until_loss and len(window) == curriculum.loss_window:
        mean = sum(window) / len(window)
        if mean < curriculum.until_loss:
            return f"its mean loss over the last {len(window)} steps is {mean:.2f} < {curriculum.until_loss}"
    if steps_done >= curriculum.steps:
        return f"it reached its most steps, {curriculum.steps}"
    return None


def schedule_step(run: RunConfig, step: int, seconds: float = 0.0, in_curriculum: bool = False) -> int:
    """Where in its `steps` the run's schedule (learning rate, finish) stands after `step` steps and `seconds`
    of training.

    A run behind the pace that reaches `steps` at the time limit is scheduled as if at the step that pace
    would have reached, so a machine too slow for `steps` still ends annealed instead of cut off at a high rate
    (a 2-core run that did 3397 of 5000 steps stopped at 26% of the peak rate). A run ahead of that pace
    follows its step count alone. The warm-up and the curriculum always do: the first steps' seconds are mostly
    compiling, and a candidate's pace is the share of the cores the race leaves it, so on the clock the same
    seed had taken another rate from its second step on in a race of four than beside one other (a new draw of
    when copying emerges)."""
    opt = run.train
    if step < opt.warmup_steps or in_curriculum:
        return step
    return max(step, math.floor(opt.steps * seconds / (opt.max_minutes * 60)))


PACE_SKIP = 50  # a session's first full-mix steps, left out of its pace: they compile (bf16 recompiles too)
PACE_AFTER = 200  # full-mix steps whose pace then tells where a run behind its `steps` will stop


def pace_note(run: RunConfig, step: int, seconds: float, since: tuple[int, float]) -> tuple[int, str] | None:
    """The step the run reaches by `max_minutes` at the pace it kept since `since` (a step and its seconds of
    training), and a line saying so, or None when it reaches all its `steps`. A slower machine's run stops
    short and scores lower (docs/demo-model.md), which whoever trains should learn in its first minutes rather
    than from a progress bar whose ETA counts to `steps`."""
    opt = run.train
    pace = (step - since[0]) / max(seconds - since[1], 1e-9)
    reached = step + math.floor(pace * max(opt.max_minutes * 60 - seconds, 0.0))
    if reached >= opt.steps:
        return None
    return reached, (f"at {pace:.1f} steps/s the run reaches about step {reached} of {opt.steps} by max_minutes="
                     f"{opt.max_minutes}; its learning rate follows the clock, so it still ends annealed")


def learning_rate(run: RunConfig, step: int, seconds: float = 0.0, in_curriculum: bool = False) -> float:
    """Linear warm-up, then a cosine decay that ends at `steps` or at `max_minutes`, whichever comes first
    (`schedule_step`); in the curriculum, a cosine `[curriculum] cosine_steps` long when it names one."""
    opt = run.train
    if step < opt.warmup_steps:
        return opt.lr * (step + 1) / opt.warmup_steps
    at = schedule_step(run, step, seconds, in_curriculum)
    length = (in_curriculum and run.curriculum.cosine_steps) or opt.steps
    progress = (at - opt.warmup_steps) / max(1, length - opt.warmup_steps)
    return opt.lr * (opt.min_lr_ratio + (1 - opt.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * min(progress, 1.0))))


def next_phase(run: RunConfig, source: BatchSource, losses: list[float], step: int,
               seconds: float) -> tuple[str, str] | None:
    """The phase that begins after `step` steps and `seconds` of training and a line saying why, or None: the
    full mix once the curriculum is over, the finish once the schedule is its `steps` from the end."""
    if not source.started(FULL):
        why = curriculum_over(run.curriculum, losses, step)
        return (FULL, f"the full mix begins at step {step}: the curriculum is over, {why}") if why else None
    if source.has(FINISH) and not source.started(FINISH):
        at = schedule_step(run, step, seconds)
        if at >= run.train.steps - run.finish.steps:
            return FINISH, f"the finish begins at step {step}, {run.train.steps - at} scheduled steps from the end"
    return None


def export(model: Transformer, tokenizer: Tokenizer, out_dir: Path, trained_block_sizes: list[int]) -> None:
    """A checkpoint directory the engine loads like any other SDAR checkpoint."""
    save_checkpoint(model, out_dir, "bfloat16")
    save_tokenizer(tokenizer, out_dir, model.cfg.max_position_embeddings)
    write_generation_config(model.cfg, tokenizer, out_dir, trained_block_sizes)


def write_generation_config(cfg: ModelConfig, tokenizer: Tokenizer, out_dir: Path,
                            trained_block_sizes: list[int]) -> None:
    """Stop ids, and the block sizes training used (the engine only picks a small first block it knows)."""
    generation = {"eos_token_id": list(cfg.eos_token_ids), "pad_token_id": tokenizer.token_to_id(PAD),
                  "mask_token_id": cfg.mask_token_id, "block_size": cfg.block_size,
                  "trained_block_sizes": sorted(trained_block_sizes)}
    (out_dir / "generation_config.json").write_text(json.dumps(generation, indent=2) + "\n")


def restore(model: Transformer, optimizer: torch.optim.Optimizer, state: dict, run: RunConfig,
            state_path: Path) -> None:
    """The saved weights and optimiser of a run being resumed; a state of another shape than the run's
    [model] is refused in one line naming what differs (torch's refusal is a traceback of every tensor)."""
    try:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
    except (RuntimeError, ValueError):
        saved = state.get("config", {}).get("model", {})
        differing = [f"{key} {saved[key]}, not {value}" for key, value in asdict(run.model).items()
                     if key in saved and saved[key] != value]
        what = "; ".join(differing) or "its tensors"
        raise RunConfigError(f"{state_path} holds a model of another shape than [model] ({what}): resume with the "
                             "config it was started with") from None


def train(run: RunConfig, resume: bool = False, progress: bool = True, stop_after: int | None = None,
          curriculum_only: bool = False) -> TrainResult:
    """Run (or, with `resume`, continue) training; `stop_after` ends this session early at that step, and
    `curriculum_only` when the curriculum ends, saving the state so a later `resume` carries on as if never
    interrupted."""
    opt_cfg = run.train
    torch.set_num_threads(opt_cfg.threads)
    state_dir, out_dir = Path(opt_cfg.state_dir), Path(opt_cfg.out_dir)
    state_path = state_dir / "state.pt"
    tokenizer, phases = prepare_data(run, state_dir, resume, curriculum_only)
    model = build_model(run, tokenizer, opt_cfg.compile)
    cfg = model.cfg
    optimizer = new_optimizer(model, opt_cfg)
    step, losses, spent = 0, [], 0.0  # spent: training seconds of earlier sessions of this run
    source = BatchSource(phases, opt_cfg.batch_size, opt_cfg.seed)
    if resume and state_path.exists():
        state = load_state(state_path)
        restore(model, optimizer, state, run, state_path)
        step, losses, spent = state["step"], state["losses"], state.get("seconds", 0.0)
        for name, first_step in saved_phase_starts(state).items():
            if first_step is not None:
                source.begin(name, first_step)
    started, tokens_seen = time.monotonic(), 0
    bar = tqdm(total=opt_cfg.steps, initial=step, disable=not progress, dynamic_ncols=True)
    model.train()
    last = min(opt_cfg.steps, stop_after or opt_cfg.steps)
    full_steps = 0  # this session's steps in the full mix: a run resumed there (after the race) has a pace too
    pace_from: tuple[int, float] = (0, 0.0)  # the step after PACE_SKIP of them, and its seconds

    def curriculum_only_and_over() -> bool:
        return curriculum_only and source.started(FULL)

    while step < last and not curriculum_only_and_over():
        step_rng = random.Random(f"{opt_cfg.seed}:step{step}")
        block_size = step_rng.choice(opt_cfg.block_sizes)
        batch = training_batch(source.batch(step), block_size, cfg, tokenizer, opt_cfg,
                               seed=opt_cfg.seed * 1_000_003 + step)
        if len(batch.labels) == 0:
            step += 1
            continue
        in_curriculum = not source.started(FULL)
        rate = learning_rate(run, step, spent + time.monotonic() - started, in_curriculum)
        for group in optimizer.param_groups:
            group["lr"] = rate
        bf16 = opt_cfg.bf16 and (run.curriculum.bf16 or not in_curriculum)
        losses.append(optimise(model, optimizer, batch, opt_cfg, bf16))
        step += 1
        elapsed = time.monotonic() - started  # this session's seconds
        clock = spent + elapsed  # the whole run's, earlier sessions included
        if begins := next_phase(run, source, losses, step, clock):
            source.begin(begins[0], step)
            tqdm.write(begins[1])
        full_steps += 0 if in_curriculum else 1
        if full_steps == PACE_SKIP:
            pace_from = (step, clock)
        elif full_steps == PACE_SKIP + PACE_AFTER and (note := pace_note(run, step, clock, pace_from)):
            bar.total, line = note  # the bar's ETA then says when the run ends
            tqdm.write(line)
        tokens_seen += batch.tokens
        bar.update(1)
        bar.set_postfix(loss=f"{sum(losses[-50:]) / len(losses[-50:]):.3f}", tok_s=f"{tokens_seen / elapsed:.0f}",
                        block=block_size, corpus=source.phases[source.phase_index(step - 1)].name)
        out_of_time = clock > opt_cfg.max_minutes * 60
        stopping = out_of_time or curriculum_only_and_over()
        if step % opt_cfg.checkpoint_every == 0 or step == last or stopping:
            state_dir.mkdir(parents=True, exist_ok=True)
            save_state({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step,
                        "losses": losses, "phase_starts": source.starts(), "seconds": clock,
                        "config": run.as_dict()}, state_path)
            write_run_plot(state_dir, losses, source.starts())
        if out_of_time:
            tqdm.write(f"stopping at step {step}: over max_minutes={opt_cfg.max_minutes}")
        if stopping:
            break
    bar.close()
    model.eval()
    export(model, tokenizer, out_dir, opt_cfg.block_sizes)
    return TrainResult(step, losses[-1] if losses else float("nan"), losses, time.monotonic() - started, out_dir,
                       source.starts())
