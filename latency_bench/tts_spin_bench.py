"""``python -m latency_bench tts-spin``: what Piper's onnxruntime threads cost the LM beside them, spinning
(onnxruntime's default, as ``PiperVoice.load`` builds the session) against sleeping (``voice.tts.load_voice``).

In the voice pipeline Piper speaks one clause while the LM decodes the next. Each round, for each voice in turn:
a clause alone; a demo-checkpoint turn right after a clause (what threads left spinning take from it); and two
turns run back to back while a clause is synthesised beside them (both slowed by sharing the cores). One process holds
both voices, so the machine's load hits both alike.
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
from collections.abc import Callable

from dlm.cli_args import at_least_one, output_path

CLAUSE = "The capital of France is Paris."
QUESTION = [{"role": "user", "content": "what's the capital of france"}]
VOICES = ("spinning", "sleeping")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rounds", type=at_least_one, default=8, help="rounds of the three measurements")
    parser.add_argument("--json", type=output_path, help="also write the figures here")


def _ms(fn: Callable[[], object]) -> float:
    started = time.perf_counter()
    fn()
    return (time.perf_counter() - started) * 1e3


def _side_by_side(speak: Callable[[], object], turn: Callable[[], object]) -> tuple[float, float]:
    """A clause synthesised on its own thread while two turns run here, one after the other (about as long as
    the clause): the clause's time and the turns' mean."""
    clause: list[float] = []
    thread = threading.Thread(target=lambda: clause.append(_ms(speak)))
    thread.start()
    turns = _ms(turn) + _ms(turn)
    thread.join()
    return clause[0], turns / 2


def run(args: argparse.Namespace) -> int:
    from piper import PiperVoice, SynthesisConfig

    from dlm.cli import DEMO_CHECKPOINT
    from dlm.engine import Engine
    from voice.models import piper_voice_files
    from voice.tts import load_voice

    files = piper_voice_files()
    voices = dict(zip(VOICES, (PiperVoice.load(*files), load_voice(*files)), strict=True))
    quiet = SynthesisConfig(noise_scale=0.0, noise_w_scale=0.0)
    engine = Engine.from_dir(DEMO_CHECKPOINT, "float32", "cpu")
    samples = {voice: {"clause_alone_ms": [], "turn_after_clause_ms": [], "clause_beside_turns_ms": [],
                       "turn_beside_clause_ms": []} for voice in VOICES}  # fmt: skip

    def turn() -> None:
        engine.generate(QUESTION, max_new_tokens=48, effort="medium")

    try:
        for round_ in range(args.rounds + 1):  # the first round warms both voices and the engine
            for name, voice in voices.items():
                def speak(voice: PiperVoice = voice) -> None:
                    list(voice.synthesize(CLAUSE, quiet))

                alone = _ms(speak)
                after = _ms(turn)
                beside, turns = _side_by_side(speak, turn)
                time.sleep(0.2)  # whichever threads spin, let them settle before the other voice's round
                if round_:
                    got = samples[name]
                    got["clause_alone_ms"].append(alone)
                    got["turn_after_clause_ms"].append(after)
                    got["clause_beside_turns_ms"].append(beside)
                    got["turn_beside_clause_ms"].append(turns)
    finally:
        engine.close()
    figures = {name: {key: round(statistics.median(values), 1) for key, values in got.items()}
               for name, got in samples.items()}  # fmt: skip
    print(f"Piper's onnxruntime threads, spinning vs sleeping; demo-checkpoint turns; medians of {args.rounds} rounds")
    for name, f in figures.items():
        print(f"{name:<9} clause alone {f['clause_alone_ms']:6.1f} ms  turn after a clause {f['turn_after_clause_ms']:6.1f}"
              f" ms  beside each other: clause {f['clause_beside_turns_ms']:6.1f} ms, turn {f['turn_beside_clause_ms']:6.1f} ms")
    if args.json:
        args.json.write_text(json.dumps({"voices": figures, "rounds": args.rounds, "clause": CLAUSE}, indent=2) + "\n")
    return 0
