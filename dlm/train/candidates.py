"""Run the copying curriculum for several seeds side by side and train on with the one whose copying emerged.

Copying is learned in a sudden phase change whose timing varies with the seed and even with the
floating-point order: of two runs of the same config, one copies by the end of the curriculum and scores
about twice the other's tool-call exact match (README). The curriculum is short (a few minutes on one
core), so with `[curriculum] candidates = N` the run trains it for seeds seed, seed + 1, ... in N processes
of one thread each, keeps the seed whose curriculum loss (the mean over its last `loss_window` curriculum
steps) is lowest, and continues that seed's state on the full corpus with all of `[train] threads`. The
losers' states stay in `state_dir/candidates` for inspection.
"""

from __future__ import annotations

import copy
import multiprocessing
import shutil
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import torch

from dlm.train.config import RunConfig
from dlm.train.train import TrainResult, run_tokenizer, train, training_corpus


def candidate_run(run: RunConfig, index: int) -> RunConfig:
    """The run of candidate `index`: its own seed and state, one thread, stopping when the curriculum does."""
    candidate = copy.deepcopy(run)
    candidate.train.seed = run.train.seed + index
    candidate.train.state_dir = str(Path(run.train.state_dir) / "candidates" / f"seed-{candidate.train.seed}")
    candidate.train.out_dir = str(Path(candidate.train.state_dir) / "model")
    candidate.train.threads = 1
    return candidate


def curriculum_loss(state_path: Path, window: int) -> float:
    """Mean training loss over the last `window` steps of the curriculum in a saved run state."""
    state = torch.load(state_path, weights_only=False)
    end = state["phase_starts"][-1] or state["step"]
    losses = state["losses"][:end][-window:]
    return sum(losses) / len(losses)


def continuing(run: RunConfig, state_path: Path) -> RunConfig:
    """`run` with the seed of the candidate whose state was carried on to `state_path`."""
    chosen = copy.deepcopy(run)
    chosen.train.seed = torch.load(state_path, weights_only=False)["config"]["train"]["seed"]
    return chosen


def _run_curriculum(run: RunConfig, progress: bool) -> None:
    train(run, resume=True, progress=progress, stop_after=run.curriculum.steps)


def train_with_candidates(run: RunConfig, resume: bool = False, progress: bool = True,
                          stop_after: int | None = None) -> TrainResult:
    """`train`, with the curriculum run by `run.curriculum.candidates` seeds and the best one carried on."""
    state_dir = Path(run.train.state_dir)
    state_path = state_dir / "state.pt"
    if resume and state_path.exists():  # the choice was made in an earlier session
        return train(continuing(run, state_path), resume=True, progress=progress, stop_after=stop_after)
    run_tokenizer(run, training_corpus(run), state_dir, resume)  # one tokenizer, shared by every candidate
    candidates = [candidate_run(run, index) for index in range(run.curriculum.candidates)]
    for candidate in candidates:
        Path(candidate.train.state_dir).mkdir(parents=True, exist_ok=True)
        shutil.copy(state_dir / "tokenizer.json", Path(candidate.train.state_dir) / "tokenizer.json")
    seeds = ", ".join(str(c.train.seed) for c in candidates)
    print(f"the curriculum runs for seeds {seeds} side by side, one core each (the bar follows the first)")
    with ProcessPoolExecutor(len(candidates), mp_context=multiprocessing.get_context("spawn")) as pool:
        list(pool.map(_run_curriculum, candidates, [progress and i == 0 for i in range(len(candidates))]))
    losses = {c.train.seed: curriculum_loss(Path(c.train.state_dir) / "state.pt", run.curriculum.loss_window)
              for c in candidates}
    best = min(losses, key=losses.__getitem__)
    print("curriculum loss by seed: " + ", ".join(f"{seed}: {loss:.3f}" for seed, loss in losses.items())
          + f"; seed {best} trains on")
    winner = next(c for c in candidates if c.train.seed == best)
    shutil.copy(Path(winner.train.state_dir) / "state.pt", state_path)
    return train(continuing(run, state_path), resume=True, progress=progress, stop_after=stop_after)
