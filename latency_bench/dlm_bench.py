"""``python -m latency_bench dlm``: first-block latency and tokens/s of the engine vs AR vs vanilla diffusion.

On random weights of a named shape, all in one run:
- engine   this engine's block-causal decoding (exact KV cache, block window, fixed passes per block);
- ar       the same weights decoded autoregressively, one token per pass, with a KV cache;
- vanilla  full-canvas masked diffusion without a cache (every pass runs prompt + a fixed answer canvas,
           128 tokens by default as LLaDA's sampler uses).
Random weights have meaningless confidences, so every diffusion method uses a FIXED pass count per block.

``first_block_ms`` is the median time from a prompt already in the cache (as the voice pipeline has it,
having prefilled while the person spoke) to the first block (for ar: to as many tokens; vanilla has no
cache, so its whole first block); ``cold_first_block_ms`` includes the prefill.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path

import torch
import torch.nn.functional as F
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import models

from dlm.cli_args import at_least_one, at_least_one_each, output_path, present_device
from dlm.decoding.prefill import prefill_blocks
from dlm.decoding.schedule import transfer_counts
from dlm.engine import Engine
from dlm.kv_cache import KVCache
from dlm.model import Transformer
from dlm.tokenizer import Tokenizer
from latency_bench.gpu_engine import engine_model
from latency_bench.gpu_shapes import SHAPES, Shape


@dataclass
class Row:
    prompt_length: int
    method: str
    first_block_ms: float
    cold_first_block_ms: float
    tokens_per_s: float
    first_text_ms: float | None = None


def random_engine(shape: Shape, block_size: int, ctx: int, dtype: torch.dtype, device: str) -> Engine:
    """The engine's SDAR model at ``shape``, random weights, with a stand-in tokenizer (one token per id), built on
    the engine's worker (see ``Engine.build``: the baselines run there too)."""
    backend = HFTokenizer(models.WordLevel({f"t{i}": i for i in range(shape.vocab)}, unk_token="t0"))

    def make() -> tuple[Transformer, Tokenizer]:
        model = engine_model(shape, ctx, torch.device(device), dtype, block_size=block_size)
        return model, Tokenizer(backend=backend, template=None)
    return Engine.build(make, device=device)


def elapsed_ms(fn: Callable[[], object]) -> float:
    """Wall time of ``fn()``, in milliseconds."""
    t = time.perf_counter()
    fn()
    return (time.perf_counter() - t) * 1000


def _median(values: list[float]) -> float:
    return round(statistics.median(values), 2)


Sample = dict[str, float]  # one measurement of a method: first_block_ms, cold_first_block_ms, tokens_per_s, ...


