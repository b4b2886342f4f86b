"""What the replies' copy bias (`dlm.decoding.logit_bias`) costs: the same replies decoded bare and biased.

The bias adds a little Python to every pass (a lookup of the committed neighbours per row, an argmax per
biased row). Held-out replies after a tool's result are decoded both ways by the demo checkpoint at the
default effort, taking turns reply by reply so a noisy machine slows both alike; the figure that isolates
the bias is the time per forward pass, since a biased reply can be longer or shorter than the bare one.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from dlm.cli import DEMO_CHECKPOINT
from dlm.cli_args import at_least_one, checkpoint, output_path
from dlm.engine import Engine
from dlm.eval import MAX_NEW_TOKENS
from dlm.train.data import generate


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", type=checkpoint, default=str(DEMO_CHECKPOINT), help="checkpoint directory (default: the demo)")
    parser.add_argument("--replies", type=at_least_one, default=40, help="held-out replies after a tool result")
    parser.add_argument("--repeats", type=at_least_one, default=3, help="times each reply is decoded each way")
    parser.add_argument("--threads", type=at_least_one, default=2)
    parser.add_argument("--json", type=output_path, help="also write the figures here")


def run(args: argparse.Namespace) -> int:
    torch.set_num_threads(args.threads)
    engine = Engine.from_dir(args.model)
    room = engine.context_room() - MAX_NEW_TOKENS
    dialogues = [e for e in generate("heldout", 4 * args.replies, seed=5)
                 if e.call and len(engine.prompt_ids(e.messages[:-1], e.tools)) <= room][: args.replies]
    per_pass: dict[str, list[float]] = {"bare": [], "biased": []}
    passes = dict.fromkeys(per_pass, 0)
    tokens = dict.fromkeys(per_pass, 0)
    for example in dialogues:
        history = example.messages[:-1]  # up to the tool's result
        ways = {"bare": None, "biased": engine.copy_bias(history)}
        for _ in range(args.repeats):
            for way, bias in ways.items():
                started = time.perf_counter()
                result = engine.generate(history, tools=example.tools, bias=bias, max_new_tokens=MAX_NEW_TOKENS)
                per_pass[way].append(1000 * (time.perf_counter() - started) / result.forward_passes)
                passes[way] += result.forward_passes
                tokens[way] += len(result.token_ids)
    figures = {way: {"ms_per_pass_p50": statistics.median(v), "tokens_per_pass": tokens[way] / passes[way]}
               for way, v in per_pass.items()}
    ratio = figures["biased"]["ms_per_pass_p50"] / figures["bare"]["ms_per_pass_p50"]
    print(f"{len(dialogues)} replies x {args.repeats}, demo effort medium")
    for way, f in figures.items():
        print(f"{way:<8} {f['ms_per_pass_p50']:6.2f} ms per pass (p50)  {f['tokens_per_pass']:.2f} tokens per pass")
    print(f"biased / bare time per pass: x{ratio:.3f}")
    if args.json:
        args.json.write_text(json.dumps({**figures, "ratio": ratio, "replies": len(dialogues),
                                         "repeats": args.repeats}, indent=2) + "\n")
    return 0
