"""The static-shape forward behind the engine's CUDA graphs: on the CPU it runs eagerly (capture is a
pass-through there), so these tests check that attending to the whole masked cache with device-side lengths
gives the eager forward's logits and the engine's ids, for plain windows, a finished block committed in the
same pass, token-shift families and a cache that was rolled back."""

import pytest
import torch

from dlm.checkpoint import load_checkpoint
from dlm.decoding.block_causal import CachedForward
from dlm.engine import Engine
from dlm.fused_layers import LayerSteps
from dlm.graphed_forward import GraphedForward, graphs_enabled
from dlm.kv_cache import KVCache
from kernels.dispatch import triton_available

needs_triton = pytest.mark.skipif(not triton_available(), reason="needs the triton package")
PROMPTS = ([5, 17, 42, 99, 123, 200, 7], "The quick brown fox jumps over 12 lazy dogs")


def test_setting_is_checked_and_auto_means_cuda_only():
    assert not graphs_enabled("auto", torch.device("cpu"))
    assert graphs_enabled("auto", torch.device("cuda"))
    assert graphs_enabled("on", torch.device("cpu")) and not graphs_enabled("off", torch.device("cuda"))
    with pytest.raises(ValueError, match="cuda_graphs must be one of"):
        graphs_enabled("yes", torch.device("cpu"))


def _pair(model, prompt: list[int], block: int, kernels: str) -> tuple[CachedForward, GraphedForward]:
    """Eager and static forwards over identical caches holding ``prompt``'s full blocks."""
    eager = CachedForward(model, KVCache(model.cfg, 96))
    static = GraphedForward(model, KVCache(model.cfg, 96), LayerSteps(kernels))
    for forward in (eager, static):
        forward.extend(prompt, block)
    return eager, static


# "triton": a plain window's attention is the block-attention kernel (in Triton's interpreter on the CPU)
@pytest.mark.parametrize("kernels", ["torch", pytest.param("triton", marks=needs_triton)])
def test_denoise_logits_match_the_eager_forward(fixtures_dir, kernels):
    model, _ = load_checkpoint(fixtures_dir / "sdar" / "checkpoint")
    gen = torch.Generator().manual_seed(0)
    prompt = torch.randint(0, model.cfg.vocab_size - 2, (20,), generator=gen).tolist()
    eager, static = _pair(model, prompt, 4, kernels)  # the static one's prefill: whole blocks, padded, graphed
    torch.testing.assert_close(static.last_logits, eager.last_logits, atol=1e-5, rtol=1e-5)
    window = torch.tensor([11, model.cfg.mask_token_id, 3, model.cfg.mask_token_id])
    rows = torch.tensor([1, 3])
    torch.testing.assert_close(static.denoise(window, rows), eager.denoise(window, rows), atol=1e-5, rtol=1e-5)

    # A finished block committed in the same pass: the logits, the stored KV and the new length all agree.
    pending = torch.tensor([8, 9, 10, 12])
    torch.testing.assert_close(static.denoise(window, rows, pending), eager.denoise(window, rows, pending),
                               atol=1e-5, rtol=1e-5)
    assert static.length == eager.length == 24 and static.tokens == eager.tokens
    n = eager.length
    torch.testing.assert_close(static.cache.k[:, :, :, :n], eager.cache.k[:, :, :, :n], atol=1e-6, rtol=1e-6)

    # Rolled back to an earlier block: what the cache held past the new length must be invisible.
    eager.truncate(16)
    static.truncate(16)
    torch.testing.assert_close(static.denoise(window, rows), eager.denoise(window, rows), atol=1e-5, rtol=1e-5)


@pytest.fixture(scope="module", params=["sdar", "fast_dllm_v2"])
def engines(request, fixtures_dir):
    path = fixtures_dir / request.param / "checkpoint"
    pair = {setting: Engine.from_dir(path, kernels="torch", cuda_graphs=setting) for setting in ("off", "on")}
    yield pair
    for engine in pair.values():
        engine.close()


