"""The model's logits equal those the families' official code produced from the same weights."""

import json

import pytest
import torch
from safetensors.torch import load_file

from dlm.checkpoint import load_model
from dlm.model import block_causal_mask

FAMILIES = ("sdar", "llada", "fast_dllm_v2", "dream")


@pytest.mark.parametrize("family", FAMILIES)
def test_forward_logits_match_reference(fixtures_dir, family):
    root = fixtures_dir / family
    ref = json.loads((root / "reference.json").read_text())
    expected = load_file(str(root / "logits.safetensors"))
    model = load_model(root / "checkpoint")
    for item in ref["forward"]["inputs"]:
        ids = torch.tensor([item["input_ids"]])
        mask = None
        if not model.cfg.bidirectional:
            mask = block_causal_mask(ids.shape[1], model.cfg.block_size)
        logits = model(ids, attn_mask=mask)[0]
        assert (logits - expected[item["key"]]).abs().max().item() <= 1e-4
        assert logits.argmax(-1).tolist() == item.get("argmax", item.get("argmax_raw"))
