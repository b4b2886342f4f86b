"""The GPU check's pass picture, drawn from the H200 run of 2026-12-04 (`_run7`): kernel families, the segments'
sum, the floor and goal lines."""

import json
import re
from pathlib import Path

import pytest

from latency_bench.gpu_plot import FAMILIES, kernel_family, pass_breakdown_svg, pass_segments

RUN7 = Path(__file__).parents[2] / "latency_bench/results/gpu_check_h200_2026-12-04_run7.json"


@pytest.mark.parametrize(("name", "family"), [
    ("nvjet_sm90_tst_128x16_64x11_4x1_v_bz_TNT", "matrix products"),
    ("void cublasLt::splitKreduce_kernel<32, 16, int, float, __nv_bfloat16, ", "matrix products"),
    ("_thin_linear_kernel", "matrix products"),
    ("_block_partials_kernel", "attention"),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x", "attention"),
    ("_add_rms_norm_kernel", "norms, RoPE, SwiGLU, copies"),
    ("_qk_norm_rope_kernel", "norms, RoPE, SwiGLU, copies"),
    ("_partials_kernel", "other kernels"),  # the confidence selection
])  # fmt: skip
def test_profiled_kernels_fall_in_their_family(name, family):
    assert kernel_family(name) == family


def test_a_pass_is_its_kernels_by_family_and_the_gaps_between_them():
    profile = json.loads(RUN7.read_text())["profiles"][4]
    assert (profile["shape"], profile["path"]) == ("sdar-1.7b", "triton")
    us = pass_segments(profile)
    assert sum(us.values()) == pytest.approx(profile["graphed_pass_ms"] * 1000)
    assert us["matrix products"] == pytest.approx(454.4 + 265.5 + 209.2 + 165.2 + 152.6 + 49.8)
    assert us["attention"] == pytest.approx(274.9 + 106.1)
    assert us["gaps between kernels"] == pytest.approx(2223 - 1925.5)


def test_the_picture_has_a_bar_a_profile_and_each_shapes_floor():
    report = json.loads(RUN7.read_text())
    floors = {r["shape"]: r["weight_floor_ms"] for r in report["models"]}
    svg = pass_breakdown_svg(report["profiles"], floors, 1.25)
    assert svg.startswith("<svg") and svg.endswith("</svg>")
    assert len(re.findall(r"<rect [^>]*><title>", svg)) == len(report["profiles"]) * (len(FAMILIES) + 1)
    assert svg.count("weight-read floor") == 2 and svg.count("goal: 1.25x floor") == 2
    assert "2.22 ms (2.73x floor)" in svg  # the 1.7B pass over 4K on the Triton path, as the goals table has it
