"""Our logits equal the ``transformers`` library's own Qwen3 / Qwen2 models on the same weights.

Small random HF models are saved with ``save_pretrained``; their config.json is rewritten into the SDAR
(Qwen3 layout) and Fast-dLLM v2 (Qwen2 layout) formats and loaded with our loader. The HF models get the
equivalent 4D block-causal mask as an additive float mask.
"""

import json

import pytest
import torch

transformers = pytest.importorskip("transformers")

from dlm.checkpoint import load_model  # noqa: E402
from dlm.model import block_causal_mask  # noqa: E402

SHAPE = dict(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=128, rope_theta=10000.0, rms_norm_eps=1e-6)


def _hf_model(kind: str, tied: bool):
    torch.manual_seed(0)
    if kind == "qwen3":
        cfg = transformers.Qwen3Config(head_dim=16, tie_word_embeddings=tied, attn_implementation="eager", **SHAPE)
        model = transformers.Qwen3ForCausalLM(cfg)
    else:
        cfg = transformers.Qwen2Config(tie_word_embeddings=tied, attn_implementation="eager", **SHAPE)
        model = transformers.Qwen2ForCausalLM(cfg)
    with torch.no_grad():  # HF's init is tiny (std 0.02); make the logits carry signal
        for p in model.parameters():
            p.normal_(0, 0.3) if p.dim() == 2 else p.add_(0.1 * torch.randn_like(p))
    return model.eval()


def _as_family(path, kind: str, block: int) -> None:
    cfg = json.loads((path / "config.json").read_text())
    if kind == "qwen3":
        cfg.update(model_type="sdar", block_size=block, mask_token_id=SHAPE["vocab_size"] - 1)
    else:
        cfg.update(model_type="Fast_dLLM_Qwen", bd_size=block, mask_token_id=SHAPE["vocab_size"] - 1)
    (path / "config.json").write_text(json.dumps(cfg))


@pytest.mark.parametrize("kind,tied", [("qwen3", False), ("qwen3", True), ("qwen2", False)])
def test_logits_match_transformers(tmp_path, kind, tied):
    hf = _hf_model(kind, tied)
    hf.save_pretrained(tmp_path, safe_serialization=True)
    _as_family(tmp_path, kind, block=4)
    ours = load_model(tmp_path)
    assert ours.cfg.qk_norm == (kind == "qwen3") and ours.cfg.qkv_bias == (kind == "qwen2")
    ids = torch.randint(0, SHAPE["vocab_size"], (2, 22), generator=torch.Generator().manual_seed(1))
    allowed = block_causal_mask(ids.shape[1], 4)
    additive = torch.zeros(allowed.shape).masked_fill(~allowed, torch.finfo(torch.float32).min)
    with torch.no_grad():
        want = hf(input_ids=ids, attention_mask=additive[None, None].expand(2, 1, -1, -1)).logits
        got = ours(ids, attn_mask=allowed)
        causal = ours(ids, attn_mask=torch.ones_like(allowed).tril())
    assert want.abs().max() > 1.0  # the comparison is not between two near-zero tensors
    assert (got - want).abs().max().item() < 1e-4
    assert (causal - want).abs().max().item() > 1e-2  # HF really applied the block-causal mask
