"""The GPU check's tuning sweep: the Triton kernels' launch parameters, timed as a graphed pass runs them.

The kernels pick their tile sizes and vocabulary / cache splits from the device's SM count; this section
times the alternatives around those defaults on the issue's shapes, so a default is a measured choice and a
new GPU shows at once whether it wants another. Rows name the parameters; ``auto`` is what the engine uses.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from functools import partial

import torch

from latency_bench.gpu_shapes import Shape
from latency_bench.kernels_timing import time_graphed_ms, time_ms


def _device_ms(fn: Callable[[], object], device: torch.device) -> float:
    """Graphed time on a GPU; plain wall time off it (the dry run only checks that every variant runs)."""
    graphed = time_graphed_ms(fn, device)
    return graphed if graphed is not None else time_ms(fn, device, 1, 1)


def mark_best(rows: list[dict[str, object]]) -> list[dict[str, object]]:
    """Flag the fastest variant of each shape, and how the default compares with it."""
    for shape in {r["shape"] for r in rows}:
        group = [r for r in rows if r["shape"] == shape]
        best = min(group, key=lambda r: float(r["ms"]))
        auto = next((r for r in group if r["params"].startswith("auto")), best)
        for r in group:
            r["best"] = r is best
            r["auto_over_best"] = round(float(auto["ms"]) / float(best["ms"]), 2)
    return rows


def confidence_sweep(device: torch.device, vocab: int, batches: tuple[int, ...]) -> list[dict[str, object]]:
    """Fused confidence selection: vocabulary tile width x vocabulary splits per row x the streaming stage's
    reductions per tile (three, the default; one with per-lane sums, `lanewise`; none with per-lane maxima too,
    `lanewise max`), and for the per-lane loops at the middle widths, software-pipelined (`stages=3`: two tiles'
    loads in flight ahead of the one worked on); at the default width, the lanewise loop with its registers capped
    (`max_registers`)."""
    from kernels.confidence_triton import confidence_select

    widths = (512, 1024) if device.type == "cpu" else (1024, 2048, 4096, 8192)
    accumulations = ({"lanewise": False}, {"lanewise": True}, {"lanewise": True, "lane_max": True})
    variants = [{"block_v": width, "splits": splits} | accumulation
                for width, splits, accumulation in itertools.product(widths, (1, 4, 16, None), accumulations)]
    variants += [{"block_v": width, "splits": splits, "stages": 3} | accumulation
                 for width, splits, accumulation in itertools.product(widths[:3], (4, 16, None), accumulations[1:])]
    # the lanewise loop's registers capped, so an SM holds 5 or 6 of its programs instead of 4 (kernels_compile)
    variants += [{"lanewise": True, "max_registers": cap} | pipelined  # at the default width and splits
                 for cap, pipelined in itertools.product((48, 40), ({}, {"stages": 3}))]
    rows = []
    for batch in batches:  # every variant again for each batch
        logits = torch.randn(batch, 16, vocab, device=device).to(torch.bfloat16)
        masked = torch.ones(batch, 16, dtype=torch.bool, device=device)
        for options in [{}, *variants]:
            run = partial(confidence_select, logits, masked, None, 0.0, 0.0, None, **options)
            rows.append({"kernel": "confidence", "shape": f"{batch}x16x{vocab}", "params": _confidence_params(options),
                         "ms": round(_device_ms(run, device), 4)})  # fmt: skip
    return mark_best(rows)


def _confidence_params(options: dict[str, object]) -> str:
    """A sweep row's ``params``: ``auto`` for the defaults, else the tile, the splits and the streaming options."""
    if not options:
        return "auto"
    params = f"block_v={options.get('block_v', 'auto')} splits={options.get('splits') or 'auto'}"
    params += " lanewise" * options["lanewise"] + " max" * options.get("lane_max", False)
    params += f" stages={options['stages']}" if "stages" in options else ""
    return params + (f" max_registers={options['max_registers']}" if "max_registers" in options else "")