@needs_triton
@pytest.mark.parametrize("family", ["sdar", "fast_dllm_v2"])
@pytest.mark.parametrize("layer_steps", ["fused", "thin"])
def test_kernel_path_with_static_shapes_decodes_the_eager_ids(fixtures_dir, family, layer_steps):
    """What a GPU runs: Triton selection and block attention inside the static pass (interpreted here), the
    layers' products on cuBLAS's stand-in or on the thin Triton kernel."""
    path = fixtures_dir / family / "checkpoint"
    gpu_like = Engine.from_dir(path, kernels="triton", cuda_graphs="on", layer_steps=layer_steps)
    assert gpu_like.graph_pool.steps.thin == (layer_steps == "thin") and gpu_like.layer_trials == []
    eager = Engine.from_dir(path, kernels="torch", cuda_graphs="off")
    try:
        for prompt in PROMPTS:
            got, want = (e.generate(prompt, max_new_tokens=10, threshold=0.5) for e in (gpu_like, eager))
            assert got.token_ids == want.token_ids and got.forward_passes == want.forward_passes
    finally:
        gpu_like.close()
        eager.close()


@pytest.mark.parametrize("prompt", PROMPTS)
def test_engine_decodes_the_same_ids_with_static_shapes(engines, prompt):
    assert engines["on"].cuda_graphs and not engines["off"].cuda_graphs
    for opts in ({"threshold": 0.5}, {"passes_per_block": 2}, {"threshold": 0.5, "first_block_size": 2}):
        got = {k: e.generate(prompt, max_new_tokens=14, **opts) for k, e in engines.items()}
        assert got["on"].token_ids == got["off"].token_ids and got["on"].token_ids
        assert got["on"].forward_passes == got["off"].forward_passes


def test_a_session_keeps_its_static_forward_across_turns(engines):
    engine = engines["on"]
    session = engine.new_session(capacity=64)
    first = engine.generate(PROMPTS[0], session=session, max_new_tokens=8, threshold=0.5)
    follow_up = [*PROMPTS[0], *first.token_ids, 31, 32, 33]
    # the follow-up outgrows the 64-position cache: the session regrows it, still on the static forward
    second = engine.generate(follow_up * 4, session=session, max_new_tokens=8, threshold=0.5)
    assert isinstance(session.state(1), GraphedForward)
    fresh = engines["off"].generate(follow_up * 4, max_new_tokens=8, threshold=0.5)
    assert second.token_ids == fresh.token_ids


def test_a_released_cache_and_its_graphs_serve_the_next_conversation(engines):
    """Graphs are bound to their cache's memory: the pool hands a released cache to the next session, so
    only the first conversation captures. Whatever the last one left in it must not leak into the next."""
    engine, eager = engines["on"], engines["off"]
    first = engine.new_session(capacity=96)
    engine.generate(PROMPTS[1], session=first, max_new_tokens=8, threshold=0.5)
    used = first.state(1)
    first.release()
    engine.run_on_worker(lambda: None)  # the give-back runs on the model worker, after anything queued there
    assert engine.graph_pool.free_count(96) == 1

    second = engine.new_session(capacity=96)
    got = engine.generate(PROMPTS[0], session=second, max_new_tokens=8, threshold=0.5)
    assert second.state(1) is used and engine.graph_pool.free_count(96) == 0
    assert got.token_ids == eager.generate(PROMPTS[0], max_new_tokens=8, threshold=0.5).token_ids
    second.release()

    # a generation without a session of its own borrows a pooled cache and gives it back when done
    default = engine.new_session().capacity
    for _ in range(2):
        engine.generate(PROMPTS[1], max_new_tokens=4)
        engine.run_on_worker(lambda: None)  # the give-back runs on the model worker, after the job closes
        assert engine.graph_pool.free_count(default) == 1


def test_a_grown_sessions_old_cache_in_the_pool_shares_nothing_with_it(engines):
    """Growing a session hands its smaller cache to the pool; another session taking that one must not
    disturb what the grown session remembers."""
    engine = engines["on"]
    grown = engine.new_session(capacity=32)
    engine.generate(PROMPTS[0] * 4, session=grown, max_new_tokens=4)  # outgrows 32 positions
    remembered = list(grown.tokens)
    engine.run_on_worker(lambda: None)
    assert grown.state(1).cache.capacity > 32 and engine.graph_pool.free_count(32) >= 1
    other = engine.new_session(capacity=32)
    engine.generate(PROMPTS[0], session=other, max_new_tokens=4)
    assert grown.tokens == remembered
