"""Training step time of a run config's shape: eager fp32, `[train] compile = true`, and compiled with
`[train] bf16 = true`, on the same batches.

The demo checkpoint's quality is bounded by how many steps fit in its 30-minute budget on a 2-core CPU, so
a faster step is more model. Each mode trains a fresh model from the same init on the same batches (one
block size per step, as training draws them), the modes taking turns step by step so that a noisy machine
slows all alike; the first steps, where the compiled modes compile, are reported apart.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import re
import statistics
import tempfile
import time
from pathlib import Path

import torch
from tokenizers import Tokenizer

from dlm.cli_args import at_least_one, output_path
from dlm.train.config import RunConfig, load_run_config
from dlm.train.encode import Encoded
from dlm.train.train import BatchSource, build_model, new_optimizer, optimise, prepare_data, training_batch

WARMUP_STEPS = 10  # the compiled mode compiles in these (a recompile per new kind of shape)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", default="configs/demo.toml", help="run config whose shape is timed")
    parser.add_argument("--steps", type=at_least_one, default=60, help="timed steps per mode after the warm-up")
    parser.add_argument("--examples", type=at_least_one, default=3000, help="dialogues the batches are drawn from")
    parser.add_argument("--threads", type=at_least_one, default=2)
    parser.add_argument("--json", type=output_path, help="also write the figures here")


def cpu_model() -> str:
    """The processor's name, for the record: the same step takes twice as long on some 2-core machines."""
    cpuinfo = Path("/proc/cpuinfo")
    names = re.findall(r"^model name\s*:\s*(.+)$", cpuinfo.read_text(), re.M) if cpuinfo.exists() else []
    return names[0] if names else platform.processor() or "unknown"


class Trainer:
    """A model of the run's shape, its optimizer, and one timed training step."""

    def __init__(self, run: RunConfig, tokenizer: Tokenizer, compiled: bool, bf16: bool):
        self.run = dataclasses.replace(run, train=dataclasses.replace(run.train, bf16=bf16))
        self.tokenizer = tokenizer
        self.model = build_model(self.run, tokenizer, compiled)
        self.optimizer = new_optimizer(self.model, self.run.train)

    def step(self, items: list[Encoded], block_size: int, seed: int) -> float:
        batch = training_batch(items, block_size, self.model.cfg, self.tokenizer, self.run.train, seed)
        started = time.perf_counter()
        optimise(self.model, self.optimizer, batch, self.run.train, self.run.train.bf16)
        return time.perf_counter() - started


def run(args: argparse.Namespace) -> int:
    torch.set_num_threads(args.threads)
    run_cfg = load_run_config(args.config)
    run_cfg = dataclasses.replace(run_cfg, data=dataclasses.replace(run_cfg.data, train_examples=args.examples),
                                  curriculum=dataclasses.replace(run_cfg.curriculum, steps=0))
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer, phases = prepare_data(run_cfg, Path(tmp), resume=False)
    source = BatchSource(phases, run_cfg.train.batch_size, run_cfg.train.seed)
    trainers = {"eager": Trainer(run_cfg, tokenizer, False, False), "compiled": Trainer(run_cfg, tokenizer, True, False),
                "compiled_bf16": Trainer(run_cfg, tokenizer, True, True)}
    times: dict[str, list[float]] = {name: [] for name in trainers}
    sizes = run_cfg.train.block_sizes
    for step in range(WARMUP_STEPS + args.steps):
        items, block_size = source.batch(step), sizes[step % len(sizes)]
        for name, trainer in trainers.items():
            times[name].append(trainer.step(items, block_size, step))
    report = {"config": args.config, "cpu": cpu_model(), "threads": args.threads, "steps": args.steps}
    for name, spent in times.items():
        timed = spent[WARMUP_STEPS:]
        report[name] = {"median_s": statistics.median(timed), "mean_s": statistics.fmean(timed),
                        "warmup_s": sum(spent[:WARMUP_STEPS])}
        print(f"{name:13s} median {report[name]['median_s'] * 1e3:6.0f} ms  mean {report[name]['mean_s'] * 1e3:6.0f} ms"
              f"  first {WARMUP_STEPS} steps {report[name]['warmup_s']:5.1f} s")
    for name, base in (("compiled", "eager"), ("compiled_bf16", "eager"), ("compiled_bf16", "compiled")):
        median = report[base]["median_s"] / report[name]["median_s"]
        mean = report[base]["mean_s"] / report[name]["mean_s"]
        report[f"speedup_{name}_vs_{base}"] = {"median": median, "mean": mean}
        print(f"{name} is {median:.2f}x {base} by the median, {mean:.2f}x by the mean")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0
