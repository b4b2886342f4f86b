"""`python -m dlm.train --config configs/demo.toml [--resume] [--steps N] [--out DIR] [--stop-after N]
[--init-from DIR]`."""

from __future__ import annotations

import argparse
from pathlib import Path

from dlm.cli_args import ArgumentParser, at_least_one, checkpoint, output_dir
from dlm.config import CheckpointError
from dlm.train.candidates import train_with_candidates
from dlm.train.config import RunConfig, RunConfigError, check_finish, load_run_config
from dlm.train.loss_plot import candidate_states
from dlm.train.train import train


def main(argv: list[str] | None = None) -> None:
    """Every bad config, path or value is one line on stderr and exit status 2, not a traceback (which stays
    for anything else: a bug must show where it is)."""
    parser = ArgumentParser(prog="python -m dlm.train", description=__doc__)
    parser.add_argument("--config", required=True, help="a TOML run config, e.g. configs/demo.toml")
    parser.add_argument("--resume", action="store_true", help="continue from the state file in state_dir")
    parser.add_argument("--steps", type=at_least_one, help="override [train] steps")
    parser.add_argument("--out", type=output_dir, help="override [train] out_dir")
    parser.add_argument("--stop-after", type=at_least_one, help="end this session at that step (continue with --resume)")
    parser.add_argument("--init-from", type=checkpoint, help="fine-tune this checkpoint directory (its tokenizer "
                        "and weights: override [train] init_from and [data] tokenizer)")
    args = parser.parse_args(argv)
    try:
        run = _configured(args)
        run_training = train_with_candidates if run.curriculum.candidates > 1 else train
        result = run_training(run, resume=args.resume, stop_after=args.stop_after)
    except (RunConfigError, CheckpointError, OSError) as err:  # a config, checkpoint or directory unfit to use
        parser.exit(2, f"error: {err}\n")
    print(f"trained {result.steps} steps in {result.seconds / 60:.1f} min, final loss {result.final_loss:.3f}; "
          f"checkpoint in {result.out_dir}, loss curve in {Path(run.train.state_dir) / 'loss.svg'}")


def _configured(args: argparse.Namespace) -> RunConfig:
    run = load_run_config(args.config)
    if args.steps is not None:
        run.train.steps = args.steps
        check_finish(run)
    if args.out is not None:
        run.train.out_dir = str(args.out)
    else:  # as --out is checked: a run had found out only when it exported, after all its steps
        try:
            output_dir(run.train.out_dir)
        except argparse.ArgumentTypeError as err:
            raise RunConfigError(f"[train] out_dir {err}") from None
    if args.init_from is not None:  # a fine-tune trains with its checkpoint's tokenizer, as [train] init_from does
        run.train.init_from, run.data.tokenizer = args.init_from, ""
    if args.resume:
        _check_resumable(Path(run.train.state_dir))
    else:
        _check_fresh(Path(run.train.state_dir))
    return run


def _check_resumable(state_dir: Path) -> None:
    """Refuse --resume where no run, nor a race's candidate, has saved a state: it had started a fresh run
    silently (the user meant to continue one, most likely in another state_dir)."""
    if not (state_dir / "state.pt").exists() and not candidate_states(state_dir):
        raise RunConfigError(f"--resume: nothing is saved in {state_dir} to resume (no state.pt, nor a race's "
                             "candidates/seed-N/state.pt): start the run without --resume")


def _check_fresh(state_dir: Path) -> None:
    """Refuse a fresh run in a state_dir that holds a run, or a race's candidates: it would overwrite the one,
    and carry on from the others' states (a candidate always resumes its own)."""
    state = state_dir / "state.pt"
    if state.exists():
        raise RunConfigError(f"{state} already holds a run: pass --resume to continue it, or name another [train] "
                             "state_dir")
    if candidate_states(state_dir):
        raise RunConfigError(f"{state_dir / 'candidates'} holds an earlier race's states: pass --resume to continue "
                             f"it, or clear {state_dir}")


if __name__ == "__main__":
    main()
