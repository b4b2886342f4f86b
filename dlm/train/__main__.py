"""`python -m dlm.train --config configs/demo.toml [--resume] [--steps N] [--out DIR] [--stop-after N]
[--init-from DIR]`."""

from __future__ import annotations

import argparse

from dlm.train.candidates import train_with_candidates
from dlm.train.config import load_run_config
from dlm.train.train import train


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m dlm.train", description=__doc__)
    parser.add_argument("--config", required=True, help="a TOML run config, e.g. configs/demo.toml")
    parser.add_argument("--resume", action="store_true", help="continue from the state file in state_dir")
    parser.add_argument("--steps", type=int, help="override [train] steps")
    parser.add_argument("--out", help="override [train] out_dir")
    parser.add_argument("--stop-after", type=int, help="end this session at that step (continue with --resume)")
    parser.add_argument("--init-from", help="fine-tune this checkpoint directory (its tokenizer and weights; "
                                            "override [train] init_from)")
    args = parser.parse_args(argv)
    run = load_run_config(args.config)
    if args.steps is not None:
        run.train.steps = args.steps
    if args.out is not None:
        run.train.out_dir = args.out
    if args.init_from is not None:
        run.train.init_from = args.init_from
    run_training = train_with_candidates if run.curriculum.candidates > 1 else train
    result = run_training(run, resume=args.resume, stop_after=args.stop_after)
    print(f"trained {result.steps} steps in {result.seconds / 60:.1f} min, final loss {result.final_loss:.3f}; "
          f"checkpoint in {result.out_dir}")


if __name__ == "__main__":
    main()
