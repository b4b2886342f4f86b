"""The loss pictures a training run draws: real runs of a tiny model, the SVG read back as XML."""

from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from dlm.train.candidates import train_with_candidates
from dlm.train.config import from_dict
from dlm.train.loss_plot import log_ticks, loss_svg, smoothed, step_ticks
from dlm.train.phases import saved_phase_starts
from dlm.train.train import train
from tests.dlm.test_train import tiny_run

SVG = "{http://www.w3.org/2000/svg}"


def polylines(svg: str) -> list[list[tuple[float, float]]]:
    root = ET.fromstring(svg)
    return [[tuple(map(float, point.split(","))) for point in line.get("points", "").split()]
            for line in root.iter(f"{SVG}polyline")]


def texts(svg: str) -> list[str]:
    return [t.text or "" for t in ET.fromstring(svg).iter(f"{SVG}text")]


def test_smoothing_is_the_trailing_mean() -> None:
    assert smoothed([4.0, 2.0, 6.0, 0.0], window=2) == [4.0, 3.0, 4.0, 3.0]


def test_axis_ticks_are_round_and_in_range() -> None:
    assert log_ticks(0.15, 9.0) == [0.2, 0.5, 1.0, 2.0, 5.0]
    assert step_ticks(7737) == [0, 2000, 4000, 6000]
    assert step_ticks(3) == [0, 1, 2, 3]


def test_a_falling_loss_is_drawn_going_down_with_its_marks() -> None:
    svg = loss_svg({"seed 0": [8.0, 4.0, 2.0, 1.0], "seed 1": [8.0, 6.0, 5.0, 4.0]}, {"full mix": 2}, bar=0.9,
                   window=1)
    first, second = polylines(svg)
    assert [p[1] for p in first] == sorted(p[1] for p in first)  # SVG y grows downwards
    assert first[-1][1] > second[-1][1] and first[0] == second[0]
    assert "full mix" in texts(svg) and "0.9" in texts(svg)
    assert any("seed 1: 4.000 at step 3" in t for t in texts(svg))


def test_nothing_to_draw_says_so() -> None:
    assert "no steps yet" in texts(loss_svg({"loss": []}))


def test_a_run_draws_its_loss_with_the_start_of_the_full_mix_and_of_the_finish(tmp_path: Path) -> None:
    result = train(from_dict(tiny_run(tmp_path, steps=12, curriculum_steps=5, finish_steps=3)), progress=False)
    svg = (tmp_path / "state" / "loss.svg").read_text()
    (line,) = polylines(svg)
    assert len(line) == result.steps
    assert {"full mix from step 5", "finish from step 9"} <= set(texts(svg))


def test_states_saved_before_the_finish_existed_read_the_same() -> None:
    # those saved each phase's first step in a list: the curriculum's and the full mix's, or the full mix's
    assert saved_phase_starts({"phase_starts": [0, 1301]}) == {"curriculum": 0, "full": 1301}
    assert saved_phase_starts({"phase_starts": [0]}) == {"full": 0}
    assert saved_phase_starts({"phase_starts": {"full": 0, "finish": None}}) == {"full": 0, "finish": None}


def test_a_race_draws_each_seed_and_the_bar(tmp_path: Path) -> None:
    config = tiny_run(tmp_path, steps=8, curriculum_steps=6)
    config["curriculum"]["candidates"] = 2
    train_with_candidates(from_dict(config), progress=False)
    svg = (tmp_path / "state" / "race.svg").read_text()
    assert len(polylines(svg)) == 2 and any(t.startswith("seed 1:") for t in texts(svg))


def test_the_command_redraws_from_a_saved_state_and_refuses_a_folder_without_one(tmp_path: Path) -> None:
    train(from_dict(tiny_run(tmp_path, steps=4)), progress=False)
    (tmp_path / "state" / "loss.svg").unlink()
    done = subprocess.run([sys.executable, "-m", "dlm.train.loss_plot", str(tmp_path / "state")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and (tmp_path / "state" / "loss.svg").is_file()
    refused = subprocess.run([sys.executable, "-m", "dlm.train.loss_plot", str(tmp_path)],
                             capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and "no run state there" in refused.stderr
