"""The engine on the fixture checkpoints: results, stops, max tokens, streaming, rollback, cancellation."""

import asyncio
import threading
import time
from functools import partial

import pytest
import torch
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, models, pre_tokenizers

from dlm.checkpoint import load_model
from dlm.decoding import Commit
from dlm.engine import Engine, _Run
from dlm.tokenizer import Tokenizer

PROMPT = [{"role": "user", "content": "Hi there!"}]


@pytest.fixture(scope="module", params=["sdar", "fast_dllm_v2"])
def engine(request, fixtures_dir):
    eng = Engine.from_dir(fixtures_dir / request.param / "checkpoint")
    yield eng
    eng.close()


def test_generate_result(engine):
    r = engine.generate(PROMPT, max_new_tokens=12, effort="high")
    assert 0 < len(r.token_ids) <= 12 and len(r.tokens) == len(r.token_ids)
    assert r.text == "".join(r.pieces) == engine.tokenizer.decode(r.token_ids)
    assert r.forward_passes > 0 and r.tokens_per_forward == len(r.token_ids) / r.forward_passes
    assert r.finish_reason in ("stop", "length") and r.first_block_ms <= r.total_ms


def test_greedy_is_deterministic_and_max_tokens_cuts(engine):
    # a token a pass: the random checkpoints write their end-of-turn early when a pass defers a repeated token
    long = engine.generate(PROMPT, max_new_tokens=16, effort="high")
    short = engine.generate(PROMPT, max_new_tokens=5, effort="high")
    assert len(short.token_ids) == 5 and short.finish_reason == "length"
    assert short.token_ids == long.token_ids[:5]


def test_stop_token_ends_generation(engine):
    free = engine.generate(PROMPT, max_new_tokens=16, threshold=0.5)
    k = 3
    stop = free.token_ids[k]
    first = free.token_ids.index(stop)
    r = engine.generate(PROMPT, max_new_tokens=16, threshold=0.5, stop_ids=[stop])
    assert r.token_ids == free.token_ids[:first] and r.finish_reason == "stop"


def test_a_reply_may_fill_the_whole_context(engine):
    """A prompt 5 tokens short of the context gets up to 5 tokens, a budget that ends there counts as "length",
    and with blocks of 6 (the context is no multiple of 6) the last window is cut short at the context's end."""
    ctx = engine.model.cfg.max_position_embeddings
    assert engine.context_room() == ctx and ctx % 6
    prompt = [10 + i % 200 for i in range(ctx - 5)]
    for block_size in (None, 6):
        r = engine.generate(prompt, max_new_tokens=64, block_size=block_size, threshold=0.5)
        assert len(r.token_ids) <= 5 and (r.finish_reason == "length") == (len(r.token_ids) == 5)
    with pytest.raises(ValueError, match="leaves no room"):
        engine.generate([10] * ctx, max_new_tokens=4)


def test_prefix_streams_before_the_block_completes(engine):
    """One token per pass: the decoded prefix streams, so text arrives in more pieces than blocks."""
    block = engine.model.cfg.block_size
    r = engine.generate(PROMPT, max_new_tokens=3 * block, passes_per_block=block, sub_block=1)
    assert len(r.pieces) > 3


def test_stream_matches_generate_and_keeps_loop_responsive(engine):
    async def main():
        ticks = 0

        async def ticker():
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0)

        task = asyncio.create_task(ticker())
        pieces = [p async for p in engine.stream(PROMPT, max_new_tokens=10, threshold=0.5)]
        task.cancel()
        return pieces, ticks

    # Give each pass the few milliseconds a real model takes, so "the loop ran meanwhile" is observable
    # rather than a race against a microsecond forward of the tiny fixture.
    slow = engine.model.model.embed_tokens.register_forward_pre_hook(lambda module, args: time.sleep(0.003))
    try:
        pieces, ticks = asyncio.run(main())
    finally:
        slow.remove()
    assert "".join(pieces) == engine.generate(PROMPT, max_new_tokens=10, threshold=0.5).text
    assert ticks > len(pieces)  # the loop ran other tasks while passes ran on the worker