def block_attention_sweep(device: torch.device, heads: int, kv_heads: int, head_dim: int,
                          caches: tuple[int, ...], batches: tuple[int, ...]) -> list[dict[str, object]]:  # fmt: skip
    """Block attention over the cache: key tile x cache splits (flash-decoding), and the last split merging the
    partials (one launch, as the thin layer runs it) against a second launch merging them, at the default tile
    and splits and at finer splits than the default's (chunks under four key tiles: what a short cache may
    want). A row names the splits that ran (an ask is capped at one a key tile)."""
    from kernels.attention_triton import block_attention, plan_splits

    tiles = [{"block_n": block_n, "splits": splits}
             for block_n, splits in itertools.product((32, 64, 128), (4, 16, 64, None))]  # fmt: skip
    variants = [{}, {"one_launch": True}, *tiles, *({"block_n": 32, "splits": s, "one_launch": True} for s in (16, 64))]
    rows = []
    for batch, cap in itertools.product(batches, caches):
        q = torch.randn(batch, 16, heads, head_dim, device=device, dtype=torch.bfloat16)
        k = torch.randn(batch, cap, kv_heads, head_dim, device=device, dtype=torch.bfloat16)
        v = torch.randn_like(k)
        lengths = torch.full((batch,), cap, dtype=torch.int32, device=device)
        timed = set()
        for options in variants:
            _, block_n, chunk = plan_splits(q, k, options.get("splits"), options.get("block_n"))
            params = _attention_params(options, block_n, math.ceil(cap / chunk))
            if params in timed:  # an ask capped to one already timed
                continue
            timed.add(params)
            run = partial(block_attention, q, k, v, lengths, None, None, head_dim**-0.5, **options)
            rows.append({"kernel": "block_attention", "shape": f"B{batch} 16q over {cap} keys", "params": params,
                         "ms": round(_device_ms(run, device), 4)})  # fmt: skip
    return mark_best(rows)


def _attention_params(options: dict[str, object], block_n: int, splits: int) -> str:
    """A sweep row's ``params``: ``auto`` for the default tile and splits, else the tile and the splits run."""
    params = "auto" if "block_n" not in options else f"block_n={block_n} splits={splits}"
    if options.get("splits") is None and "block_n" in options:
        params += " (auto)"
    return params + ", one launch" * options.get("one_launch", False)


def block_causal_sweep(device: torch.device, heads: int, kv_heads: int, head_dim: int, tokens: int
                       ) -> list[dict[str, object]]:  # fmt: skip
    """The block-causal prefill of a ``tokens``-long prompt (blocks of 16), never tuned before: at 4K tokens it ran
    at 181 TFLOP/s on an H200 where token-causal flash SDPA, the same work, ran at 459 (``_run7``). Row tile x key
    tile x the key tiles in flight, with the row tiles in order or the heaviest (the last rows, which see the most
    keys) first. Compiled for sm_90, a 128-row tile issues about half the instructions a row that a 64-row one
    does (556 against 524 a loop for twice the rows: ``python -m latency_bench.kernels_compile``)."""
    from kernels.attention_triton import block_causal_attention

    q = torch.randn(1, tokens, heads, head_dim, device=device, dtype=torch.bfloat16)
    k, v = (torch.randn(1, tokens, kv_heads, head_dim, device=device, dtype=torch.bfloat16) for _ in range(2))
    # (block_m, block_n, stages): 128 x 128 only at 2 stages (3 take 224 KiB and spill registers)
    tiles = [(16, 16, 2)] if device.type == "cpu" else [(64, 64, 2), (64, 64, 3), (128, 64, 2), (128, 64, 3),
                                                        (128, 128, 2)]  # fmt: skip
    variants = [{}, *({"block_m": m, "block_n": n, "stages": stages, "heavy_first": first}
                      for (m, n, stages), first in itertools.product(tiles, (False, True))
                      if (m, n, stages, first) != (64, 64, 3, False) or device.type == "cpu")]  # that one: auto on CUDA
    rows = []
    for options in variants:
        params = "auto" if not options else "block_m={block_m} block_n={block_n} stages={stages}".format(**options)
        params += ", heavy first" * options.get("heavy_first", False)
        run = partial(block_causal_attention, q, k, v, 16, 0, head_dim**-0.5, **options)
        rows.append({"kernel": "block_causal_attention", "shape": f"{tokens} tokens, block 16", "params": params,
                     "ms": round(_device_ms(run, device), 4)})  # fmt: skip
    return mark_best(rows)


