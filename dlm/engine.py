"""The in-process engine: sessions, streaming of final text, cancellation, and a sync ``generate``.

All model work runs on one worker thread, so the event loop stays responsive; a scheduler steps every live
generation there pass by pass and runs compatible passes of different sessions as one batched forward
(:mod:`dlm.scheduler`); a cancelled stream simply stops being stepped. Text is
yielded the moment it is final (the contiguous decoded prefix of the current block), UTF-8 safe.

Block-causal families decode with :mod:`dlm.decoding.block_causal` on the session's exact KV cache. The
fully bidirectional families (LLaDA, Dream) delegate to their own samplers in
:mod:`dlm.decoding.llada` / :mod:`dlm.decoding.dream` (see :func:`_bidirectional_steps`, the one hook).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import queue
import threading
import time
from collections.abc import AsyncIterator, Callable, Generator, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cached_property, partial
from pathlib import Path
from typing import Any, TypeVar

import torch

from dlm.checkpoint import load_checkpoint, placement
from dlm.config import read_json_object
from dlm.constrained import vocab_strings
from dlm.decoding import Commit, DecodeParams
from dlm.decoding import block_causal as bc
from dlm.decoding.logit_bias import COPY_FOLLOW, LogitBias, Pieces, reply_copy_bias
from dlm.effort import Knobs, resolve
from dlm.graphed_forward import GraphedStatePool, graphs_enabled
from dlm.layer_trial import resolve_layer_steps
from dlm.model import Transformer
from dlm.scheduler import Delivery, Job, Scheduler
from dlm.session import Session
from dlm.tokenizer import IncrementalDecoder, Tokenizer
from kernels.dispatch import kernel_path

WORKER_NAME = "dlm-model"  # the model worker thread's name prefix

T = TypeVar("T")
Prompt = str | Sequence[int] | Sequence[dict[str, Any]]


class PromptTooLong(ValueError):
    """The prompt fills the model's context: the caller's input, not the engine, is at fault."""


@dataclass
class GenerationResult:
    text: str
    token_ids: list[int]  # generated ids, without the stop token
    tokens: list[str]  # each generated id as text
    finish_reason: str  # "stop" (stop/EOS token) or "length" (max tokens)
    prompt_tokens: int
    prefill_ms: float  # making the cache hold the prompt (0 when it already did)
    first_text_ms: float | None  # start to the first non-empty text piece
    first_block_ms: float | None  # start to the first block fully decoded
    total_ms: float
    forward_passes: int
    tokens_per_forward: float
    pieces: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "pieces"}


class _Run:
    """Turns one generation's Commit events into text pieces and its result."""

    def __init__(self, tokenizer: Tokenizer, prompt_tokens: int, max_new_tokens: int) -> None:
        self.tokenizer = tokenizer
        self.max_new_tokens = max_new_tokens  # the budget, context room included: reaching it is "length"
        self.decoder = IncrementalDecoder(tokenizer)
        self.t0 = time.perf_counter()
        self.prompt_tokens = prompt_tokens
        self.prefill_ms = 0.0
        self.first_text_ms: float | None = None
        self.first_block_ms: float | None = None
        self.ids: list[int] = []
        self.pieces: list[str] = []
        self.passes = 0
        self.finish_reason = "length"

    def _ms(self) -> float:
        return (time.perf_counter() - self.t0) * 1000

    def take(self, commit: Commit) -> str:
        self.ids.extend(commit.token_ids)
        self.passes = commit.forward_passes
        if commit.block_done and self.first_block_ms is None:
            self.first_block_ms = self._ms()
        if commit.finished:
            self.finish_reason = "length" if len(self.ids) >= self.max_new_tokens else "stop"
        piece = self.decoder.push(commit.token_ids) if commit.token_ids else ""
        if commit.finished:  # no more ids: text held back for a character's missing bytes is final as it is
            piece += self.decoder.flush()
        if piece:
            self.pieces.append(piece)
            if self.first_text_ms is None:
                self.first_text_ms = self._ms()
        return piece

    def result(self) -> GenerationResult:
        if self.first_block_ms is None and self.ids:
            self.first_block_ms = self._ms()
        return GenerationResult(
            text="".join(self.pieces),
            token_ids=list(self.ids),
            tokens=[self.tokenizer.decode([i], skip_special=False) for i in self.ids],
            finish_reason=self.finish_reason,
            prompt_tokens=self.prompt_tokens,
            prefill_ms=self.prefill_ms,
            first_text_ms=self.first_text_ms,
            first_block_ms=self.first_block_ms,
            total_ms=self._ms(),
            forward_passes=self.passes,
            tokens_per_forward=len(self.ids) / self.passes if self.passes else 0.0,
            pieces=list(self.pieces),
        )


