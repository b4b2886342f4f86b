"""``python -m latency_bench voice``: per-stage and voice-to-voice latency of spoken turns, three designs at once.

Every question is synthesised with Piper and spoken through file mode at real-time pace (``--fast`` for a
quick functional run whose figures leave out the hangover), once per variant, interleaved so that load
from anything else on the machine hits all variants alike:

- ``full``      the design: speculative final ASR in the hangover and the reply started on it (audio
                held until the turn ends), prefill of confirmed words while the caller speaks,
                clause-by-clause TTS;
- ``baseline``  none of those: the final ASR pass starts when the hangover ends, the LM sees the prompt
                only then, TTS waits for the whole reply;
- ``ar``        the full design with the same model decoded autoregressively (blocks of one token, one
                pass each).

Figures are ms from the real end of speech, so the end-of-turn silence (the VAD hangover) is included.
All variants share the speech models and their settings (Whisper's 10 s final window included).
"""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

import torch

from dlm.cli_args import at_least_one, output_path
from voice.config import PipelineConfig, load_config
from voice.file_mode import CALLER_RATE, FileModeOptions, run_files
from voice.pipeline import VoicePipeline
from voice.resources import Resources
from voice.trace import STAGES, summarize

# Each question with what a right reply says (any of them; the clock's answer is not known beforehand, but it
# ends in am or pm), so the figures come with whether each design still answered right: a fast wrong reply is
# no win.
QUESTIONS: list[tuple[str, tuple[str, ...]]] = [
    ("What is twelve times four?", ("forty-eight",)),
    ("What is the capital of France?", ("paris",)),
    ("What time is it?", (" am", " pm")),
    ("What is seven plus eight?", ("fifteen",)),
    ("Convert ten miles to kilometers.", ("sixteen point zero nine",)),
    ("What is the capital of Japan?", ("tokyo",)),
    ("Set a timer for five minutes.", ("five minute",)),
    ("What is nine times six?", ("fifty-four",)),
]


def variants(config: PipelineConfig) -> dict[str, PipelineConfig]:
    return {
        "full": config,
        "baseline": config.replace(turn={"speculative_asr": False, "speculative_reply": False,
                                         "prefill_during_speech": False, "stream_tts": False}),
        "ar": config.replace(lm={"block_size": 1, "first_block_size": None, "passes_per_block": 1}),
    }


async def measure(config: PipelineConfig, turns: int, fast: bool) -> dict[str, list[dict[str, Any]]]:
    """Traces per variant; each variant holds one conversation across all its turns."""
    resources = await Resources.load(config)
    asked = [QUESTIONS[i % len(QUESTIONS)] for i in range(turns)]
    clips = [resources.tts.synthesize(question, CALLER_RATE) for question, _ in asked]
    pipelines = {name: VoicePipeline(resources, cfg) for name, cfg in variants(config).items()}
    traces: dict[str, list[dict[str, Any]]] = {name: [] for name in pipelines}
    try:
        for clip, (question, fact) in zip(clips, asked, strict=True):
            for name, pipeline in pipelines.items():
                result = await run_files(pipeline, [clip], FileModeOptions(fast=fast, lead_in_s=0.3, tail_s=0.2))
                traces[name] += [{**trace, "asked": question, "expected": fact} for trace in result.traces]
    finally:
        for pipeline in pipelines.values():
            await pipeline.close()
        resources.close()
    return traces


def report(traces: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    summaries = {name: summarize(records) for name, records in traces.items()}
    ratios = {}
    full = summaries["full"].get("voice_to_voice_ms")
    for name, summary in summaries.items():
        other = summary.get("voice_to_voice_ms")
        if name != "full" and full and other:
            ratios[f"{name}/full"] = {q: round(other[q] / full[q], 2) for q in ("p50", "p95")}
    return {"summaries": summaries, "voice_to_voice_ratio": ratios, "right_replies": right_replies(traces),
            "traces": traces}


def right_replies(traces: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, int]]:
    """Per variant, how many of the turns whose right answer is known got a reply that says it."""
    counts = {}
    for name, records in traces.items():
        scored = [r for r in records if r.get("expected")]
        right = sum(any(fact in r.get("reply", "").lower() for fact in r["expected"]) for r in scored)
        counts[name] = {"right": right, "scored": len(scored)}
    return counts


