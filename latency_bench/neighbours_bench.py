"""``python -m latency_bench neighbours``: what the speech models' idle threads cost the LM beside them.

In the voice pipeline Piper speaks one clause while the LM decodes the next, and Whisper's feature extractor runs
through numpy's OpenBLAS before every pass. Each runtime's threads spin for work after their own by default, and a
spinning thread holds a core the LM's next pass wants. Two neighbours, each way in turn every round, one process
holding both ways so the machine's load hits them alike:

- Piper with onnxruntime's default session (threads that spin) against ``voice.tts.load_voice``'s (threads that
  sleep): a clause alone, a demo-checkpoint turn right after a clause, and a clause with two turns beside it;
- Whisper's features of 2 s of audio with OpenBLAS on 2 threads against 1 (``voice.neighbours.one_blas_thread``):
  the features alone and a turn right after them.
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
from collections.abc import Callable

import numpy as np

from dlm.cli_args import at_least_one, output_path
from latency_bench.dlm_bench import elapsed_ms

CLAUSE = "The capital of France is Paris."
QUESTION = [{"role": "user", "content": "what's the capital of france"}]
PIPER = ("spinning", "sleeping")
BLAS = ("2 threads", "1 thread")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rounds", type=at_least_one, default=8, help="rounds of every measurement")
    parser.add_argument("--json", type=output_path, help="also write the figures here")


def _side_by_side(speak: Callable[[], object], turn: Callable[[], object]) -> tuple[float, float]:
    """A clause synthesised on its own thread while two turns run here, one after the other (about as long as
    the clause): the clause's time and the turns' mean."""
    clause: list[float] = []
    thread = threading.Thread(target=lambda: clause.append(elapsed_ms(speak)))
    thread.start()
    turns = elapsed_ms(turn) + elapsed_ms(turn)
    thread.join()
    return clause[0], turns / 2


def _medians(samples: dict[str, dict[str, list[float]]]) -> dict[str, dict[str, float]]:
    return {way: {key: round(statistics.median(values), 1) for key, values in got.items()} for way, got in samples.items()}


def run(args: argparse.Namespace) -> int:
    from voice.neighbours import import_ctranslate2_on_its_own_openmp

    import_ctranslate2_on_its_own_openmp()  # before faster_whisper imports it, as voice.asr does
    from faster_whisper.feature_extractor import FeatureExtractor
    from piper import PiperVoice, SynthesisConfig
    from threadpoolctl import threadpool_limits

    from dlm.cli import DEMO_CHECKPOINT
    from dlm.engine import Engine
    from voice.models import piper_voice_files
    from voice.tts import load_voice

    files = piper_voice_files()
    voices = dict(zip(PIPER, (PiperVoice.load(*files), load_voice(*files)), strict=True))
    quiet = SynthesisConfig(noise_scale=0.0, noise_w_scale=0.0)
    features = FeatureExtractor()
    audio = np.random.default_rng(0).normal(0, 0.03, 32000).astype(np.float32)
    engine = Engine.from_dir(DEMO_CHECKPOINT, "float32", "cpu")
    piper = {way: {"clause_alone_ms": [], "turn_after_clause_ms": [], "clause_beside_turns_ms": [],
                   "turn_beside_clause_ms": []} for way in PIPER}  # fmt: skip
    blas = {way: {"features_alone_ms": [], "turn_after_features_ms": []} for way in BLAS}

    def turn() -> None:
        engine.generate(QUESTION, max_new_tokens=48, effort="medium")

    try:
        for round_ in range(args.rounds + 1):  # the first round warms everything up
            for way, voice in voices.items():
                def speak(voice: PiperVoice = voice) -> None:
                    list(voice.synthesize(CLAUSE, quiet))

                got = [elapsed_ms(speak), elapsed_ms(turn), *_side_by_side(speak, turn)]
                time.sleep(0.2)  # whichever threads spin, let them settle before the next way
                if round_:
                    for key, value in zip(piper[way], got, strict=True):
                        piper[way][key].append(value)
            for way, threads in zip(BLAS, (2, 1), strict=True):
                with threadpool_limits(threads, user_api="blas"):
                    got = [elapsed_ms(lambda: features(audio)), elapsed_ms(turn)]
                time.sleep(0.2)
                if round_:
                    for key, value in zip(blas[way], got, strict=True):
                        blas[way][key].append(value)
    finally:
        engine.close()
    figures = {"piper": _medians(piper), "openblas": _medians(blas)}
    print(f"The LM beside Piper and Whisper's features; demo-checkpoint turns; medians of {args.rounds} rounds")
    for way, f in figures["piper"].items():
        print(f"Piper {way:<9} clause alone {f['clause_alone_ms']:6.1f} ms  turn after a clause "
              f"{f['turn_after_clause_ms']:6.1f} ms  beside each other: clause {f['clause_beside_turns_ms']:6.1f} ms, "
              f"turn {f['turn_beside_clause_ms']:6.1f} ms")
    for way, f in figures["openblas"].items():
        print(f"OpenBLAS {way:<9} features alone {f['features_alone_ms']:5.1f} ms  turn after the features "
              f"{f['turn_after_features_ms']:6.1f} ms")
    if args.json:
        args.json.write_text(json.dumps({**figures, "rounds": args.rounds, "clause": CLAUSE}, indent=2) + "\n")
    return 0
