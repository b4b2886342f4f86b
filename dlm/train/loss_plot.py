"""A run's training loss as a picture, drawn as a self-contained SVG (no plotting library).

What a person training the demo wants to see is a shape, not a column of numbers: the copying curriculum's
sudden drop, the jump when the full mix begins, whether the loss still falls when the time runs out, and in
a race (`dlm.train.candidates`) which seed's copying emerged first. `train` redraws `loss.svg` in the run's
state directory at every checkpoint, the race draws `race.svg` beside it, and `python -m dlm.train.loss_plot
STATE_DIR` redraws both from the saved states.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from xml.sax.saxutils import escape

from dlm.cli_args import ArgumentParser
from dlm.train.config import RunConfigError
from dlm.train.phases import FINISH, FULL, load_state, saved_phase_starts

WIDTH, HEIGHT = 760, 360
LEFT, RIGHT, TOP, BOTTOM = 60, 20, 30, 50  # margins around the plotting area
COLORS = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#b07aa1", "#76b7b2", "#edc948", "#9c755f")


def candidate_state_dir(state_dir: Path, seed: int) -> Path:
    """Where a race keeps the state of the candidate with `seed` (one name for the race and this picture)."""
    return state_dir / "candidates" / f"seed-{seed}"


def candidate_states(state_dir: Path) -> dict[int, Path]:
    """The saved state of each candidate of the race run in `state_dir`, by seed."""
    return {int(p.parent.name.removeprefix("seed-")): p
            for p in sorted((state_dir / "candidates").glob("seed-*/state.pt"))}


def smoothed(losses: list[float], window: int) -> list[float]:
    """The mean of each step's last `window` losses (fewer at the start): single steps are too noisy to read."""
    total, out = 0.0, []
    for step, loss in enumerate(losses):
        total += loss - (losses[step - window] if step >= window else 0.0)
        out.append(total / min(step + 1, window))
    return out


def log_ticks(low: float, high: float) -> list[float]:
    """Round values (1, 2 and 5 times a power of ten) between `low` and `high`, for the log-scale loss axis."""
    ticks = []
    for exponent in range(math.floor(math.log10(low)), math.ceil(math.log10(high)) + 1):
        ticks += [m * 10.0 ** exponent for m in (1, 2, 5) if low <= m * 10.0 ** exponent <= high]
    return ticks


def step_ticks(steps: int) -> list[int]:
    """About five round step counts from 0 to `steps`."""
    raw = max(steps / 5, 1)
    unit = 10 ** math.floor(math.log10(raw))
    spacing = next(m * unit for m in (1, 2, 5, 10) if m * unit >= raw)
    return list(range(0, steps + 1, int(spacing)))