def test_prefill_rollback_and_reuse(engine):
    block = engine.model.cfg.block_size
    ids = engine.prompt_ids(PROMPT)
    fresh = engine.generate(ids, max_new_tokens=8, effort="high")  # long enough to commit a block (see above)
    session = engine.new_session()
    early = session.prefill(ids[:-3] + [7, 8, 9])  # the transcript changed after this prefill
    assert early.computed == (len(ids) // block) * block
    again = session.prefill(ids)
    lcp = len(ids) - 3
    assert again.reused == max(e for e in [0, *range(block, lcp + 1, block)] if e <= lcp)
    assert session.tokens == ids[: len(ids) // block * block]
    r = engine.generate(ids, session=session, max_new_tokens=8, effort="high")
    assert r.token_ids == fresh.token_ids
    # the next turn extends the conversation: the committed answer blocks stay cached
    follow = ids + r.token_ids + ids[:5]
    before = len(session.tokens)
    assert before > len(ids) // block * block and session.prefill(follow).reused == before


@pytest.mark.parametrize("first_turn", [{"first_block_size": 2}, {"block_size": 16}, {"effort": "low"}])
def test_a_later_turn_decodes_what_a_fresh_request_does_whatever_blocks_the_turn_before_used(engine, first_turn):
    """A turn whose answer blocks ended off the next turn's block grid (a smaller first block, another block size)
    leaves KV that a fresh prefill would not build: the session reuses only the blocks on the grid, so the next
    turn decodes the ids a stateless request for the same prompt does."""
    block = engine.model.cfg.block_size
    ids = engine.prompt_ids(PROMPT)
    session = engine.new_session()
    answer = engine.generate(ids, session=session, max_new_tokens=12, threshold=0.5, **first_turn).token_ids
    follow = ids + answer + ids[:3]
    assert session.prefill(follow).reused % block == 0
    for options in ({}, first_turn):
        fresh = engine.generate(follow, max_new_tokens=10, threshold=0.5, **options).token_ids
        assert engine.generate(follow, session=session, max_new_tokens=10, threshold=0.5, **options).token_ids == fresh


def test_two_sessions_at_once_match_sequential_runs(engine):
    prompts = [PROMPT, [{"role": "user", "content": "Another question"}]]
    want = [engine.generate(p, max_new_tokens=8, threshold=0.5).token_ids for p in prompts]

    async def main():
        async def one(p):
            s = engine.new_session()
            _ = [x async for x in engine.stream(p, session=s, max_new_tokens=8, threshold=0.5)]
            return s.last_result.token_ids
        return await asyncio.gather(*(one(p) for p in prompts))

    assert asyncio.run(main()) == want


def test_cancellation_frees_the_session(engine):
    """Cancelled mid-stream (both fixtures decode 256 tokens from "abc"; from PROMPT one stops after 4,
    which could finish before the cancel lands), the session's cache is given back."""
    async def main():
        session = engine.new_session()
        first = asyncio.Event()
        gate = threading.Event()

        async def consume():
            async for _ in engine.stream("abc", session=session, max_new_tokens=256, passes_per_block=4):
                if not first.is_set():
                    engine.worker.submit(gate.wait)  # no further pass until the cancel has landed: on a busy
                    first.set()  # machine the worker could otherwise finish before the event loop cancels

        task = asyncio.create_task(consume())
        await first.wait()
        assert session.nbytes > 0
        task.cancel()
        try:
            with pytest.raises(asyncio.CancelledError):
                await task
        finally:
            gate.set()
        await asyncio.get_running_loop().run_in_executor(engine.worker, lambda: None)  # after the in-flight pass
        return session

    session = asyncio.run(main())
    assert session.nbytes == 0 and session.tokens == []
    assert len(engine.generate(PROMPT, session=session, max_new_tokens=4).token_ids) == 4


def test_bad_options_are_errors(engine):
    with pytest.raises(TypeError, match="unknown generation option"):
        engine.generate(PROMPT, max_new_tokens=4, nonsense=1)
    with pytest.raises(ValueError, match="effort"):
        engine.generate(PROMPT, max_new_tokens=4, effort="extreme")
    for two_rules in (dict(threshold=0.5, passes_per_block=2), dict(factor=1.0, threshold=0.5)):
        with pytest.raises(ValueError, match="not several"):
            engine.generate(PROMPT, max_new_tokens=4, **two_rules)
    with pytest.raises(ValueError, match="factor must be positive"):
        engine.generate(PROMPT, max_new_tokens=4, factor=0.0)
    with pytest.raises(ValueError, match="empty"):
        engine.generate("", max_new_tokens=4)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_loading(fixtures_dir, dtype):
    path = fixtures_dir / "sdar" / "checkpoint"
    ids = torch.tensor([[1, 2, 3, 4, 5, 6, 7, 8]])
    full, half = load_model(path), load_model(path, dtype)
    assert half.output_weight().dtype == dtype
    got, want = half(ids).float(), full(ids)
    assert (got - want).abs().max() < 0.05 * want.abs().max()
    eng = Engine.from_dir(path, dtype=dtype)
    assert len(eng.generate("abc", max_new_tokens=4).token_ids) == 4
    eng.close()


def test_the_model_is_built_on_the_thread_that_runs_it(fixtures_dir):
    """``Engine.build`` runs ``make`` on the engine's worker, where every pass runs (one OpenMP team: see its
    docstring), and a ``make`` that fails leaves no worker behind and raises its own error."""
    from dlm.checkpoint import load_checkpoint

    path = fixtures_dir / "sdar" / "checkpoint"
    threads: list[str] = []

    def make():
        threads.append(threading.current_thread().name)
        return load_checkpoint(path, torch.float32, torch.device("cpu"))

    eng = Engine.build(make, device="cpu")
    try:
        assert threads == [eng.run_on_worker(lambda: threading.current_thread().name)]
        assert eng.run_on_worker(eng.on_worker) and not eng.on_worker()
        assert len(eng.generate("abc", max_new_tokens=4).token_ids) == 4
    finally:
        eng.close()
    before = threading.active_count()

    def broken():
        raise OSError("no weights here")

    with pytest.raises(OSError, match="no weights here"):
        Engine.build(broken, device="cpu")
    assert threading.active_count() <= before
    # a start that fails on the worker (the layer steps are resolved there) leaves none behind either
    model, tokenizer = load_checkpoint(path, torch.float32, torch.device("cpu"))
    for start in (partial(Engine.build, lambda: (model, tokenizer)), partial(Engine, model, tokenizer)):
        with pytest.raises(ValueError, match="layer_steps must be one of"):
            start(device="cpu", layer_steps="fastest")
        assert threading.active_count() <= before


def _byte_tokenizer() -> Tokenizer:
    """Byte-level tokens: 'é' is two tokens (its two UTF-8 bytes), each alone half a character."""
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    backend = HFTokenizer(models.BPE({c: i for i, c in enumerate(sorted(alphabet))}, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    return Tokenizer(backend=backend, template=None)


def test_utf8_pieces_never_split_a_character():
    tok = _byte_tokenizer()
    ids = tok.encode("é ok ü")
    assert len(ids) == 8  # two bytes each for é and ü
    run = _Run(tok, prompt_tokens=1, max_new_tokens=99)
    pieces = [run.take(Commit([i], n, False)) for n, i in enumerate(ids, 1)]
    assert pieces[0] == "" and pieces[1] == "é"
    assert "".join(pieces) == "é ok ü" and "\ufffd" not in "".join(pieces)


def test_a_reply_ending_in_half_a_character_still_gives_all_its_text():
    """Only the half character waits for its other bytes: what comes before it is sent at once, and when the
    generation ends the half goes out as a full decode writes it, so the pieces are always the whole text."""
    tok = _byte_tokenizer()
    ids = tok.encode("ok é")[:-1]  # the reply ends on the first byte of é
    run = _Run(tok, prompt_tokens=1, max_new_tokens=99)
    assert run.take(Commit(ids[:1], 1, False)) == "o"
    assert run.take(Commit(ids[1:], 2, True)) == "k "  # had been "": the whole commit held back
    assert run.take(Commit([], 3, True, finished=True)) == "\ufffd"  # had never been sent
    assert run.result().text == tok.decode(ids) == "ok \ufffd"
