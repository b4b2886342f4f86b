"""Failures of one generation, or of the engine, reach the callers they concern: closing the engine ends every
request in flight and refuses later ones; a pass that fails fails its own request, not those batched with it."""

import asyncio
import threading

import pytest
import torch

from dlm.batching import run_passes
from dlm.checkpoint import load_checkpoint
from dlm.decoding.block_causal import CachedForward, Pass, run_pass
from dlm.engine import Engine
from dlm.kv_cache import KVCache

CLOSED = "the engine is closed"
WAIT_S = 30  # far longer than any step here: a caller still waiting then would wait forever


def _stop(engine: Engine, how: str) -> None:
    if how == "close":
        engine.close()
    else:  # the worker gone without the engine being told
        engine.worker.shutdown(wait=True)


def _outcome(call) -> BaseException | str:
    """What a blocking call raised, run on a thread of its own; "hung" if it neither returned nor raised."""
    out: list[BaseException | str] = ["hung"]

    def run() -> None:
        try:
            call()
            out[0] = "returned"
        except BaseException as exc:
            out[0] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(WAIT_S)
    return out[0]


async def _drain(engine: Engine, **opts) -> None:
    async for _ in engine.stream("abc", **opts):
        pass


@pytest.mark.parametrize("how", ["close", "worker shutdown"])
@pytest.mark.parametrize("family", ["sdar", "llada"])
def test_stopping_the_engine_fails_requests_in_flight_and_refuses_later_ones(fixtures_dir, family, how):
    engine = Engine.from_dir(fixtures_dir / family / "checkpoint")
    in_pass, go = threading.Event(), threading.Event()

    def hold(module, args):  # the requests are surely in flight when the engine stops
        in_pass.set()
        go.wait()

    engine.model.model.embed_tokens.register_forward_pre_hook(hold)
    generated: list[BaseException | str] = []

    async def main() -> None:
        stream = asyncio.create_task(_drain(engine, max_new_tokens=200))
        caller = threading.Thread(target=lambda: generated.append(_outcome(
            lambda: engine.generate("abc", max_new_tokens=200))), daemon=True)
        caller.start()
        while len(engine.scheduler.jobs) < 2 or not in_pass.is_set():
            await asyncio.sleep(0.01)
        stopping = asyncio.create_task(asyncio.to_thread(_stop, engine, how))
        await asyncio.sleep(0.2)  # let the stop begin while a pass is in flight
        go.set()
        await asyncio.wait_for(stopping, WAIT_S)
        with pytest.raises(RuntimeError, match=CLOSED):
            await asyncio.wait_for(stream, WAIT_S)
        await asyncio.to_thread(caller.join, WAIT_S)
        with pytest.raises(RuntimeError, match=CLOSED):
            await asyncio.wait_for(_drain(engine, max_new_tokens=4), WAIT_S)

    asyncio.run(main())
    assert len(generated) == 1 and isinstance(generated[0], RuntimeError) and str(generated[0]) == CLOSED
    later = _outcome(lambda: engine.generate("abc", max_new_tokens=4))
    assert isinstance(later, RuntimeError) and str(later) == CLOSED
    assert engine.scheduler.jobs == []


def test_a_first_block_wider_than_the_blocks_fits_a_small_session(fixtures_dir):
    """The session's cache is sized for the widest block: a first block of 32 after blocks of 4 did not fit."""
    engine = Engine.from_dir(fixtures_dir / "sdar" / "checkpoint")
    prompt, opts = [10, 11, 12], dict(first_block_size=32, max_new_tokens=2)
    want = engine.generate(prompt, **opts).token_ids
    assert engine.generate(prompt, session=engine.new_session(capacity=8), **opts).token_ids == want
    engine.close()


def _state(model, capacity: int, seed: int) -> CachedForward:
    ids = torch.randint(0, 97, (8,), generator=torch.Generator().manual_seed(seed)).tolist()
    state = CachedForward(model, KVCache(model.cfg, capacity))
    state.extend(ids, 4)
    return state


def _count_forwards(model) -> list[int]:
    calls: list[int] = []
    model.model.embed_tokens.register_forward_pre_hook(lambda module, args: calls.append(args[0].shape[0]))
    return calls


def test_a_failing_batch_runs_again_pass_by_pass(fixtures_dir):
    """Three commit passes, the third into a full cache: the batch fails, the others then commit alone."""
    model = load_checkpoint(fixtures_dir / "sdar" / "checkpoint")[0]
    window = torch.tensor([5, 6, 7, 8])
    capacities = (64, 64, 10)  # 8 positions prefilled: the third has no room for a window of 4
    states = [_state(model, c, i) for i, c in enumerate(capacities)]
    alone = [_state(model, c, i) for i, c in enumerate(capacities[:2])]
    want = [run_pass(Pass(s, window, None)) for s in alone]
    calls = _count_forwards(model)
    got, batched = run_passes(model, [Pass(s, window, None) for s in states])
    assert calls == [3, 1, 1, 1] and batched == 0  # the batch, then each pass alone
    assert isinstance(got[2], ValueError) and "KV cache full" in str(got[2]) and states[2].length == 8
    for g, w, s, a in zip(got, want, states, alone, strict=False):
        assert torch.equal(g, w) and s.tokens == a.tokens and s.length == a.length == 12
    calls.clear()
    _, batched = run_passes(model, [Pass(s, window, None) for s in states[:2]])
    assert calls == [2] and batched == 2  # nothing failed: one batched forward, no retry


def test_one_request_out_of_memory_fails_alone(fixtures_dir):
    """A forward over more than 20 tokens runs out of memory (simulated): the 32-token request fails, and the
    three small ones, whose batch fails too, finish with the ids each gets alone."""
    engine = Engine.from_dir(fixtures_dir / "sdar" / "checkpoint")
    batches_failed = []

    def out_of_memory(module, args):
        if args[0].numel() > 20:
            batches_failed.append(args[0].shape[0] > 1)
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")

    engine.model.model.embed_tokens.register_forward_pre_hook(out_of_memory)
    small = dict(block_size=8, max_new_tokens=8, passes_per_block=2)
    requests = [([10, 11, 12], small), ([20, 21, 22, 23, 24], small), ([30, 31], small),
                ([40, 41, 42], dict(block_size=32, max_new_tokens=8))]
    want = [engine.generate(p, **o).token_ids for p, o in requests[:3]]
    go = threading.Event()
    engine.worker.submit(go.wait)  # every request is listed before the first tick: their passes batch

    async def one(prompt, opts):
        session = engine.new_session()
        async for _ in engine.stream(prompt, session=session, **opts):
            pass
        return session.last_result.token_ids

    async def main():
        tasks = [asyncio.create_task(one(p, o)) for p, o in requests]
        while len(engine.scheduler.jobs) < len(requests):
            await asyncio.sleep(0.01)
        go.set()
        return await asyncio.gather(*tasks, return_exceptions=True)

    *got, big = asyncio.run(main())
    assert got == want
    assert isinstance(big, torch.OutOfMemoryError)
    assert any(batches_failed)  # a batch of small requests did fail, and ran again pass by pass
    engine.close()