def loss_svg(curves: dict[str, list[float]], marks: dict[str, int] | None = None, bar: float | None = None,
             window: int = 50, title: str = "training loss") -> str:
    """`curves` (a label -> the loss of each step) smoothed over `window` steps on a log scale, with a dashed
    vertical line at each of `marks` (a label -> step) and, if given, a horizontal one at `bar`."""
    marks = marks or {}
    lines = {label: smoothed(losses, window) for label, losses in curves.items() if losses}
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" font-family="sans-serif" '
             f'font-size="12"><text x="{LEFT}" y="18" font-size="14">{escape(title)}</text>']
    if not lines:
        parts.append(f'<text x="{LEFT}" y="{HEIGHT // 2}">no steps yet</text></svg>')
        return "\n".join(parts)
    values = [v for line in lines.values() for v in line] + ([bar] if bar else [])
    low, high = min(values), max(values)
    low, high = (low / 1.1, high * 1.1) if high > low else (low / 2, high * 2)
    steps = max(len(line) for line in lines.values())
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def x(step: float) -> float:
        return LEFT + plot_w * step / max(steps - 1, 1)

    def y(loss: float) -> float:
        return TOP + plot_h * (math.log(high) - math.log(loss)) / (math.log(high) - math.log(low))

    parts.append(f'<rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#999"/>')
    for tick in log_ticks(low, high):
        parts.append(f'<line x1="{LEFT}" x2="{LEFT + plot_w}" y1="{y(tick):.1f}" y2="{y(tick):.1f}" stroke="#eee"/>'
                     f'<text x="{LEFT - 6}" y="{y(tick) + 4:.1f}" text-anchor="end">{tick:g}</text>')
    for tick in step_ticks(steps - 1):
        parts.append(f'<text x="{x(tick):.1f}" y="{TOP + plot_h + 16}" text-anchor="middle">{tick}</text>')
    parts.append(f'<text x="{LEFT + plot_w / 2}" y="{HEIGHT - 10}" text-anchor="middle">step (loss: mean of the '
                 f'last {window} steps, log scale)</text>')
    for label, step in marks.items():
        parts.append(f'<line x1="{x(step):.1f}" x2="{x(step):.1f}" y1="{TOP}" y2="{TOP + plot_h}" stroke="#555" '
                     f'stroke-dasharray="4 3"/><text x="{x(step) + 4:.1f}" y="{TOP + 14}">{escape(label)}</text>')
    if bar:
        parts.append(f'<line x1="{LEFT}" x2="{LEFT + plot_w}" y1="{y(bar):.1f}" y2="{y(bar):.1f}" stroke="#e15759" '
                     f'stroke-dasharray="6 3"/><text x="{LEFT + 4}" y="{y(bar) - 4:.1f}" fill="#e15759">{bar:g}</text>')
    for index, (label, line) in enumerate(lines.items()):
        color = COLORS[index % len(COLORS)]
        every = max(1, len(line) // plot_w)  # about one point a pixel
        points = " ".join(f"{x(s):.1f},{y(v):.1f}" for s, v in enumerate(line) if s % every == 0 or s == len(line) - 1)
        parts.append(f'<polyline fill="none" stroke="{color}" stroke-width="1.5" points="{points}">'
                     f'<title>{escape(label)}</title></polyline>')
        if len(lines) > 1:
            parts.append(f'<text x="{LEFT + plot_w - 8}" y="{TOP + 34 + 16 * index}" text-anchor="end" fill="{color}">'
                         f'{escape(label)}: {line[-1]:.3f} at step {len(line) - 1}</text>')
    parts.append("</svg>")
    return "\n".join(parts)


def phase_marks(phase_starts: dict[str, int | None]) -> dict[str, int]:
    """Where each phase after the first began: the full mix after a curriculum, the finish."""
    labels = {FULL: "full mix", FINISH: "finish"}
    return {f"{labels[name]} from step {start}": start for name, start in phase_starts.items()
            if name in labels and start}


def write_run_plot(state_dir: Path, losses: list[float], phase_starts: dict[str, int | None]) -> Path:
    """`state_dir/loss.svg`: the run's loss, the start of each phase after the first marked."""
    path = state_dir / "loss.svg"
    path.write_text(loss_svg({"loss": losses}, phase_marks(phase_starts), title=f"training loss, {state_dir}"))
    return path


def curriculum_losses(state_path: Path) -> list[float]:
    """The loss of each curriculum step in a saved run state (all its steps, if the curriculum had not ended)."""
    state = load_state(state_path)
    return state["losses"][:saved_phase_starts(state)[FULL] or state["step"]]


def write_race_plot(state_dir: Path, seeds: dict[int, Path], bar: float | None) -> Path:
    """`state_dir/race.svg`: each candidate's curriculum loss up to its last saved state (one stopped before
    its first checkpoint has none), and the bar they race to."""
    curves = {f"seed {seed}": curriculum_losses(state_path) for seed, state_path in seeds.items()
              if state_path.is_file()}
    path = state_dir / "race.svg"
    path.write_text(loss_svg(curves, bar=bar, title="the copying curriculum, seed by seed"))
    return path


def main(argv: list[str] | None = None) -> None:
    parser = ArgumentParser(prog="python -m dlm.train.loss_plot", description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("state_dir", type=Path, help="a run's [train] state_dir (it holds state.pt, or a race's "
                                                     "candidates/seed-N/state.pt)")
    args = parser.parse_args(argv)
    try:
        for path in redraw(args.state_dir):
            print(path)
    except RunConfigError as err:  # a truncated or corrupt state
        parser.exit(2, f"error: {err}\n")


def redraw(state_dir: Path) -> list[Path]:
    """The pictures of what `state_dir` holds: the run's loss once it has a state, the race as soon as a
    candidate has one (a race in progress holds nothing else yet)."""
    state_path = state_dir / "state.pt"
    seeds = candidate_states(state_dir)
    if not state_path.is_file() and not seeds:
        raise RunConfigError(f"{state_path}: no run state there, nor a race's in {state_dir / 'candidates'}")
    drawn = []
    state = load_state(state_path) if state_path.is_file() else None
    if state is not None:
        drawn.append(write_run_plot(state_dir, state["losses"], saved_phase_starts(state)))
    if seeds:
        config = (state or load_state(next(iter(seeds.values()))))["config"]  # any state of the run holds it
        drawn.append(write_race_plot(state_dir, seeds, config["curriculum"]["until_loss"] or None))
    return drawn


if __name__ == "__main__":
    main()
