"""`python -m latency_bench api`: the OpenAI API under concurrent streaming clients, diffusion vs autoregressive.

One run starts the server in-process on 127.0.0.1 and mounts the same engine twice: as `dlm` with its
default block-diffusion decoding (parallel commits by the default effort's rule), and as `dlm-ar` with
`passes_per_block = block_size`, i.e. exactly one token committed per forward pass — the autoregressive
cost on the same weights, the baseline. (1-token blocks would be left-to-right too, but the engine then pays
a second pass per token to store each token's KV, which a real AR model does not; one token per pass inside
normal blocks pays that commit pass once per block.) At each concurrency level
every client sends the same list of chat requests one after another with `stream=True` through the official
`openai` async client, and the bench reports time to first content chunk and per-request decode speed
(completion tokens / request time: its median and its slow tail, the 5th percentile that 95% of requests
beat), plus aggregate tokens/s across clients.

Client and server share one process (and its GIL); torch releases the GIL in its kernels, so the figures
are close to, not equal to, those of a separate client machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from dataclasses import asdict, dataclass

from dlm.cli import DEMO_CHECKPOINT
from dlm.cli_args import ArgumentParser, at_least_one, at_least_one_each, checkpoint, output_path

PROMPTS = [
    "What is the capital of France?",
    "Give me one tip for sleeping better.",
    "How many legs does a spider have?",
    "Say hello in Spanish.",
    "What is two plus three?",
    "Name a primary colour.",
]


@dataclass
class RequestTiming:
    first_chunk_ms: float
    total_ms: float
    completion_tokens: int

    @property
    def tokens_per_s(self) -> float:
        return 1000 * self.completion_tokens / self.total_ms if self.total_ms else 0.0


@dataclass
class LevelResult:
    mode: str  # diffusion or autoregressive
    clients: int
    requests: int
    ttfc_p50_ms: float
    ttfc_p95_ms: float
    tok_s_p50: float
    tok_s_p5: float  # the slow tail: 95% of requests decode faster
    aggregate_tok_s: float
    wall_s: float


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    return statistics.quantiles(ordered, n=100, method="inclusive")[int(q) - 1]


async def _one_request(client, model: str, prompt: str, max_tokens: int) -> RequestTiming:
    start = time.perf_counter()
    first = None
    tokens = 0
    stream = await client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": prompt}], max_tokens=max_tokens, temperature=0,
        stream=True, stream_options={"include_usage": True},
    )
    async for chunk in stream:
        if first is None and chunk.choices and chunk.choices[0].delta.content:
            first = time.perf_counter()
        if chunk.usage is not None:
            tokens = chunk.usage.completion_tokens
    end = time.perf_counter()
    return RequestTiming(1000 * ((first or end) - start), 1000 * (end - start), tokens)


async def run_level(base_url: str, model: str, clients: int, rounds: int, max_tokens: int) -> tuple[list, float]:
    import openai

    client = openai.AsyncOpenAI(base_url=base_url, api_key="bench", max_retries=0, timeout=600)

    async def worker(offset: int) -> list[RequestTiming]:
        return [await _one_request(client, model, PROMPTS[(offset + i) % len(PROMPTS)], max_tokens)
                for i in range(rounds)]

    start = time.perf_counter()
    per_client = await asyncio.gather(*(worker(c) for c in range(clients)))
    wall = time.perf_counter() - start
    await client.close()
    return [t for timings in per_client for t in timings], wall


def summarise(mode: str, clients: int, timings: list[RequestTiming], wall: float) -> LevelResult:
    ttfc = [t.first_chunk_ms for t in timings]
    speed = [t.tokens_per_s for t in timings]
    return LevelResult(mode, clients, len(timings), percentile(ttfc, 50), percentile(ttfc, 95),
                       percentile(speed, 50), percentile(speed, 5),
                       sum(t.completion_tokens for t in timings) / wall, wall)


def add_arguments(p: argparse.ArgumentParser) -> None:
    from dlm.checkpoint import DTYPES

    p.add_argument("--model", type=checkpoint, default=str(DEMO_CHECKPOINT), help="checkpoint dir (default: the demo)")
    p.add_argument("--clients", type=at_least_one_each, default="1,4,16", help="comma-separated concurrency levels")
    p.add_argument("--rounds", type=at_least_one, default=3, help="requests per client at each level")
    p.add_argument("--max-tokens", type=at_least_one, default=48)
    p.add_argument("--dtype", choices=tuple(DTYPES), default="float32")
    p.add_argument("--json", type=output_path, help="write the results here")


def run(args: argparse.Namespace) -> int:
    levels = args.clients

    import torch
    from aiohttp import web

    from dlm.api.limits import ApiLimits
    from dlm.api.live_server import LiveServer
    from dlm.api.server import add_openai_routes
    from dlm.engine import Engine

    torch.set_num_threads(1)
    engine = Engine.from_dir(args.model, args.dtype)
    limits = ApiLimits(max_concurrent=max(levels))
    one_per_pass = {"passes_per_block": engine.model.cfg.block_size}
    modes = {"diffusion": ("dlm", {}), "autoregressive": ("dlm-ar", one_per_pass)}
    servers = {}
    for mode, (name, decoding) in modes.items():
        app = web.Application()
        add_openai_routes(app, engine, name, limits, decode_opts=decoding)
        servers[mode] = LiveServer(app)
    results = []
    try:
        for clients in levels:
            for mode, (name, _) in modes.items():
                base = servers[mode].url + "/v1"
                asyncio.run(run_level(base, name, 1, 1, args.max_tokens))  # warm-up
                timings, wall = asyncio.run(run_level(base, name, clients, args.rounds, args.max_tokens))
                results.append(summarise(mode, clients, timings, wall))
                _print_row(results[-1])
    finally:
        for server in servers.values():
            server.close()
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"model": str(args.model), "max_tokens": args.max_tokens,
                                         "rounds": args.rounds, "results": [asdict(r) for r in results]},
                                        indent=2) + "\n")
    return 0


def _print_row(r: LevelResult) -> None:
    print(f"{r.mode:>14} clients={r.clients:<3} n={r.requests:<3} first chunk p50 {r.ttfc_p50_ms:7.1f} ms "
          f"p95 {r.ttfc_p95_ms:7.1f} ms | per-request tok/s p50 {r.tok_s_p50:7.1f} p5 {r.tok_s_p5:7.1f} | "
          f"aggregate {r.aggregate_tok_s:7.1f} tok/s", flush=True)


if __name__ == "__main__":
    parser = ArgumentParser(prog="python -m latency_bench api", description=__doc__.splitlines()[0])
    add_arguments(parser)
    raise SystemExit(run(parser.parse_args()))
