"""Cached block decoding gives exactly the tokens of recomputing the whole sequence at every pass.

The KV cache of a block-causal model is exact: a window attending to the committed blocks' cached keys
sees the same keys a full forward under the block-causal mask of the same blocks computes. Checked on the
SDAR and Fast-dLLM v2 fixture checkpoints, greedy, over block schedules, sub-blocks, thresholds and fixed
pass counts, with prompts that end mid-block, on a boundary, and shorter than a block.
"""

import itertools
import json

import pytest
import torch

from dlm.checkpoint import load_checkpoint
from dlm.decoding.block_causal import BlockPolicy, CachedForward, RecomputeForward, decode
from dlm.kv_cache import KVCache

POLICIES = [
    dict(threshold=0.3), dict(threshold=0.9), dict(threshold=None, passes_per_block=2),
    dict(threshold=None, passes_per_block=1), dict(threshold=0.5, sub_block=2),
]
SCHEDULES = [(), (2,), (2, 4)]
COMBOS = list(zip(POLICIES, itertools.cycle(SCHEDULES)))  # every policy, every schedule, kept small


def _prompts(ref, block):
    prompts = [e["prompt_ids"] for e in ref["generation"]]
    prompts.append(list(range(5, 5 + 2 * block)))  # exactly on a block boundary
    unique = []
    for p in prompts:
        if p not in unique:
            unique.append(p)
    return unique


def _run(cfg, forward, prompt, policy, last):
    out, blocks = [], 0
    for commit in decode(cfg, forward, list(prompt), policy, last):
        out.extend(commit.token_ids)
        blocks += commit.block_done
    return out, blocks


@pytest.mark.parametrize("family", ["sdar", "fast_dllm_v2"])
def test_cached_decode_equals_full_recompute(fixtures_dir, family):
    model, _ = load_checkpoint(fixtures_dir / family / "checkpoint")
    ref = json.loads((fixtures_dir / family / "reference.json").read_text())
    block = model.cfg.block_size
    checked = 0
    for prompt, (knobs, first) in itertools.product(_prompts(ref, block), COMBOS):
        policy = BlockPolicy(block_size=block, first_blocks=first, max_new_tokens=3 * block, **knobs)
        cached = CachedForward(model, KVCache(model.cfg, 128))
        cached.extend(prompt[:len(prompt) // block * block], block)
        baseline = RecomputeForward(model, cached.tokens, cached.ends)  # copies the prefix and its blocks
        last = cached.last_logits
        got, blocks = _run(model.cfg, cached, prompt, policy, last)
        want, _ = _run(model.cfg, baseline, prompt, policy, last)
        assert got == want, (prompt, knobs, first)
        assert len(got) == 3 * block and blocks >= 2
        assert cached.ends == baseline.ends  # the same block boundaries were committed
        checked += 1
    assert checked == len(_prompts(ref, block)) * len(COMBOS)


def test_block_schedule_sets_the_boundaries(fixtures_dir):
    """A first block of 2 on a 4-block model ends on a multiple of 2, then blocks end on multiples of 4."""
    model, _ = load_checkpoint(fixtures_dir / "sdar" / "checkpoint")
    prompt = list(range(10, 19))  # 9 tokens: 8 cached, 1 in the first window
    cached = CachedForward(model, KVCache(model.cfg, 64))
    cached.extend(prompt[:8], 4)
    policy = BlockPolicy(block_size=4, first_blocks=(2,), threshold=0.5, max_new_tokens=9)
    commits = list(decode(model.cfg, cached, list(prompt), policy, None))
    assert cached.ends == [4, 8, 10, 12, 16]
    assert sum(len(c.token_ids) for c in commits) == 9
    assert torch.equal(torch.tensor(cached.tokens[:9]), torch.tensor(prompt))


def test_decoding_past_the_context_is_refused_rather_than_spun_on(fixtures_dir):
    """With a budget past the context the last window was cut to nothing and decoded for ever; now the
    tokens up to the context's end come out and then a clear error (callers cap the budget at the room)."""
    model, _ = load_checkpoint(fixtures_dir / "sdar" / "checkpoint")
    ctx = model.cfg.max_position_embeddings
    prompt = [10 + i % 50 for i in range(ctx - 3)]
    cached = CachedForward(model, KVCache(model.cfg, ctx))
    cached.extend(prompt[:len(prompt) // 4 * 4], 4)
    policy = BlockPolicy(block_size=4, threshold=0.5, max_new_tokens=16)
    got: list[int] = []
    with pytest.raises(ValueError, match="reached the end of the context"):
        for commit in decode(model.cfg, cached, list(prompt), policy, cached.last_logits):
            got.extend(commit.token_ids)
    assert len(got) == 3