def thin_linear_sweep(device: torch.device, shape: Shape) -> list[dict[str, object]]:
    """The thin matrix product against cuBLAS (``auto``: what a pass runs today) on a block's 16 rows, for each
    of a layer's four products and the LM head: weight tile x K tile x K splits."""
    from kernels.linear import linear

    s = shape
    products = {"qkv": ((s.heads + 2 * s.kv_heads) * s.head_dim, s.hidden), "o": (s.hidden, s.heads * s.head_dim),
                "gate_up": (2 * s.intermediate, s.hidden), "down": (s.hidden, s.intermediate),
                "lm_head": (s.vocab, s.hidden)}  # fmt: skip
    # around the kernel's defaults (64 x 128, K split past 2048), which the 2026-12-04 sweep of 16 to 64 x 128 to
    # 256 x 1 to 8 splits chose
    grid = [(16, 64, 2)] if device.type == "cpu" else list(itertools.product((32, 64), (128, 256), (1, 2, 4)))
    rows = []
    for name, (n, k) in products.items():
        x = torch.randn(16, k, device=device).to(torch.bfloat16)
        weight = (torch.randn(n, k, device=device) * 0.02).to(torch.bfloat16)
        label = f"{name} 16x{k} @ {k}x{n}"
        rows.append({"kernel": "linear", "shape": label, "params": "auto (cuBLAS)",
                     "ms": round(_device_ms(partial(linear, x, weight, path="torch"), device), 4)})  # fmt: skip
        for block_n, block_k, split_k in grid:
            run = partial(linear, x, weight, path="triton", block_n=block_n, block_k=block_k, split_k=split_k)
            rows.append({"kernel": "linear", "shape": label,
                         "params": f"thin block_n={block_n} block_k={block_k} split_k={split_k}",
                         "ms": round(_device_ms(run, device), 4)})  # fmt: skip
    return mark_best(rows)


def qkv_rope_sweep(device: torch.device, shape: Shape, cache: int) -> list[dict[str, object]]:
    """A layer's attention input on a block's 16 rows, cache ``cache`` long: the q/k/v product on cuBLAS then the
    fused q/k norm + RoPE + KV write (what a pass runs today, its input already normed), against the thin path's
    one launch (the input's RMSNorm included) at each K split."""
    from kernels.fused import qk_norm_rope
    from kernels.linear import qkv_norm_rope

    s, bf16 = shape, torch.bfloat16
    x = torch.randn(1, 16, s.hidden, device=device).to(bf16)
    weight = (torch.randn((s.heads + 2 * s.kv_heads) * s.head_dim, s.hidden, device=device) * 0.02).to(bf16)
    ones = torch.ones(s.head_dim, device=device, dtype=bf16)
    angles = torch.rand(16, s.head_dim // 2, device=device)
    caches = [torch.zeros(1, cache, s.kv_heads, s.head_dim, device=device, dtype=bf16) for _ in range(2)]
    rope = (s.heads, s.kv_heads, ones, ones, 1e-6, angles.cos(), angles.sin(), torch.arange(16, device=device))
    label = f"qkv 16x{s.hidden} + norm/RoPE/KV, cache {cache}"
    rows = [{"kernel": "attention input", "shape": label, "params": "auto (cuBLAS + qk_norm_rope)",
             "ms": round(_device_ms(lambda: qk_norm_rope(x @ weight.T, *rope, *caches, path="triton"), device), 4)}]
    norm = (torch.ones(s.hidden, device=device, dtype=bf16), 1e-6)
    for split_k in (1, 2) if device.type == "cpu" else (2, 4, 8):
        run = partial(qkv_norm_rope, x, weight, None, norm, *rope, *caches, path="triton", split_k=split_k)
        rows.append({"kernel": "attention input", "shape": label, "params": f"thin, one launch, split_k={split_k}",
                     "ms": round(_device_ms(run, device), 4)})  # fmt: skip
    return mark_best(rows)
