"""The training-step benchmark times eager, compiled and compiled bf16 steps of a config's shape and reports
their ratios."""

import json

from latency_bench.__main__ import main

TINY = """
[data]
train_examples = 100
vocab_size = 400
max_length = 256
[model]
hidden_size = 32
num_layers = 1
num_heads = 2
num_kv_heads = 1
head_dim = 16
intermediate_size = 64
block_size = 4
[train]
batch_size = 4
block_sizes = [4, 8]
"""


def test_train_step_bench_json(tmp_path, capsys):
    config, out = tmp_path / "tiny.toml", tmp_path / "bench.json"
    config.write_text(TINY)
    assert main(["train-step", "--config", str(config), "--steps", "2", "--examples", "60", "--threads", "1",
                 "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    for mode in ("eager", "compiled", "compiled_bf16"):
        assert report[mode]["median_s"] > 0 and report[mode]["warmup_s"] > 0
    ratio = report["speedup_compiled_bf16_vs_compiled"]
    assert ratio["median"] == report["compiled"]["median_s"] / report["compiled_bf16"]["median_s"]
    assert ratio["mean"] == report["compiled"]["mean_s"] / report["compiled_bf16"]["mean_s"]
    assert "compiled_bf16 is" in capsys.readouterr().out
