"""Several sessions' passes run as one batched forward and give what they give one at a time."""

import asyncio

import pytest
import torch

from dlm.batching import run_passes
from dlm.checkpoint import load_checkpoint
from dlm.decoding.block_causal import CachedForward, Pass, run_pass
from dlm.engine import Engine
from dlm.kv_cache import KVCache


@pytest.fixture(scope="module")
def model(fixtures_dir):
    return load_checkpoint(fixtures_dir / "sdar" / "checkpoint")[0]


def _session(model, prompt_len, seed):
    ids = torch.randint(0, 97, (prompt_len,), generator=torch.Generator().manual_seed(seed)).tolist()
    state = CachedForward(model, KVCache(model.cfg, 64))
    state.extend(ids, 4)
    return state


def _window(seed):
    return torch.randint(0, 97, (4,), generator=torch.Generator().manual_seed(100 + seed))


@pytest.mark.parametrize("kind", ["denoise", "fused", "commit"])
def test_batched_passes_equal_single_passes(model, kind):
    lengths = (8, 20, 12)
    batched = [_session(model, n, i) for i, n in enumerate(lengths)]
    single = [_session(model, n, i) for i, n in enumerate(lengths)]
    rows = torch.tensor([0, 2, 3])

    def request(state, i):
        if kind == "commit":
            return Pass(state, _window(i), None)
        return Pass(state, _window(i), rows, _window(i + 7) if kind == "fused" else None)

    got, count = run_passes(model, [request(s, i) for i, s in enumerate(batched)])
    want = [run_pass(request(s, i)) for i, s in enumerate(single)]
    assert count == len(lengths)
    for g, w in zip(got, want, strict=True):
        assert (g - w).abs().max() < 1e-4
    for b, s in zip(batched, single, strict=True):  # the same KV was committed
        assert b.length == s.length and b.tokens == s.tokens and b.ends == s.ends
        n = s.length
        assert (b.cache.k[:, :, :, :n] - s.cache.k[:, :, :, :n]).abs().max() < 1e-4


def test_concurrent_streams_are_batched_and_match_sequential(fixtures_dir):
    engine = Engine.from_dir(fixtures_dir / "sdar" / "checkpoint")
    prompts = [[{"role": "user", "content": text}] for text in ("Hi!", "What time is it now?", "Tell me more")]
    opts = dict(max_new_tokens=12, passes_per_block=2)
    want = [engine.generate(p, **opts).token_ids for p in prompts]
    assert engine.scheduler.batched_passes == 0

    async def main():
        async def one(p):
            session = engine.new_session()
            _ = [piece async for piece in engine.stream(p, session=session, **opts)]
            return session.last_result.token_ids
        return await asyncio.gather(*(one(p) for p in prompts))

    assert asyncio.run(main()) == want
    assert engine.scheduler.batched_passes > 0
    engine.close()