def format_report(rep: dict[str, Any]) -> str:
    fields = [*(f"{stage}_ms" for stage in STAGES), "voice_to_voice_ms"]
    names = list(rep["summaries"])
    lines = [f"{'field':<20}" + "".join(f"{n + ' p50':>14}{n + ' p95':>14}" for n in names)]
    for field in fields:
        row = f"{field:<20}"
        for name in names:
            s = rep["summaries"][name].get(field)
            row += f"{s['p50']:>14.0f}{s['p95']:>14.0f}" if s else f"{'-':>14}{'-':>14}"
        lines.append(row)
    right = rep["right_replies"]
    lines.append(", ".join(f"{n}: {len(rep['traces'][n])} turns, {right[n]['right']} of {right[n]['scored']} "
                           "replies right" for n in names))
    for key, ratio in rep["voice_to_voice_ratio"].items():
        lines.append(f"voice-to-voice {key}: p50 x{ratio['p50']}, p95 x{ratio['p95']}")
    return "\n".join(lines)


def stacked_bars_svg(rep: dict[str, Any]) -> str:
    """Where the time goes: one bar per variant, the p50 of each stage stacked (an SVG, no plotting library)."""
    colors = {"asr": "#4e79a7", "lm": "#f28e2b", "tts": "#59a14f", "output": "#b07aa1"}
    names = list(rep["summaries"])
    totals = [sum(rep["summaries"][n].get(f"{s}_ms", {}).get("p50", 0) for s in STAGES) for n in names]
    scale = 500 / max(max(totals), 1)
    height = 60 + 40 * len(names)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="720" height="{height}" font-family="sans-serif" '
             'font-size="12">']
    for row, name in enumerate(names):
        y, x = 30 + 40 * row, 110
        parts.append(f'<text x="10" y="{y + 17}">{name}</text>')
        for stage in STAGES:
            width = rep["summaries"][name].get(f"{stage}_ms", {}).get("p50", 0) * scale
            parts.append(f'<rect x="{x:.1f}" y="{y}" width="{width:.1f}" height="24" fill="{colors[stage]}">'
                         f'<title>{stage}</title></rect>')
            x += width
        parts.append(f'<text x="{x + 6:.1f}" y="{y + 17}">{totals[row]:.0f} ms</text>')
    legend_y = 40 + 40 * len(names)
    for i, (stage, color) in enumerate(colors.items()):
        parts.append(f'<rect x="{110 + 110 * i}" y="{legend_y}" width="12" height="12" fill="{color}"/>'
                     f'<text x="{126 + 110 * i}" y="{legend_y + 11}">{stage} p50</text>')
    parts.append("</svg>")
    return "\n".join(parts)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--turns", type=at_least_one, default=6, help="spoken questions per variant (default 6)")
    p.add_argument("--config", default="cpu-demo", help="configs/NAME.toml (default cpu-demo)")
    p.add_argument("--fast", action="store_true", help="do not wait for the clock (functional check only)")
    p.add_argument("--json", type=output_path, help="write the summaries, ratios and every trace here")
    p.add_argument("--plot", type=output_path, help="write a stacked-bar SVG of the p50 stage times here")


def run(args: argparse.Namespace) -> int:
    if args.turns < 1:
        raise SystemExit("--turns must be >= 1")
    config = load_config(args.config)
    torch.set_num_threads(config.lm.threads)
    rep = report(asyncio.run(measure(config, args.turns, args.fast)))
    rep["config"] = config.name
    rep["pace"] = "fast" if args.fast else "real-time"
    print(format_report(rep))
    if args.json:
        args.json.write_text(json.dumps(rep, indent=2) + "\n")
    if args.plot:
        args.plot.write_text(stacked_bars_svg(rep))
    return 0
