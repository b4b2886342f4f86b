"""Run the copying curriculum for several seeds side by side and train on with the one whose copying emerged.

Copying is learned in a sudden phase change whose timing varies with the seed and even with the
floating-point order (README: runs of one config whose curriculum loss had not dropped by the switch to the
full mix scored a fraction of those where it had). The curriculum takes minutes on one core, so with
`[curriculum] candidates = N` the run trains it for seeds seed, seed + 1, ... in N processes of one thread
each. With `until_loss` they race: the first whose curriculum ends on its loss wins and the others are
interrupted; without it, or when none gets there within `steps`, the lowest curriculum loss (the mean over
the last `loss_window` curriculum steps) wins. The winner's state then trains on the full corpus with all of
`[train] threads`. The others' states stay in `state_dir/candidates` for inspection.
"""

from __future__ import annotations

import _thread
import contextlib
import copy
import multiprocessing
import os
import shutil
import signal
import sys
import threading
from multiprocessing.connection import Connection, wait
from pathlib import Path

from dlm.config import CheckpointError
from dlm.train.config import RunConfig, RunConfigError
from dlm.train.loss_plot import candidate_state_dir, curriculum_losses, write_race_plot
from dlm.train.phases import load_state
from dlm.train.train import TrainResult, run_tokenizer, train, training_corpus


def candidate_run(run: RunConfig, index: int) -> RunConfig:
    """The run of candidate `index`: its own seed and state, one thread, stopping when the curriculum does."""
    candidate = copy.deepcopy(run)
    candidate.train.seed = run.train.seed + index
    candidate.train.state_dir = str(candidate_state_dir(Path(run.train.state_dir), candidate.train.seed))
    candidate.train.out_dir = str(Path(candidate.train.state_dir) / "model")
    candidate.train.threads = 1
    return candidate


def curriculum_loss(state_path: Path, window: int) -> float:
    """Mean training loss over the last `window` steps of the curriculum in a saved run state."""
    losses = curriculum_losses(state_path)[-window:]
    return sum(losses) / len(losses)


def with_seed(run: RunConfig, seed: int) -> RunConfig:
    """`run` as the candidate of `seed` carries it on: the run's own state and threads, that seed's batches."""
    chosen = copy.deepcopy(run)
    chosen.train.seed = seed
    return chosen


def _stop_when_orphaned() -> None:
    """Interrupt this candidate once the run that started it is gone. A run killed outright (SIGTERM,
    SIGKILL) never reaches its cleanup, and its candidates would otherwise train on for the whole curriculum,
    taking the cores from whatever runs next."""
    parent = multiprocessing.parent_process()
    if parent is not None:
        wait([parent.sentinel])
        _thread.interrupt_main()


def _run_curriculum(run: RunConfig, progress: bool, refusals: Connection) -> None:
    # A run started in the background by a script (`python -m dlm.train ... &`) has SIGINT ignored, which the
    # candidates inherit; then neither `interrupt_main` nor `race`'s SIGINT would reach them.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    threading.Thread(target=_stop_when_orphaned, daemon=True).start()
    # another candidate winning the race, or the run's end, interrupts this one: exit cleanly, releasing what it holds
    with contextlib.suppress(KeyboardInterrupt):
        try:
            train(run, resume=True, progress=progress, curriculum_only=True)
        except (RunConfigError, CheckpointError, OSError) as err:  # the run refuses it in one line, as its own
            refusals.send(f"the curriculum of seed {run.train.seed}: {err}")
            sys.exit(2)


def race(candidates: list[RunConfig], progress: bool) -> dict[int, float]:
    """Curriculum loss by seed. With `until_loss`, the first candidate whose curriculum ends on its loss wins
    and the rest are stopped (their losses are left out); otherwise all run every curriculum step."""
    context = multiprocessing.get_context("spawn")
    running = {}
    refusals, refuse = context.Pipe(duplex=False)
    for index, candidate in enumerate(candidates):
        process = context.Process(target=_run_curriculum, args=(candidate, progress and index == 0, refuse))
        process.start()
        running[process.sentinel] = (process, candidate)
    losses: dict[int, float] = {}
    try:
        while running:
            for sentinel in wait(list(running)):
                process, candidate = running.pop(sentinel)
                process.join()
                if process.exitcode != 0 and refusals.poll():
                    raise RunConfigError(refusals.recv())
                if process.exitcode != 0:
                    raise RuntimeError(f"the curriculum of seed {candidate.train.seed} failed "
                                       f"(exit code {process.exitcode})")
                state_path = Path(candidate.train.state_dir) / "state.pt"
                curriculum = candidate.curriculum
                losses[candidate.train.seed] = curriculum_loss(state_path, curriculum.loss_window)
                if curriculum.until_loss and losses[candidate.train.seed] < curriculum.until_loss:
                    return {candidate.train.seed: losses[candidate.train.seed]}
    finally:
        for process, _ in running.values():
            os.kill(process.pid, signal.SIGINT)
            process.join(timeout=60)
            if process.is_alive():
                process.terminate()
                process.join()
    return losses


def train_with_candidates(run: RunConfig, resume: bool = False, progress: bool = True,
                          stop_after: int | None = None) -> TrainResult:
    """`train`, with the curriculum run by `run.curriculum.candidates` seeds and the best one carried on."""
    state_dir = Path(run.train.state_dir)
    state_path = state_dir / "state.pt"
    if resume and state_path.exists():  # the choice was made in an earlier session; its state holds the seed
        seed = load_state(state_path)["config"]["train"]["seed"]
        return train(with_seed(run, seed), resume=True, progress=progress, stop_after=stop_after)
    run_tokenizer(run, lambda: training_corpus(run), state_dir, resume)  # one tokenizer, shared by every candidate
    candidates = [candidate_run(run, index) for index in range(run.curriculum.candidates)]
    for candidate in candidates:
        Path(candidate.train.state_dir).mkdir(parents=True, exist_ok=True)
        shutil.copy(state_dir / "tokenizer.json", Path(candidate.train.state_dir) / "tokenizer.json")
    seeds = ", ".join(str(c.train.seed) for c in candidates)
    print(f"the curriculum runs for seeds {seeds} side by side, one thread each (the bar follows the first)")
    losses = race(candidates, progress)
    write_race_plot(state_dir, {c.train.seed: Path(c.train.state_dir) / "state.pt" for c in candidates},
                    run.curriculum.until_loss or None)
    best = min(losses, key=losses.__getitem__)
    print("curriculum loss by seed: " + ", ".join(f"{seed}: {loss:.3f}" for seed, loss in losses.items())
          + f"; seed {best} trains on")
    winner = next(c for c in candidates if c.train.seed == best)
    shutil.copy(Path(winner.train.state_dir) / "state.pt", state_path)
    return train(with_seed(run, best), resume=True, progress=progress, stop_after=stop_after)
