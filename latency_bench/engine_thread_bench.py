"""``python -m latency_bench engine-thread``: demo-checkpoint turns with the model built on the thread that runs
it (``Engine.build``, as every engine is now built) against built on the caller's thread (as before 2026-12-07).

torch's CPU operators run on an OpenMP team of the calling thread. GNU OpenMP counts the threads of every team,
and once they outnumber the cores it stops spinning for the next parallel region and sleeps between them. A
model loaded on the main thread and run on the engine's worker leaves two teams. That state belongs to the
whole process, so each way runs in a fresh process of its own, the ways taking turns, and both must decode the
same ids. Each process also counts its OS threads once its turns are done: the caller's way holds one OpenMP
team more (with 2 torch threads, one more thread), which is the mechanism, seen without a clock.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import torch

from dlm.cli_args import at_least_one, output_path

WAYS = ("built on the worker", "built on the caller")
QUESTIONS = ("what's the capital of france", "set a timer for ten minutes", "how much is 12 times 4")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--repeats", type=at_least_one, default=3, help="fresh processes for each way")
    parser.add_argument("--turns", type=at_least_one, default=8, help="timed rounds of the questions a process")
    parser.add_argument("--threads", type=at_least_one, default=2, help="torch threads")
    parser.add_argument("--json", type=output_path, help="also write the figures here")


def _engine(way: str):  # -> Engine; imported late, so the parent process never loads a model
    from dlm.checkpoint import load_checkpoint
    from dlm.cli import DEMO_CHECKPOINT
    from dlm.engine import Engine

    if way == WAYS[0]:
        return Engine.from_dir(DEMO_CHECKPOINT, "float32", "cpu")
    model, tokenizer = load_checkpoint(DEMO_CHECKPOINT, torch.float32, torch.device("cpu"))
    return Engine(model, tokenizer, "cpu")


def measure(way: str, turns: int) -> dict[str, object]:
    """In this process: one warm-up round, then ``turns`` timed rounds of :data:`QUESTIONS` (medium effort), and
    the process's OS threads after them (Linux)."""
    engine = _engine(way)
    turn_ms, first_ms, per_pass, ids = [], [], [], []
    try:
        for round_ in range(turns + 1):
            ids = []
            for question in QUESTIONS:
                started = time.perf_counter()
                result = engine.generate([{"role": "user", "content": question}], max_new_tokens=48, effort="medium")
                elapsed = (time.perf_counter() - started) * 1e3
                ids.append(result.token_ids)
                if round_:
                    turn_ms.append(elapsed)
                    first_ms.append(result.first_block_ms or elapsed)
                    per_pass.append(elapsed / max(1, result.forward_passes))
        os_threads = len(os.listdir("/proc/self/task")) if os.path.isdir("/proc/self/task") else 0
    finally:
        engine.close()
    return {"turn_ms": statistics.median(turn_ms), "first_block_ms": statistics.median(first_ms),
            "ms_per_pass": statistics.median(per_pass), "os_threads": os_threads, "ids": ids}


def _in_fresh_process(way: str, turns: int, threads: int) -> dict[str, object]:
    out = subprocess.run([sys.executable, "-m", __name__, way, str(turns), str(threads)], capture_output=True,
                         text=True, timeout=600, check=False)  # fmt: skip
    if out.returncode:
        raise RuntimeError(f"the {way!r} process failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.splitlines()[-1])


def run(args: argparse.Namespace) -> int:
    samples: dict[str, list[dict[str, object]]] = {way: [] for way in WAYS}
    for _ in range(args.repeats):
        for way in WAYS:
            samples[way].append(_in_fresh_process(way, args.turns, args.threads))
    decoded = {json.dumps(s.pop("ids")) for runs in samples.values() for s in runs}
    if len(decoded) != 1:
        raise AssertionError("the two ways decoded different ids")
    figures = {way: {key: round(statistics.median(float(s[key]) for s in runs), 3) for key in runs[0]}
               for way, runs in samples.items()}  # fmt: skip
    ratio = round(figures[WAYS[1]]["turn_ms"] / figures[WAYS[0]]["turn_ms"], 3)
    print(f"demo checkpoint, float32 on CPU, {args.threads} torch threads, medians of {args.repeats} processes "
          f"x {args.turns} rounds of {len(QUESTIONS)} questions")
    for way, f in figures.items():
        print(f"{way:<20} turn {f['turn_ms']:7.2f} ms  first block {f['first_block_ms']:6.2f} ms  "
              f"{f['ms_per_pass']:.3f} ms per pass  {f['os_threads']:.0f} OS threads")
    print(f"built on the caller / on the worker, turn time: x{ratio}")
    if args.json:
        report = {"ways": figures, "caller_over_worker_turn": ratio, "threads": args.threads,
                  "repeats": args.repeats, "turns": args.turns, "questions": list(QUESTIONS)}
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":  # one way's process: ``python -m latency_bench.engine_thread_bench WAY TURNS THREADS``
    torch.set_num_threads(int(sys.argv[3]))
    print(json.dumps(measure(sys.argv[1], int(sys.argv[2]))))
