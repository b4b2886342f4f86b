"""The GPU check script and its model-shape harness, run on the CPU (dry run, tiny shapes)."""

import datetime
import json

import pytest
import torch

from latency_bench import gpu_check
from latency_bench.gpu_shapes import SHAPES, RandomQwen3


def test_dry_run_writes_a_complete_report(tmp_path):
    assert gpu_check.main(["--dry-run", "--out-dir", str(tmp_path)]) == 0
    (js,) = tmp_path.glob("gpu_check_dryrun_*.json")
    report = json.loads(js.read_text())
    assert report["errors"] == []
    assert list(report["env"]["section_seconds"]) == [  # the sections in order, each with what it cost
        "copy bandwidth", "correctness", "kernel timings", "model shapes", "tuning sweep", "engine model at scale",
        "engine", "flex attention"]
    assert all(seconds >= 0 for seconds in report["env"]["section_seconds"].values())
    assert len(report["correctness"]) >= 10 and all(c["ok"] for c in report["correctness"])
    kernels = {r["kernel"] for r in report["kernels"]}
    assert {"confidence", "block_attention (tensor len)", "block_causal_attention"} <= kernels
    assert {"add_rms_norm", "silu_mul", "qk_norm_rope (+ KV write)"} <= kernels
    flex = {(r["kernel"], r["shape"]) for r in report["kernels"] if r["path"] == "flex"}
    assert {kernel for kernel, _ in flex} == {"block_attention (tensor len)", "block_causal_attention"}
    assert flex <= {(r["kernel"], r["shape"]) for r in report["kernels"] if r["path"] == "triton"}  # same shapes
    assert any(c["case"].startswith("flex attention") and c["ok"] for c in report["correctness"])
    variants = {"triton", "torch", "triton, thin GEMM", "triton, thin GEMM, PDL"}
    assert {r["path"] for r in report["models"]} == variants and {r["path"] for r in report["profiles"]} == variants
    assert all(p["kernel_launches"] > 0 and p["top"] for p in report["profiles"])
    shapes = {(r["kernel"], r["shape"]) for r in report["tuning"]}
    assert sum(r["best"] for r in report["tuning"]) == len(shapes) and any(r["params"] == "auto" for r in report["tuning"])
    assert {r["shape"].split()[0] for r in report["tuning"] if r["kernel"] == "linear"} == {
        "qkv", "o", "gate_up", "down", "lm_head"}
    assert {r["params"] for r in report["tuning"] if r["kernel"] == "attention input"} == {
        "auto (cuBLAS + qk_norm_rope)", "thin, one launch, split_k=1", "thin, one launch, split_k=2"}
    assert {"auto", "auto, one launch"} <= {r["params"] for r in report["tuning"] if r["kernel"] == "block_attention"}
    assert {"block_v=auto splits=auto lanewise max_registers=48",
            "block_v=auto splits=auto lanewise stages=3 max_registers=40"} <= {
        r["params"] for r in report["tuning"] if r["kernel"] == "confidence"}
    assert {r["params"] for r in report["tuning"] if r["kernel"] == "block_causal_attention"} == {
        "auto", "block_m=16 block_n=16 stages=2", "block_m=16 block_n=16 stages=2, heavy first"}
    assert any("one launch" in c["case"] for c in report["correctness"])
    assert {r["params"] for r in report["tuning"] if r["kernel"] == "model pass (thin GEMM, PDL)"} == {
        "auto (prefetch 8 MB)", "prefetch 0 MB", "prefetch 2 MB", "prefetch 32 MB"}
    assert {r["batch"] for r in report["decode"]} == {1, 2}
    assert all(r["pass_ms"] > 0 for r in report["models"] + report["decode"])
    assert [(r["cuda_graphs"], r["kernels"], r["dtype"]) for r in report["engine"]] == [
        ("off", "triton", "float32"), ("on", "triton", "float32"), ("on", "torch", "float32"),
        ("off", "torch", "float32")]  # the last: as served, every setting on auto (here: the CPU's torch path)
    assert report["engine"][-1]["engine"] == "demo checkpoint, as served"
    assert report["engine"][-1]["same_ids_as_float32"] == 1.0  # the same model, path and dtype as the eager row
    assert all(r["first_block_ms"] > 0 and r["ms_per_pass"] > 0 for r in report["engine"])
    assert all((r["cuda_graphs"] == "on") == (r.get("graphed_forward_ms", 0) > 0) for r in report["engine"])
    at_scale = report["engine_at_scale"]
    assert [(r["model"].split("(")[1][:-1], r["kernels"]) for r in at_scale] == [
        ("sdar", "triton"), ("sdar", "torch"), ("sdar", "triton, thin GEMM, PDL"),  # the candidate on one family
        ("fast_dllm_qwen", "triton"), ("fast_dllm_qwen", "torch")]
    assert all(r["graphed_pass_ms"] > 0 and r["argmax_agree"] > 0.9 for r in at_scale)
    assert all(r["lean_bench_pass_ms"] and r["eager_kernel_launches"] > 0 for r in at_scale)
    trial = report["layer_trials"]  # the engine's start-up choice, run on the first family's model
    assert [r["steps"] for r in trial] == ["triton", "triton, thin GEMM", "triton, thin GEMM, PDL"]
    assert sum(r["chosen"] for r in trial) == 1
    assert all(r["dropped"] == "" and r["argmax_agree"] >= 0.9 for r in trial), trial
    md = js.with_suffix(".md")
    assert "## Goals" in md.read_text() and "| confidence |" in md.read_text()
    picture = md.with_name(f"{md.stem}_pass.svg")  # the profiled passes drawn beside the report, which shows it
    assert picture.read_text().startswith("<svg") and f"]({picture.name})" in md.read_text()
    assert "| demo checkpoint | on | triton |" in md.read_text()

    # a saved report renders again without measuring (the tables as this version draws them)
    md.unlink()
    assert gpu_check.main(["--render", str(js)]) == 0
    assert "## Tuning sweep" in md.read_text() and "| demo checkpoint | on | triton |" in md.read_text()
    with pytest.raises(SystemExit, match="cannot read a report"):
        gpu_check.main(["--render", str(tmp_path / "missing.json")])


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU refusal")
def test_refuses_to_run_without_cuda():
    with pytest.raises(SystemExit, match="no CUDA device"):
        gpu_check.main([])