class Engine:
    def __init__(
        self,
        model: Transformer,
        tokenizer: Tokenizer,
        device: str | torch.device | None = None,
        trained_block_sizes: Sequence[int] = (),
        kernels: str = "auto",
        cuda_graphs: str = "auto",
        layer_steps: str = "auto",
        worker: concurrent.futures.ThreadPoolExecutor | None = None,
    ) -> None:
        """``kernels``: "auto" (the Triton kernel path on CUDA, torch otherwise; ``DLM_KERNELS`` may force
        either), "triton" or "torch"; resolved once here, so a forced path that cannot run fails now.
        ``cuda_graphs``: "auto" (denoising passes replayed as CUDA graphs on CUDA), "on" or "off"; see
        :mod:`dlm.graphed_forward`. ``layer_steps``: how the graphed passes' layers launch, "auto" (on CUDA
        chosen by a timed and checked trial here, see :mod:`dlm.layer_trial`), "fused" or "thin". ``worker``: the
        thread the model was built on (:meth:`build`), else a new one. On a CPU, build the model with
        :meth:`build` or :meth:`from_dir` rather than passing one built on the calling thread: see :meth:`build`.
        The engine owns its worker, given or not: a start that fails shuts it down."""
        self.worker = worker or model_worker()
        try:
            self._start(model, tokenizer, device, trained_block_sizes, kernels, cuda_graphs, layer_steps)
        except BaseException:
            self.worker.shutdown(wait=True)
            raise

    def _start(self, model: Transformer, tokenizer: Tokenizer, device: str | torch.device | None,
               trained_block_sizes: Sequence[int], kernels: str, cuda_graphs: str, layer_steps: str) -> None:
        """Everything :meth:`__init__` sets up once the worker exists (the layer-steps trial runs on it)."""
        self.model = model.eval().requires_grad_(False)
        self.tokenizer = tokenizer
        self.device = torch.device(device) if device is not None else model.output_weight().device
        self.kernels = kernel_path(kernels, self.device)
        self.cuda_graphs = graphs_enabled(cuda_graphs, self.device)
        self.layer_steps, self.layer_trials = self.run_on_worker(resolve_layer_steps, layer_steps, self.model,
                                                                 self.kernels, self.cuda_graphs)  # fmt: skip
        # released sessions' graphed caches, so later conversations replay graphs captured by earlier ones
        self.graph_pool = GraphedStatePool(self.model, self.layer_steps) if self.cuda_graphs else None
        self.stop_ids = frozenset(tokenizer.stop_ids(model.cfg))
        self.trained_block_sizes = tuple(trained_block_sizes)
        self.scheduler = Scheduler(self.model, self.worker)

    @classmethod
    def from_dir(
        cls, path: str | Path, dtype: str | torch.dtype = "auto", device: str | torch.device = "auto",
        kernels: str = "auto", cuda_graphs: str = "auto", layer_steps: str = "auto",
    ) -> Engine:
        """Load a checkpoint directory (see :mod:`dlm.checkpoint`); ``device`` and ``dtype`` as
        :func:`dlm.checkpoint.placement` resolves them (auto: bfloat16 on a GPU when there is one)."""
        device, dtype = placement(device, dtype)
        gen = read_json_object(Path(path) / "generation_config.json", optional=True)
        return cls.build(partial(load_checkpoint, path, dtype, device), device=device,
                         trained_block_sizes=gen.get("trained_block_sizes", ()), kernels=kernels,
                         cuda_graphs=cuda_graphs, layer_steps=layer_steps)  # fmt: skip

    @classmethod
    def build(cls, make: Callable[[], tuple[Transformer, Tokenizer]], **options: Any) -> Engine:
        """An engine on the model and tokenizer ``make()`` returns, built on the thread that will run the model.

        Why: torch's CPU operators run on an OpenMP team of the calling thread, and GNU OpenMP, once its threads
        outnumber the cores, stops spinning for work between parallel regions and sleeps. A model built on one
        thread and run on another leaves two teams: on a 2-core machine a demo-checkpoint turn then took 48 ms
        instead of 23 (``python -m latency_bench openmp``). ``options`` are :class:`Engine`'s."""
        worker = model_worker()
        try:
            model, tokenizer = worker.submit(make).result()
        except BaseException:
            worker.shutdown(wait=True)  # make has raised: nothing is left to wait for
            raise
        return cls(model, tokenizer, worker=worker, **options)  # which shuts the worker down if it fails

    def close(self) -> None:
        """Stop the model worker once its work in flight is done. Generations still running end with
        RuntimeError("the engine is closed") in their callers, and later requests raise it at once, rather than
        wait on a worker that is gone."""
        self.scheduler.close()
        self.worker.shutdown(wait=True)

    @cached_property
    def vocab(self) -> list[str]:
        """Each token id as text, for JSON-schema constraints (the API's spans, the voice stage's grounded
        calls); built on first use, one decode per id, once per engine."""
        return vocab_strings(self.tokenizer.backend)

    @cached_property
    def pieces(self) -> Pieces:
        """The vocabulary's letters and joins that the copy bias ends words and keeps joins single with
        (`dlm.decoding.logit_bias.Pieces`); read from :attr:`vocab` once per engine."""
        return Pieces.of(self.vocab)

    def copy_bias(self, messages: Sequence[dict[str, Any]], follow: float = COPY_FOLLOW,
                  asking_words: frozenset[str] = frozenset()) -> LogitBias | None:
        """The copy bias of the reply to ``messages`` (`dlm.decoding.logit_bias.reply_copy_bias`, with this
        vocabulary's :attr:`pieces`); None for the bidirectional families, which take no bias: every caller (the
        voice stage, the chat, the API, the evaluation) decodes any family."""
        if self.model.cfg.bidirectional:
            return None
        return reply_copy_bias(messages, self.tokenizer.encode, follow, asking_words, self.pieces)

    def new_session(self, capacity: int | None = None) -> Session:
        return Session(self, capacity)

    def on_worker(self) -> bool:
        """Whether the calling thread is the model worker (where every pass runs, one at a time)."""
        return threading.current_thread().name.startswith(WORKER_NAME)

    def run_on_worker(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn`` on the model worker and wait (from any thread but the worker itself)."""
        return self.worker.submit(fn, *args).result()

    # ---- prompts -------------------------------------------------------------------------------------
    def render_prompt(
        self, messages: Sequence[dict[str, Any]], add_generation_prompt: bool = True,
        tools: list[dict[str, Any]] | bool | None = None,
    ) -> str:
        if tools is True:
            from dlm.tools import tool_specs  # the assistant's own tools

            tools = tool_specs()
        return self.tokenizer.apply_chat_template(
            list(messages), add_generation_prompt=add_generation_prompt, tools=tools or None
        )

    def prompt_ids(self, prompt: Prompt, tools: list[dict[str, Any]] | bool | None = None) -> list[int]:
        """Messages get the chat template; a string is raw text; a list of ints is used as is."""
        if isinstance(prompt, str):
            ids = self.tokenizer.encode(prompt)
        elif all(isinstance(p, int) for p in prompt):
            ids = [int(p) for p in prompt]  # type: ignore[arg-type]
        else:
            ids = self.tokenizer.encode(self.render_prompt(prompt, tools=tools))  # type: ignore[arg-type]
        if not ids:
            raise ValueError("the prompt is empty")
        vocab = self.model.cfg.vocab_size
        if not all(0 <= i < vocab for i in ids):
            raise ValueError(f"prompt ids must be in [0, {vocab})")
        return ids

    # ---- decoding ------------------------------------------------------------------------------------
    def knobs(self, **opts: Any) -> tuple[Knobs, int | None]:
        """Split keyword options into decoding knobs and a seed; unknown options are an error."""
        seed = opts.pop("seed", None)
        for handled_elsewhere in ("tools", "stop_ids", "bias"):
            opts.pop(handled_elsewhere, None)
        if "max_tokens" in opts:
            opts["max_new_tokens"] = opts.pop("max_tokens")
        clean = {k: v for k, v in opts.items() if v is not None}
        unknown = set(clean) - set(Knobs.__dataclass_fields__)
        if unknown:
            raise TypeError(f"unknown generation option(s): {', '.join(sorted(unknown))}")
        return Knobs(**clean), seed

    def context_room(self) -> int:
        """Tokens of prompt and reply together that a generation may use: the whole context the model was
        trained on (decoding cuts its last window short at the context's end). One rule for the engine's own
        check, the API's advertised context and the chats that trim their history to fit."""
        return self.model.cfg.max_position_embeddings

    def _steps(self, session: Session, ids: list[int], knobs: Knobs, seed: int | None, run: _Run,
               stop_ids: frozenset[int], bias: LogitBias | None = None
               ) -> Generator[Commit | bc.Pass, torch.Tensor | None, None]:
        """The whole generation: commits, and the passes it needs (run by the scheduler, maybe batched)."""
        generator = torch.Generator(device=self.device).manual_seed(seed) if seed is not None else None
        cfg = self.model.cfg
        if cfg.bidirectional:
            if bias:
                raise ValueError("logit biases apply to block-causal families only")
            yield from _bidirectional_steps(self.model, ids, knobs, stop_ids, seed)
            return
        policy = dataclasses.replace(resolve(cfg, knobs, stop_ids, self.trained_block_sizes), kernels=self.kernels)
        t = time.perf_counter()
        session.prefill_now(ids, policy.block_size)
        widest = max((policy.block_size, *policy.first_blocks))  # a first block may be wider than the rest
        state = session.state(len(ids) + policy.max_new_tokens + 2 * widest)
        run.prefill_ms = (time.perf_counter() - t) * 1000
        yield Commit([], 0, False)  # a step boundary: cancellation may land between prefill and decoding
        yield from bc.decode_passes(cfg, state, list(ids), policy, state.last_logits, generator, bias)

    async def stream(self, prompt: Prompt, session: Session | None = None, **opts: Any) -> AsyncIterator[str]:
        """Final text pieces as they are decoded. Cancelling frees the session's cache memory.

        Options: effort, max_new_tokens (or max_tokens), block_size, threshold, factor, passes_per_block,
        temperature, top_p, seed, tools, stop_ids (extra stop ids); for the block-causal families only (the others
        refuse them): first_block_size, sub_block, in_order, top_k, bias (a :class:`~dlm.decoding.logit_bias.LogitBias`).
        """
        owned = session is None  # a session made for this call alone gives its cache back at the end
        session, run, steps = self._prepare(prompt, session, opts)
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Delivery] = asyncio.Queue()

        def deliver(item: Delivery) -> None:
            with contextlib.suppress(RuntimeError):  # the loop may be gone once the consumer is
                loop.call_soon_threadsafe(queue.put_nowait, item)

        job = Job(steps, deliver)
        self.scheduler.add(job)
        cancelled = False
        try:
            while (item := await queue.get()) is not None:
                if isinstance(item, BaseException):
                    raise item
                piece = run.take(item)
                if piece:
                    yield piece
        except asyncio.CancelledError:
            cancelled = True
            raise
        finally:
            # On the worker, after any pass in flight: the generator is closed; a cancel frees the cache.
            self.scheduler.cancel(job, session.release if cancelled or owned else None)
            session.last_result = run.result()

    def _prepare(
        self, prompt: Prompt, session: Session | None, opts: dict[str, Any]
    ) -> tuple[Session, _Run, Generator[Commit | bc.Pass, torch.Tensor | None, None]]:
        """What :meth:`stream` and :meth:`generate` both start from: the session, the run and its steps. The
        token budget is the caller's ``max_new_tokens`` or what the context has room for, if less."""
        knobs, seed = self.knobs(**opts)
        ids = self.prompt_ids(prompt, opts.get("tools"))
        room = self.context_room() - len(ids)
        if room < 1:
            raise PromptTooLong(f"the prompt ({len(ids)} tokens) leaves no room in the context ({self.context_room()})")
        knobs = dataclasses.replace(knobs, max_new_tokens=min(knobs.max_new_tokens, room))
        session = session or self.new_session()
        run = _Run(self.tokenizer, len(ids), knobs.max_new_tokens)
        steps = self._steps(session, ids, knobs, seed, run, self.stop_ids | frozenset(opts.get("stop_ids") or ()),
                            opts.get("bias"))
        return session, run, steps

    def generate(self, prompt: Prompt, session: Session | None = None,
                 on_piece: Callable[[str], None] | None = None, **opts: Any) -> GenerationResult:
        """Blocking generation (not from the model worker); ``on_piece`` sees each final text piece."""
        owned = session is None
        session, run, steps = self._prepare(prompt, session, opts)
        inbox: queue.SimpleQueue[Delivery] = queue.SimpleQueue()
        job = Job(steps, inbox.put)
        self.scheduler.add(job)
        try:
            while (item := inbox.get()) is not None:
                if isinstance(item, BaseException):
                    raise item
                piece = run.take(item)
                if piece and on_piece is not None:
                    on_piece(piece)
        finally:
            self.scheduler.cancel(job, session.release if owned else None)
        session.last_result = run.result()
        return session.last_result


def model_worker() -> concurrent.futures.ThreadPoolExecutor:
    """The one thread an engine's model work runs on: autograd off there, once (generators interleave on it),
    and the creating thread's torch thread count (a new thread would otherwise get torch's default)."""
    return concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix=WORKER_NAME, initializer=_init_worker,
                                                 initargs=(torch.get_num_threads(),))  # fmt: skip


