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
from pathlib import Path

import torch
import torch.nn.functional as F
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import models

from dlm.config import ModelConfig
from dlm.decoding.prefill import prefill_blocks
from dlm.decoding.schedule import transfer_counts
from dlm.engine import Engine
from dlm.kv_cache import KVCache
from dlm.model import Transformer
from dlm.tokenizer import Tokenizer


@dataclass(frozen=True)
class Shape:
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int


SHAPES = {
    "tiny": Shape(64, 2, 4, 2, 16, 128, 512),  # for tests
    "cpu-small": Shape(512, 8, 8, 4, 64, 1536, 32768),  # the default: affordable on a 2-core CPU
    "qwen3-0.6b": Shape(1024, 28, 16, 8, 128, 3072, 151936),
    "sdar-1.7b": Shape(2048, 28, 16, 8, 128, 6144, 151936),
}


@dataclass
class Row:
    prompt_length: int
    method: str
    first_block_ms: float
    cold_first_block_ms: float
    tokens_per_s: float
    first_text_ms: float | None = None


def random_engine(shape: Shape, block_size: int, ctx: int, dtype: torch.dtype, device: str, seed: int = 0) -> Engine:
    """An SDAR-layout model with random weights and a stand-in tokenizer (one token per id)."""
    cfg = ModelConfig(
        model_type="sdar", vocab_size=shape.vocab, hidden_size=shape.hidden, num_layers=shape.layers,
        num_heads=shape.heads, num_kv_heads=shape.kv_heads, head_dim=shape.head_dim,
        intermediate_size=shape.intermediate, rope_theta=1e6, rms_norm_eps=1e-6, qkv_bias=False, qk_norm=True,
        tie_word_embeddings=True, mask_token_id=shape.vocab - 1, block_size=block_size, token_shift=False,
        bidirectional=False, max_position_embeddings=ctx,
    )
    torch.manual_seed(seed)
    model = Transformer(cfg).to(device=device, dtype=dtype)
    backend = HFTokenizer(models.WordLevel({f"t{i}": i for i in range(shape.vocab)}, unk_token="t0"))
    return Engine(model, Tokenizer(backend=backend, template=None), device)


def _ms(fn: Callable[[], object]) -> float:
    t = time.perf_counter()
    fn()
    return (time.perf_counter() - t) * 1000


def _median(values: list[float]) -> float:
    return round(statistics.median(values), 2)


def bench_engine(engine: Engine, prompt: list[int], gen: int, block: int, passes: int, repeats: int
                 ) -> tuple[Row, dict[str, float]]:
    opts = dict(max_new_tokens=gen, passes_per_block=passes, block_size=block)
    warm, cold, text, rates = [], [], [], []
    session = engine.new_session(capacity=len(prompt) + gen + 4 * block)
    session.prefill(prompt)
    engine.generate(prompt, session=session, **opts)  # warm-up
    for _ in range(repeats):
        r = engine.generate(prompt, session=session, **opts)  # the prompt's blocks are already cached
        warm.append(r.first_block_ms)
        text.append(r.first_text_ms or r.first_block_ms)
        rates.append(len(r.token_ids) / r.total_ms * 1000)
        fresh = engine.new_session(capacity=len(prompt) + gen + 4 * block)
        cold.append(engine.generate(prompt, session=fresh, **opts).first_block_ms)
    row = Row(len(prompt), "engine", _median(warm), _median(cold), _median(rates), _median(text))
    schedules = {}
    for name, first in (("fixed", None), ("first_block_4", 4)):
        runs = [engine.generate(prompt, session=session, first_block_size=first, **opts) for _ in range(repeats)]
        schedules[name] = _median([r.first_text_ms or r.first_block_ms for r in runs])
    return row, schedules


def bench_ar(model: Transformer, prompt: list[int], gen: int, first: int, repeats: int) -> Row:
    """Greedy one-token-per-pass decoding with a causal KV cache."""
    cfg, device = model.cfg, model.output_weight().device
    cache = KVCache(cfg, len(prompt) + gen + 1, dtype=model.output_weight().dtype, device=device)
    ids = torch.tensor(prompt, device=device)

    def prefill() -> torch.Tensor:
        cache.truncate(0)
        return prefill_blocks(model, cache, ids, block_size=1)  # blocks of one token = causal

    def decode(last: torch.Tensor, n: int) -> None:
        cache.truncate(len(prompt))
        cache.store = True
        for _ in range(n - 1):  # the first token comes from the prompt's last logit
            hidden = model.hidden_states(last.argmax().view(1, 1), cache=cache)
            cache.commit(1)
            last = F.linear(hidden[0, -1], model.output_weight())
        cache.store = False

    with torch.no_grad():
        last = prefill()
        decode(last, first)  # warm-up
        warm = [_ms(lambda: decode(last, first)) for _ in range(repeats)]
        cold = [_ms(lambda: decode(prefill(), first)) for _ in range(repeats)]
        rate = [gen / _ms(lambda: decode(last, gen)) * 1000 for _ in range(repeats)]
    return Row(len(prompt), "ar", _median(warm), _median(cold), _median(rate))


