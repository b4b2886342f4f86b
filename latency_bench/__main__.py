"""``python -m latency_bench <benchmark> ...``: one subcommand per benchmark module.

Each module named in :data:`BENCHMARKS` provides ``add_arguments(parser)`` and ``run(args) -> int``;
adding a benchmark is one line here.
"""

from __future__ import annotations

import importlib
import sys

from dlm.cli_args import ArgumentParser, refusal, refused

BENCHMARKS = {
    "dlm": ("latency_bench.dlm_bench", "first-block latency: engine vs autoregressive vs vanilla diffusion"),
    "voice": ("latency_bench.voice_bench", "per-stage and voice-to-voice latency: full design vs baselines"),
    "api": ("latency_bench.api_bench", "OpenAI API under concurrent clients: first chunk and tokens/s vs AR"),
    "train-step": ("latency_bench.train_step_bench", "training step time: eager, compiled, compiled with bf16 matmuls"),
    "asr-window": ("latency_bench.asr_window_bench", "final-pass Whisper window: word error rate and time, 30 s vs 10 s"),
    "openmp": ("latency_bench.openmp_bench", "LM turns with one OpenMP team vs the two-team ways a process got there"),
    "neighbours": ("latency_bench.neighbours_bench", "the LM after and beside Piper and Whisper's features: idle threads"),
    "copy-bias": ("latency_bench.copy_bias_bench", "the replies' copy bias: time per pass, bare vs biased"),
    "schema-budget": ("latency_bench.schema_budget_bench",
                      "constrained decoding under a tight max_tokens: budget checks vs the grammar alone"),
}


def _input_errors() -> tuple[type[Exception], ...]:
    """The errors that mean a config or checkpoint the benchmark was given cannot be used."""
    from dlm.config import CheckpointError
    from dlm.train.config import RunConfigError
    from voice.config import ConfigError

    return CheckpointError, RunConfigError, ConfigError


def main(argv: list[str] | None = None) -> int:
    """A bad config, checkpoint, path or value is one line on stderr and exit status 2, as for `python -m voice`
    and `python -m dlm.train`; anything else (a bug) keeps its traceback."""
    argv = sys.argv[1:] if argv is None else argv
    parser = ArgumentParser(prog="python -m latency_bench")
    sub = parser.add_subparsers(dest="benchmark", required=True)
    chosen = argv[0] if argv and argv[0] in BENCHMARKS else None
    for name, (module, help_text) in BENCHMARKS.items():
        p = sub.add_parser(name, help=help_text)
        if name == chosen:  # import only the benchmark that runs (they pull in heavy dependencies)
            importlib.import_module(module).add_arguments(p)
    args = parser.parse_args(argv)
    try:
        return int(importlib.import_module(BENCHMARKS[args.benchmark][0]).run(args) or 0)
    except ValueError as err:
        if not isinstance(err, _input_errors()):
            raise
        refusal(str(err))
        return 2
    except SystemExit as exit_:  # a benchmark's own one-line refusal ("--gen-tokens must be a multiple ...")
        return refused(exit_)


if __name__ == "__main__":
    sys.exit(main())