def _init_worker(threads: int) -> None:
    torch.set_grad_enabled(False)
    torch.set_num_threads(threads)


# Knobs of the block-causal decoder alone: a bidirectional sampler has no first block, sub-blocks, pass order
# or top-k filter, and refuses them rather than decode as if they had not been given.
_BLOCK_CAUSAL_KNOBS = ("first_block_size", "sub_block", "in_order", "top_k")


def _refuse_block_causal_knobs(knobs: Knobs, model_type: str) -> None:
    given = [name for name in _BLOCK_CAUSAL_KNOBS if getattr(knobs, name) != getattr(Knobs(), name)]
    if given:
        raise ValueError(f"{', '.join(given)}: block-causal decoding only, the {model_type} sampler has no such option")


def _bidirectional_steps(
    model: Transformer, ids: list[int], knobs: Knobs, stop_ids: frozenset[int], seed: int | None
) -> Iterator[Commit]:
    """THE HOOK for fully bidirectional families: their samplers own the canvas and its cache."""
    cfg = model.cfg
    if cfg.model_type == "llada":
        from dlm.decoding.llada import stream_generate
    elif cfg.model_type == "dream":
        from dlm.decoding.dream import stream_generate
    else:
        raise NotImplementedError(f"no bidirectional sampler for model_type {cfg.model_type!r}")
    _refuse_block_causal_knobs(knobs, cfg.model_type)
    policy = resolve(cfg, knobs, stop_ids)  # the effort's rule and the knobs' checks, as for block decoding
    params = DecodeParams(
        max_new_tokens=knobs.max_new_tokens, block_size=knobs.block_size, threshold=policy.threshold,
        factor=policy.factor, steps_per_block=policy.passes_per_block, temperature=knobs.temperature,
        top_p=knobs.top_p, seed=seed, stop_ids=stop_ids,
    )
    yield Commit([], 0, False)
    yield from stream_generate(model, ids, params, cfg.mask_token_id, stop_ids)