def bench_vanilla(model: Transformer, prompt: list[int], gen: int, block: int, passes: int, repeats: int,
                  canvas_tokens: int) -> Row:
    """Full-canvas diffusion: prompt + a fixed canvas of masks, full attention, every pass over all, no cache."""
    cfg, device = model.cfg, model.output_weight().device
    canvas = torch.tensor(prompt + [cfg.mask_token_id] * max(canvas_tokens, gen), device=device)

    def run(n_blocks: int) -> None:
        x = canvas.clone()
        for b in range(n_blocks):
            start = len(prompt) + b * block
            for share in transfer_counts(block, passes):
                hidden = model.hidden_states(x[None])[0, start:start + block]  # full attention, no cache
                logits = F.linear(hidden, model.output_weight())
                conf, tok = torch.softmax(logits.float(), -1).max(-1)
                masked = x[start:start + block] == cfg.mask_token_id
                pick = torch.where(masked, conf, torch.full_like(conf, -1.0)).topk(share).indices
                x[start + pick] = tok[pick]

    with torch.no_grad():
        run(1)  # warm-up
        first = [_ms(lambda: run(1)) for _ in range(repeats)]
        rate = [gen / _ms(lambda: run(gen // block)) * 1000 for _ in range(max(1, repeats // 2))]
    return Row(len(prompt), "vanilla", _median(first), _median(first), _median(rate))


def run_bench(shape_name: str, prompt_lengths: list[int], block: int = 8, passes: int = 2, gen: int = 32,
              repeats: int = 5, dtype: str = "float32", device: str = "cpu", canvas: int = 128) -> dict:
    shape = SHAPES[shape_name]
    torch_dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]
    engine = random_engine(shape, block, max(prompt_lengths) + gen + 8 * block, torch_dtype, device)
    rows, schedules = [], {}
    gen_ids = torch.Generator().manual_seed(1)
    try:
        for length in prompt_lengths:
            prompt = torch.randint(0, shape.vocab - 1, (length,), generator=gen_ids).tolist()
            row, schedules[str(length)] = bench_engine(engine, prompt, gen, block, passes, repeats)
            rows += [row, bench_ar(engine.model, prompt, gen, block, repeats),
                     bench_vanilla(engine.model, prompt, gen, block, passes, repeats, canvas)]
    finally:
        engine.close()
    return {
        "shape": shape_name, "shape_dims": asdict(shape), "block_size": block, "passes_per_block": passes,
        "gen_tokens": gen, "vanilla_canvas_tokens": max(canvas, gen), "repeats": repeats, "dtype": dtype, "device": device, "threads": torch.get_num_threads(),
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
        lines.append(f"prompt {length}: first text ms, fixed blocks {s['fixed']} vs first block 4: {s['first_block_4']}")
    return "\n".join(lines)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--shape", choices=sorted(SHAPES), default="cpu-small")
    p.add_argument("--prompt-lengths", default="64,512,2048", help="comma-separated")
    p.add_argument("--block-size", type=int, default=8)
    p.add_argument("--passes-per-block", type=int, default=2)
    p.add_argument("--gen-tokens", type=int, default=32)
    p.add_argument("--vanilla-canvas", type=int, default=128, help="answer canvas of vanilla diffusion (LLaDA's default)")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    p.add_argument("--json", dest="json_out", default=None, help="write the report here")


def run(args: argparse.Namespace) -> int:
    if args.threads:
        torch.set_num_threads(args.threads)
    lengths = [int(x) for x in args.prompt_lengths.split(",") if x.strip()]
    if args.gen_tokens % args.block_size:
        raise SystemExit("--gen-tokens must be a multiple of --block-size")
    report = run_bench(args.shape, lengths, args.block_size, args.passes_per_block, args.gen_tokens, args.repeats,
                       args.dtype, args.device, args.vanilla_canvas)
    print(format_table(report))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(report, indent=2) + "\n")
    return 0
