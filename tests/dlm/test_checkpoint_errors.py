"""Bad checkpoints fail with a CheckpointError that names the file and the problem."""

import json
import shutil

import pytest
from safetensors.torch import load_file, save_file
from tokenizers import Tokenizer as HFTokenizer

from dlm.checkpoint import load_checkpoint
from dlm.config import CheckpointError
from dlm.engine import Engine


@pytest.fixture
def ckpt(fixtures_dir, tmp_path):
    out = tmp_path / "ckpt"
    shutil.copytree(fixtures_dir / "sdar" / "checkpoint", out)
    return out


def _edit_config(path, **changes):
    cfg = json.loads((path / "config.json").read_text())
    cfg.update(changes)
    (path / "config.json").write_text(json.dumps(cfg))


def _rewrite_weights(path, edit):
    tensors = load_file(str(path / "model.safetensors"))
    edit(tensors)
    save_file(tensors, str(path / "model.safetensors"))


def test_the_copy_loads(ckpt):
    model, tokenizer = load_checkpoint(ckpt)
    assert model.cfg.model_type == "sdar" and tokenizer.vocab_size == 320


def test_unknown_model_type(ckpt):
    _edit_config(ckpt, model_type="mamba")
    with pytest.raises(CheckpointError, match=r"unknown model_type 'mamba'.*supported: .*sdar"):
        load_checkpoint(ckpt)


def test_missing_tensor(ckpt):
    _rewrite_weights(ckpt, lambda t: t.pop("model.layers.1.mlp.up_proj.weight"))
    with pytest.raises(CheckpointError, match=r"missing tensor\(s\) model\.layers\.1\.mlp\.up_proj\.weight"):
        load_checkpoint(ckpt)


def test_misshaped_tensor(ckpt):
    def shrink(t):
        t["model.layers.0.self_attn.q_proj.weight"] = t["model.layers.0.self_attn.q_proj.weight"][:32]
    _rewrite_weights(ckpt, shrink)
    with pytest.raises(CheckpointError, match=r"'model\.layers\.0\.self_attn\.q_proj\.weight' has shape \(32, 64\), "
                                              r"expected \(64, 64\)"):
        load_checkpoint(ckpt)


def test_mismatched_tokenizer(ckpt):
    tok = HFTokenizer.from_file(str(ckpt / "tokenizer.json"))
    tok.add_tokens([f"extra{i}" for i in range(100)])
    tok.save(str(ckpt / "tokenizer.json"))
    with pytest.raises(CheckpointError, match="tokenizer has 420 tokens but the model's vocab_size is 320"):
        load_checkpoint(ckpt)


def test_mask_id_that_is_not_a_mask_token(ckpt):
    _edit_config(ckpt, mask_token_id=40)
    with pytest.raises(CheckpointError, match="mask_token_id 40 is .* not a special mask token"):
        load_checkpoint(ckpt)


def test_truncated_safetensors(ckpt):
    data = (ckpt / "model.safetensors").read_bytes()
    (ckpt / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match=r"model\.safetensors: unreadable safetensors file"):
        load_checkpoint(ckpt)


def test_missing_files(ckpt):
    (ckpt / "tokenizer.json").unlink()
    with pytest.raises(CheckpointError, match=r"tokenizer\.json: file not found"):
        load_checkpoint(ckpt)
    (ckpt / "config.json").unlink()
    with pytest.raises(CheckpointError, match=r"config\.json: file not found"):
        load_checkpoint(ckpt)


@pytest.mark.parametrize("name", ["config.json", "generation_config.json", "tokenizer_config.json"])
@pytest.mark.parametrize(("content", "problem"), [("[1, 2]", "expected a JSON object, got a list"),
                                                  ("{bad", "invalid JSON")])
def test_malformed_json_file_is_named(ckpt, name, content, problem):
    """Each JSON file the engine reads is refused naming it, whatever reads it first (the engine reads
    generation_config.json before the checkpoint loads)."""
    (ckpt / name).write_text(content)
    with pytest.raises(CheckpointError, match=rf"^{ckpt / name}: {problem}"):
        Engine.from_dir(ckpt, device="cpu")