def test_goals_are_judged_on_the_best_path():
    report = gpu_check.Report(
        kernels=[{"kernel": "confidence", "path": "triton", "bw_frac": 0.8}],
        models=[
            {"shape": "sdar-1.7b", "prompt": 4096, "path": "triton", "pass_over_floor": 1.2},
            {"shape": "sdar-1.7b", "prompt": 4096, "path": "torch", "pass_over_floor": 2.0},
        ],
        decode=[{"shape": "sdar-1.7b", "batch": 1, "path": "triton", "tok_s_at_3_per_pass": 2500}],
    )
    gpu_check.evaluate_goals(report)
    met = {g["goal"]: g["met"] for g in report.goals}
    assert met["confidence kernel >= 70% of copy bandwidth (best batch)"] is True
    assert met["sdar-1.7b pass @4K cache <= 1.25x weight-read floor"] is True
    assert met["sdar-1.7b decode batch 1 >= 3000 tok/s"] is False
    assert met["sdar-1.7b first block warm @512 <= 5 ms"] is None  # not measured


@pytest.mark.parametrize("batch", [1, 2])  # one block is the thin kernel's 16 rows; two go to cuBLAS's path
def test_model_step_agrees_across_kernel_paths(batch):
    torch.manual_seed(0)
    model = RandomQwen3(SHAPES["tiny"], batch, 48, torch.device("cpu"), torch.float32, "torch")
    prompt = torch.randint(0, 500, (batch, 24))
    logits = {}
    for path, thin, pdl in (("torch", False, False), ("triton", False, False), ("triton", True, False),
                            ("triton", True, True)):
        model.path, model.thin, model.pdl = path, thin, pdl
        model.prefill(prompt, 8)
        tokens = torch.full((batch, 16), 511, dtype=torch.int64)
        masked = torch.ones(batch, 16, dtype=torch.bool)
        logits[model.label] = model.block_logits(tokens, torch.tensor([24]))
        count = model.denoise_step(tokens, masked, torch.tensor([24]), threshold=0.0)
        # threshold 0 commits the whole block, each position its argmax (the pass is deterministic)
        assert count.tolist() == [16] * batch and not masked.any()
        assert torch.equal(tokens, logits[model.label].argmax(-1))
    for label in ("triton", "triton, thin GEMM", "triton, thin GEMM, PDL"):
        torch.testing.assert_close(logits[label], logits["torch"], atol=1e-4, rtol=1e-4)
    s = SHAPES["tiny"]  # q/k/v, o, gate/up and down, two norms and the q/k norms a layer; the tied head, final norm
    per_layer = (s.heads + 2 * s.kv_heads + s.heads) * s.head_dim * s.hidden + 3 * s.intermediate * s.hidden
    per_layer += 2 * s.hidden + 2 * s.head_dim
    assert model.weight_bytes() == 4 * (s.layers * per_layer + s.vocab * s.hidden + s.hidden)


def test_a_run_cut_short_by_its_time_limit_keeps_what_it_measured(tmp_path):
    """gpu_check.sh's `timeout` sends SIGTERM: the sections already run stay written, the cut one is named."""
    import os
    import signal
    import subprocess
    import sys

    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "latency_bench.gpu_check", "--dry-run", "--out-dir", str(tmp_path)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)  # fmt: skip
    try:
        for line in proc.stdout:
            if line.startswith("== correctness"):  # the first section is done and written
                proc.send_signal(signal.SIGTERM)
                break
        _, stderr = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 1, stderr
    report = json.loads(next(tmp_path.glob("gpu_check_dryrun_*.json")).read_text())
    assert report["env"]["copy_bandwidth_gbs"] > 0
    assert list(report["env"]["section_seconds"]) == ["copy bandwidth", "correctness"]
    assert len(report["errors"]) == 1 and report["errors"][0].startswith("correctness: cut short by the time limit")
    assert "cut short by the time limit" in stderr


def test_a_rerun_of_some_sections_keeps_the_earlier_report(tmp_path):
    """--sections runs only those (after the copy bandwidth), into a report beside the day's earlier one."""
    earlier = tmp_path / f"gpu_check_dryrun_{datetime.date.today().isoformat()}.json"
    earlier.write_text('{"kept": true}')
    assert gpu_check.main(["--dry-run", "--out-dir", str(tmp_path), "--sections", "flex-attention"]) == 0
    assert json.loads(earlier.read_text()) == {"kept": True}
    report = json.loads(earlier.with_name(earlier.stem + "_run2.json").read_text())
    assert list(report["env"]["section_seconds"]) == ["copy bandwidth", "flex attention"]
    assert report["errors"] == [] and {r["path"] for r in report["kernels"]} == {"flex"}
    assert report["models"] == [] and report["engine"] == []


def test_an_unknown_section_is_refused_with_the_names(capsys):
    with pytest.raises(SystemExit) as exit_info:
        gpu_check.main(["--dry-run", "--sections", "correctness,warp drive"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "warp drive" in err and "flex attention" in err
