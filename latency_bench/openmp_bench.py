"""``python -m latency_bench openmp``: demo-checkpoint turns under each way a process came to hold two OpenMP teams
in torch's GNU OpenMP, against the way the product now runs (one team).

torch's CPU operators run on an OpenMP team of the calling thread. GNU OpenMP counts the threads of all its
teams, and once they outnumber the cores it stops spinning for the next parallel region and sleeps between
them. Two ways got there: the model loaded on the main thread and run on the engine's worker (every engine
until 2026-12-07; ``Engine.build`` now builds it on the worker), and Whisper's CTranslate2, whose OpenMP calls
bind to torch's library when torch is imported first (``voice.asr`` now imports it with ``RTLD_DEEPBIND``).
That state belongs to the whole process, so each way runs in fresh processes of its own, the ways taking turns,
and all must decode the same ids. Each process also counts its OS threads once its turns are done: the model
built on the caller leaves one team more (with 2 torch threads, one thread more), the mechanism seen without a
clock. The Whisper ways also time Whisper's passes over 2 s of noise (a 10 s window).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from typing import Any

import numpy as np
import torch

from dlm.cli_args import at_least_one, output_path
from latency_bench.gpu_engine import QUESTIONS, timed_turns

ONE_TEAM, CALLER, SHARED_WHISPER, OWN_WHISPER = WAYS = (
    "one team", "model built on the caller", "Whisper on torch's OpenMP", "Whisper on its own OpenMP")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--repeats", type=at_least_one, default=3, help="fresh processes for each way")
    parser.add_argument("--turns", type=at_least_one, default=8, help="timed rounds of the questions a process")
    parser.add_argument("--threads", type=at_least_one, default=2, help="torch threads")
    parser.add_argument("--json", type=output_path, help="also write the figures here")


def _setup(way: str) -> tuple[Any, Any]:
    """The engine (and Whisper, for its ways) as ``way`` builds them; imported late, so the parent process
    never loads a model."""
    from dlm.checkpoint import load_checkpoint
    from dlm.cli import DEMO_CHECKPOINT
    from dlm.engine import Engine

    if way == CALLER:
        model, tokenizer = load_checkpoint(DEMO_CHECKPOINT, torch.float32, torch.device("cpu"))
        return Engine(model, tokenizer, "cpu"), None
    asr = None
    if way in (SHARED_WHISPER, OWN_WHISPER):
        if way == SHARED_WHISPER:
            import ctranslate2  # noqa: F401  plainly, after torch: voice.asr then leaves it as bound
        from voice.asr import WhisperAsr

        asr = WhisperAsr()
    return Engine.from_dir(DEMO_CHECKPOINT, "float32", "cpu"), asr


def _asr_pass_ms(asr: Any) -> float:
    """The median of three Whisper passes over 2 s of noise, after one to warm up."""
    noise = np.random.default_rng(0).normal(0, 1000, 32000).astype(np.int16)  # loud enough to be listened to
    asr.transcribe(noise, window_s=10)
    return statistics.median(asr.transcribe(noise, window_s=10).compute_ms for _ in range(3))


def measure(way: str, turns: int) -> dict[str, object]:
    """In this process: one warm-up round, then ``turns`` timed rounds of the questions, and the process's OS
    threads after them (Linux)."""
    engine, asr = _setup(way)
    try:
        timed_turns(engine, 1)
        ids, figures = timed_turns(engine, turns)
        os_threads = len(os.listdir("/proc/self/task")) if os.path.isdir("/proc/self/task") else 0
        asr_ms = _asr_pass_ms(asr) if asr is not None else None
    finally:
        engine.close()
        if asr is not None:
            asr.close()
    return {**figures, "os_threads": os_threads, "asr_pass_ms": asr_ms, "ids": ids}


def _in_fresh_process(way: str, turns: int, threads: int) -> dict[str, object]:
    out = subprocess.run([sys.executable, "-m", __name__, way, str(turns), str(threads)], capture_output=True,
                         text=True, timeout=600, check=False)  # fmt: skip
    if out.returncode:
        raise RuntimeError(f"the {way!r} process failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.splitlines()[-1])


def _median(runs: list[dict[str, object]], key: str) -> float | None:
    values = [float(s[key]) for s in runs if s[key] is not None]
    return round(statistics.median(values), 3) if values else None


def run(args: argparse.Namespace) -> int:
    samples: dict[str, list[dict[str, object]]] = {way: [] for way in WAYS}
    for _ in range(args.repeats):
        for way in WAYS:
            samples[way].append(_in_fresh_process(way, args.turns, args.threads))
    decoded = {json.dumps(s.pop("ids")) for runs in samples.values() for s in runs}
    if len(decoded) != 1:
        raise AssertionError("the ways decoded different ids")
    figures = {way: {key: _median(runs, key) for key in runs[0]} for way, runs in samples.items()}
    ratios = {way: round(figures[way]["turn_ms"] / figures[ONE_TEAM]["turn_ms"], 3) for way in WAYS[1:]}
    print(f"demo checkpoint, float32 on CPU, {args.threads} torch threads, medians of {args.repeats} processes "
          f"x {args.turns} rounds of {len(QUESTIONS)} questions")
    for way, f in figures.items():
        asr = f" Whisper pass {f['asr_pass_ms']:6.1f} ms" if f["asr_pass_ms"] is not None else ""
        print(f"{way:<26} turn {f['turn_ms']:7.2f} ms (x{ratios.get(way, 1.0):.2f})  first block "
              f"{f['first_block_ms']:6.2f} ms  {f['ms_per_pass']:.3f} ms a pass  {f['os_threads']:.0f} OS threads{asr}")
    if args.json:
        report = {"ways": figures, "turn_over_one_team": ratios, "threads": args.threads,
                  "repeats": args.repeats, "turns": args.turns, "questions": list(QUESTIONS)}
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":  # one way's process: ``python -m latency_bench.openmp_bench WAY TURNS THREADS``
    torch.set_num_threads(int(sys.argv[3]))
    print(json.dumps(measure(sys.argv[1], int(sys.argv[2]))))