def small_first_block(block: int) -> int:
    """The first block the schedule comparison tries: half the block, but a token at least (a block of 1 had
    asked the engine for a first block of 0)."""
    return max(1, block // 2)


def engine_sampler(engine: Engine, prompt: list[int], gen: int, block: int, passes: int
                   ) -> Callable[[], Sample]:
    opts = dict(max_new_tokens=gen, passes_per_block=passes, block_size=block)
    capacity = len(prompt) + gen + 4 * block
    session = engine.new_session(capacity=capacity)
    session.prefill(prompt)
    engine.generate(prompt, session=session, **opts)  # warm-up

    def sample() -> Sample:
        warm = engine.generate(prompt, session=session, **opts)  # the prompt's blocks are already cached
        small = engine.generate(prompt, session=session, first_block_size=small_first_block(block), **opts)
        cold = engine.generate(prompt, session=engine.new_session(capacity=capacity), **opts)
        return {"first_block_ms": warm.first_block_ms, "cold_first_block_ms": cold.first_block_ms,
                "tokens_per_s": len(warm.token_ids) / warm.total_ms * 1000,
                "first_text_ms": warm.first_text_ms or warm.first_block_ms,
                "first_text_ms_small_first_block": small.first_text_ms or small.first_block_ms}
    return sample


def ar_sampler(model: Transformer, prompt: list[int], gen: int, first: int) -> Callable[[], Sample]:
    """Greedy one-token-per-pass decoding with a causal KV cache; the first token comes from the prompt's
    last logit, so ``first`` tokens take ``first - 1`` passes once the prompt is cached."""
    cfg, device = model.cfg, model.output_weight().device
    cache = KVCache(cfg, len(prompt) + gen + 1, dtype=model.output_weight().dtype, device=device)
    ids = torch.tensor(prompt, device=device)

    def prefill() -> torch.Tensor:
        cache.truncate(0)
        return prefill_blocks(model, cache, ids, block_size=1)  # blocks of one token = causal

    def decode(last: torch.Tensor, n: int) -> None:
        cache.truncate(len(prompt))
        cache.store = True
        for _ in range(n - 1):
            hidden = model.hidden_states(last.argmax().view(1, 1), cache=cache)
            cache.commit(1)
            last = F.linear(hidden[0, -1], model.output_weight())
        cache.store = False

    with torch.no_grad():
        last = prefill()
        decode(last, first)  # warm-up

    @torch.no_grad()
    def sample() -> Sample:
        return {"first_block_ms": elapsed_ms(lambda: decode(last, first)),
                "cold_first_block_ms": elapsed_ms(lambda: decode(prefill(), first)),
                "tokens_per_s": gen / elapsed_ms(lambda: decode(last, gen)) * 1000}
    return sample


def vanilla_sampler(model: Transformer, prompt: list[int], block: int, passes: int, canvas_tokens: int
                    ) -> Callable[[], Sample]:
    """Full-canvas diffusion: prompt + a fixed canvas of masks, full attention, every pass over all, no cache.
    Every block costs the same, so tokens/s follows from the first block's time."""
    cfg, device = model.cfg, model.output_weight().device
    canvas = torch.tensor(prompt + [cfg.mask_token_id] * canvas_tokens, device=device)

    def first_block() -> None:
        x = canvas.clone()
        start = len(prompt)
        for share in transfer_counts(block, passes):
            hidden = model.hidden_states(x[None])[0, start:start + block]  # full attention, no cache
            conf, tok = torch.softmax(F.linear(hidden, model.output_weight()).float(), -1).max(-1)
            masked = x[start:start + block] == cfg.mask_token_id
            pick = torch.where(masked, conf, torch.full_like(conf, -1.0)).topk(share).indices
            x[start + pick] = tok[pick]

    with torch.no_grad():
        first_block()  # warm-up

    @torch.no_grad()
    def sample() -> Sample:
        ms = elapsed_ms(first_block)
        return {"first_block_ms": ms, "cold_first_block_ms": ms, "tokens_per_s": block / ms * 1000}
    return sample


def run_bench(shape_name: str, prompt_lengths: list[int], block: int = 8, passes: int = 2, gen: int = 32,
              repeats: int = 5, dtype: str = "float32", device: str = "cpu", canvas: int = 128) -> dict:
    """Methods are measured round-robin, one sample each per repeat, so load from elsewhere on the machine
    hits all of them alike; every figure is a median."""
    shape = SHAPES[shape_name]
    torch_dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]
    canvas = max(canvas, gen)
    engine = random_engine(shape, block, max(prompt_lengths) + canvas + 8 * block, torch_dtype, device)
    rows, schedules = [], {}
    gen_ids = torch.Generator().manual_seed(1)
    try:
        for length in prompt_lengths:
            prompt = torch.randint(0, shape.vocab - 1, (length,), generator=gen_ids).tolist()
            # the baselines are set up and sampled on the engine's worker too: one thread runs all torch work
            # (``Engine.build``)
            ar = engine.run_on_worker(ar_sampler, engine.model, prompt, gen, block)
            vanilla = engine.run_on_worker(vanilla_sampler, engine.model, prompt, block, passes, canvas)
            samplers = {"engine": engine_sampler(engine, prompt, gen, block, passes),
                        "ar": partial(engine.run_on_worker, ar), "vanilla": partial(engine.run_on_worker, vanilla)}
            samples: dict[str, list[Sample]] = {name: [] for name in samplers}
            for _ in range(repeats):
                for name, sample in samplers.items():
                    samples[name].append(sample())
            for name, got in samples.items():
                med = {k: _median([g[k] for g in got]) for k in got[0]}
                rows.append(Row(length, name, med["first_block_ms"], med["cold_first_block_ms"],
                                med["tokens_per_s"], med.get("first_text_ms")))
                if name == "engine":
                    schedules[str(length)] = {"fixed": med["first_text_ms"],
                                              f"first_block_{small_first_block(block)}": med["first_text_ms_small_first_block"]}
    finally:
        engine.close()
    return {
        "shape": shape_name, "shape_dims": asdict(shape), "block_size": block, "passes_per_block": passes,
        "gen_tokens": gen, "vanilla_canvas_tokens": canvas, "repeats": repeats, "dtype": dtype, "device": device,
        "threads": torch.get_num_threads(),
        "note": f"random weights: fixed {passes} passes per block of {block} (confidences are meaningless)",
        "rows": [asdict(r) for r in rows], "ratios": _ratios(rows),
        "first_text_ms_by_schedule": schedules,
    }


