"""Whisper's encoder window for the final pass: word error rate and compute time, 30 s against shorter.

The final pass is the largest term of voice-to-voice latency on the CPU, and its cost is proportional to
the encoder window. A shorter window is only worth having if Whisper hears the same words through it, so
this benchmark transcribes the same spoken questions through each window and prints both figures.

The questions are spoken by the bundled Piper voice without its random noise at three speaking rates, so
every run hears the same audio. References write numbers as digits, as Whisper does.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics

import numpy as np

from dlm.cli_args import at_least_one_each, output_path
from voice.asr import ASR_RATE, WHISPER_WINDOW_S, WhisperAsr
from voice.tts import PiperTts, TtsConfig

QUESTIONS = [
    "What is 12 times 4?", "What time is it?", "Set a timer for 10 minutes.", "What is the capital of France?",
    "How do you spell necessary?", "Convert 5 miles to kilometers.", "What day is it today?", "Hello there.",
    "Thank you so much.", "What can you do?", "Cancel the timer.", "And what about Germany?",
    "How much is 250 divided by 5?", "Play some music.", "What is the square root of 81?", "Goodbye.",
    "Tell me a long story about the sea.", "How many feet is 3 meters?", "Is it going to rain tomorrow?",
    "Start a 5 minute timer for the pasta.", "What is 17 plus 38?", "Who are you?", "Stop.",
    "How long is left on my timer?", "What's the capital city of Japan?", "Add 7 to that.",
    "Can you call my mom?", "What is 100 minus 37?", "Turn on the lights.", "Spell the word rhythm.",
]
SPEAKING_RATES = (0.9, 1.0, 1.15)  # Piper length_scale: faster, the voice's own, slower


def words(text: str) -> list[str]:
    return re.sub(r"[^a-z0-9' ]", " ", text.lower().replace("-", " ")).split()


def word_errors(reference: str, heard: str) -> tuple[int, int]:
    """(edit distance in words, reference length): the parts of a word error rate."""
    ref, hyp = words(reference), words(heard)
    row = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        prev, row[0] = row[0], i
        for j, h in enumerate(hyp, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (r != h))
    return row[-1], len(ref)


def windows(text: str) -> list[int]:
    """Encoder windows in seconds, each within Whisper's 30 (a longer one had failed in Whisper after 20 s of
    synthesis)."""
    values = at_least_one_each(text)
    if max(values) > WHISPER_WINDOW_S:
        raise argparse.ArgumentTypeError(f"must be windows of 1 to {WHISPER_WINDOW_S} s (Whisper's own), got {text!r}")
    return values


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--windows", type=windows, default="30,10",
                        help=f"encoder windows to compare, 1 to {WHISPER_WINDOW_S} seconds (default 30,10)")
    parser.add_argument("--json", type=output_path, help="also write the figures here")


def run(args: argparse.Namespace) -> int:
    windows = args.windows
    asr = WhisperAsr()
    clips = []
    for rate in SPEAKING_RATES:
        tts = PiperTts(TtsConfig(length_scale=rate, noise_scale=0.0, noise_w_scale=0.0))
        clips += [(question, rate, tts.synthesize(question, ASR_RATE)) for question in QUESTIONS]
        tts.close()
    report: dict[str, dict] = {}
    differing = []
    for window in windows:
        errors = total = 0
        compute, heard = [], []
        for question, _, pcm in clips:
            # sure=True, as the final pass runs: a short window whose words the guard rejects tries 30 s
            result = asr.transcribe(np.concatenate([pcm, np.zeros(ASR_RATE // 2, np.int16)]), window, sure=True)
            e, n = word_errors(question, result.text)
            errors, total = errors + e, total + n
            compute.append(result.compute_ms)
            heard.append(result.text)
        report[str(window)] = {"wer": errors / total, "compute_ms_p50": statistics.median(compute),
                               "compute_ms_mean": statistics.fmean(compute), "heard": heard}
    if len(windows) > 1:
        base, other = report[str(windows[0])]["heard"], report[str(windows[-1])]["heard"]
        differing = [(q, rate, a, b) for (q, rate, _), a, b in zip(clips, base, other, strict=True) if a != b]
    print(f"{len(clips)} clips ({len(QUESTIONS)} questions x speaking rates {SPEAKING_RATES}), "
          f"0.5 s of silence after each")
    print(f"{'window':>8} {'WER':>7} {'compute p50':>12} {'mean':>8}")
    for window in windows:
        r = report[str(window)]
        note = "" if window < WHISPER_WINDOW_S else "  (Whisper's own)"
        print(f"{window:>6} s {r['wer']:>7.1%} {r['compute_ms_p50']:>9.0f} ms {r['compute_ms_mean']:>5.0f} ms{note}")
    for question, rate, a, b in differing:
        print(f"  differs at length_scale {rate}: {question!r}: {a!r} vs {b!r}")
    if args.json:
        args.json.write_text(json.dumps({"windows": report, "differing": differing}, indent=1) + "\n")
    asr.close()
    return 0