def _ratios(rows: list[Row]) -> list[dict]:
    out = []
    for length in sorted({r.prompt_length for r in rows}):
        by = {r.method: r for r in rows if r.prompt_length == length}
        e = by["engine"]
        out.append({
            "prompt_length": length,
            "ar_over_engine_first_block": round(by["ar"].first_block_ms / e.first_block_ms, 2),
            "vanilla_over_engine_first_block": round(by["vanilla"].first_block_ms / e.first_block_ms, 2),
            "ar_over_engine_cold": round(by["ar"].cold_first_block_ms / e.cold_first_block_ms, 2),
            "vanilla_over_engine_cold": round(by["vanilla"].cold_first_block_ms / e.cold_first_block_ms, 2),
        })
    return out


def format_table(report: dict) -> str:
    lines = [report["note"], f"shape {report['shape']}, {report['gen_tokens']} generated tokens, "
             f"{report['dtype']} on {report['device']} ({report['threads']} threads), median of {report['repeats']}; "
             f"vanilla canvas {report['vanilla_canvas_tokens']} tokens",
             f"{'prompt':>6} {'method':>8} {'first_block_ms':>15} {'cold_first_block_ms':>20} {'tokens/s':>9}"]
    for r in report["rows"]:
        lines.append(f"{r['prompt_length']:>6} {r['method']:>8} {r['first_block_ms']:>15.1f} "
                     f"{r['cold_first_block_ms']:>20.1f} {r['tokens_per_s']:>9.1f}")
    for q in report["ratios"]:
        lines.append(f"prompt {q['prompt_length']}: first block {q['ar_over_engine_first_block']}x sooner than ar, "
                     f"{q['vanilla_over_engine_first_block']}x sooner than vanilla (cold: "
                     f"{q['ar_over_engine_cold']}x, {q['vanilla_over_engine_cold']}x)")
    for length, s in report["first_text_ms_by_schedule"].items():
        small = next(k for k in s if k != "fixed")
        lines.append(f"prompt {length}: first text ms, fixed blocks {s['fixed']} vs {small}: {s[small]}")
    return "\n".join(lines)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--shape", choices=sorted(SHAPES), default="cpu-small")
    p.add_argument("--prompt-lengths", type=at_least_one_each, default="64,512,2048", help="comma-separated")
    p.add_argument("--block-size", type=at_least_one, default=8)
    p.add_argument("--passes-per-block", type=at_least_one, default=2)
    p.add_argument("--gen-tokens", type=at_least_one, default=32)
    p.add_argument("--vanilla-canvas", type=at_least_one, default=128, help="answer canvas of vanilla diffusion (LLaDA's default)")
    p.add_argument("--repeats", type=at_least_one, default=5)
    p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    p.add_argument("--device", type=present_device, default="cpu", help="cpu, cuda, cuda:N or auto")
    p.add_argument("--threads", type=at_least_one, default=None, help="torch threads (default: torch's)")
    p.add_argument("--json", dest="json_out", type=output_path, default=None, help="write the report here")


def run(args: argparse.Namespace) -> int:
    if args.threads:
        torch.set_num_threads(args.threads)
    lengths = args.prompt_lengths
    if args.gen_tokens % args.block_size:
        raise SystemExit("--gen-tokens must be a multiple of --block-size")
    report = run_bench(args.shape, lengths, args.block_size, args.passes_per_block, args.gen_tokens, args.repeats,
                       args.dtype, args.device, args.vanilla_canvas)
    print(format_table(report))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(report, indent=2) + "\n")
    return 0
