"""The product decoder for block-causal families (SDAR, Fast-dLLM v2, the dllm a2d/bd3lm conversions).

Each block is a window that starts where the KV cache ends (so a prompt tail that does not fill a block is
decoded inside the first window, as the references do) and ends on a multiple of its size, or at the end of
the context. Passes attend to the cache and bidirectionally inside the window; each unmasks the confident
positions of the current sub-block (every one above the threshold, or the most confident ones under the factor
rule, at least one) or a fixed share of them, or with ``in_order`` the same rule as a run of the leftmost
masked positions; once the window is full its KV is committed. Because unmasked tokens are never remasked, the
contiguous decoded prefix of the window is final at once and is yielded immediately.

Token-shift families (Fast-dLLM v2) predict position i from output i-1: the first position of a window
is predicted by the last committed logit, so it is filled without a pass (the reference's
"autoregressive extra token"), after a commit pass of its own. Other families commit a finished window in
the same forward pass as the first denoising pass of the next one (same result, one pass fewer per block).

Token selection runs on the fused Triton kernel when ``BlockPolicy.kernels`` resolves to it (CUDA, or forced),
with the same rule as the torch path: the argmax (or a sample) per row, every row strictly above the threshold,
at least the most confident one.

The decoder talks to the model through a :class:`BlockForward`: :class:`CachedForward` is the engine's,
:class:`RecomputeForward` runs the whole sequence under the equivalent block-causal mask every pass (the
exactness baseline).
"""

from __future__ import annotations

from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import torch
import torch.nn.functional as F

from dlm.config import ModelConfig
from dlm.decoding import Commit
from dlm.decoding.confidence import (
    GREEDY,
    Sampling,
    above_threshold_fused,
    by_rule,
    check_pass_rule,
    factor_bar,
    fusable,
    pick_tokens,
    pick_tokens_fused,
    without_parallel_repeats,
)
from dlm.decoding.logit_bias import LogitBias, bias_line
from dlm.decoding.prefill import ChunkForward, prefill_blocks
from dlm.decoding.schedule import block_end, block_sizes, segment_mask, transfer_counts, window_end
from dlm.kv_cache import KVCache
from dlm.model import Transformer
from kernels.dispatch import SETTINGS, kernel_path


@dataclass(frozen=True)
class BlockPolicy:
    """How one generation decodes its blocks (the engine derives it from effort and raw knobs)."""

    block_size: int
    first_blocks: tuple[int, ...] = ()  # sizes of the first blocks, then ``block_size``
    sub_block: int | None = None  # unmask left to right in sub-blocks of this size (None: whole window)
    threshold: float | None = 0.9  # every position above it (None: the factor rule or fixed passes per block)
    passes_per_block: int | None = None
    factor: float | None = None  # the factor rule (confidence.by_factor) instead of a threshold
    in_order: bool = False  # the rule picks a run of the leftmost masked positions (confidence.leftmost_run)
    sampling: Sampling = GREEDY
    max_new_tokens: int = 128
    stop_ids: frozenset[int] = field(default_factory=frozenset)
    # Token selection: "triton" = the fused confidence kernel, "torch" = plain torch, "auto" = triton on CUDA
    # (see kernels.dispatch.kernel_path; the DLM_KERNELS variable can force either).
    kernels: str = "auto"

    def __post_init__(self) -> None:
        if self.kernels not in SETTINGS:
            raise ValueError(f"kernels must be one of {SETTINGS}, got {self.kernels!r}")
        check_pass_rule(self.threshold, self.factor)
        if not self.adaptive and not self.passes_per_block:
            raise ValueError("give a confidence threshold, a factor or a number of passes per block")
        if self.passes_per_block is not None and self.passes_per_block < 1:
            raise ValueError(f"passes_per_block must be >= 1, got {self.passes_per_block}")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.sub_block is not None and self.sub_block < 1:
            raise ValueError(f"sub_block must be >= 1, got {self.sub_block}")

    @property
    def adaptive(self) -> bool:
        """Whether confidence sizes each pass (a threshold or the factor rule), not a fixed schedule."""
        return self.threshold is not None or self.factor is not None

    def bar(self, rank: int) -> float:
        """The confidence the ``rank``-th token (1-based) a pass commits must exceed (inf: one per pass).

        For decoders that commit left to right (JSON-constrained spans), where "rank" is the position in the
        pass's run of commits."""
        if self.threshold is not None:
            return self.threshold
        return float(factor_bar(rank, self.factor)) if self.factor is not None else float("inf")


class BlockForward(Protocol):
    """The model as the decoder sees it: a window after a committed prefix."""

    length: int  # committed positions
    device: torch.device

    def denoise(self, window: torch.Tensor, rows: torch.Tensor, pending: torch.Tensor | None = None
                ) -> torch.Tensor:
        """Logits [len(rows), V] at window offsets ``rows`` for ``window`` placed after the prefix.

        ``pending``: a finished window to commit first, in the same forward pass where that is possible.
        """
        ...

    def commit(self, window: torch.Tensor) -> torch.Tensor:
        """Make ``window`` part of the prefix; returns the logits [V] of its last position."""
        ...


class CachedForward:
    """Passes over the window only, attending to the KV cache; the commit pass stores the window's KV.

    It also remembers what the cache holds: the committed ids, where each block ends, and the logits of
    the last committed position (what a token-shift family predicts the next window's first token from).
    """

    def __init__(self, model: Transformer, cache: KVCache) -> None:
        self.model, self.cache = model, cache
        self.device = model.output_weight().device
        self.tokens: list[int] = []
        self.ends: list[int] = []
        self.last_logits: torch.Tensor | None = None

    @property
    def length(self) -> int:
        return self.cache.length

    def denoise(self, window: torch.Tensor, rows: torch.Tensor, pending: torch.Tensor | None = None
                ) -> torch.Tensor:
        if pending is None:
            hidden = self.model.hidden_states(window[None], cache=self.cache)[0]
            return F.linear(hidden[rows], self.model.output_weight())
        # One pass commits the finished block and denoises the next: the finished block's rows see the cache
        # and themselves, the new window's rows see it too. Both write their KV; only the first is kept.
        done, n = pending.shape[0], pending.shape[0] + window.shape[0]
        mask = torch.ones(n, self.cache.length + n, dtype=torch.bool, device=self.device)
        mask[:done, self.cache.length + done:] = False
        self.cache.store = True
        try:
            hidden = self.model.hidden_states(torch.cat((pending, window))[None], attn_mask=mask, cache=self.cache)[0]
        finally:
            self.cache.store = False
        self.record_commit(pending, None)
        return F.linear(hidden[done + rows], self.model.output_weight())

    def record_commit(self, window: torch.Tensor, last_logits: torch.Tensor | None) -> None:
        self.cache.commit(window.shape[0])
        self.tokens.extend(window.tolist())
        self.ends.append(self.cache.length)
        self.last_logits = last_logits

    def commit(self, window: torch.Tensor) -> torch.Tensor:
        self.cache.store = True
        try:
            hidden = self.model.hidden_states(window[None], cache=self.cache)[0]
        finally:
            self.cache.store = False
        self.record_commit(window, F.linear(hidden[-1], self.model.output_weight()))
        return self.last_logits

    def extend(self, ids: list[int], block_size: int) -> None:
        """Prefill ``ids`` after the cache in blocks aligned at multiples of ``block_size``."""
        if not ids:
            return
        start = self.cache.length
        self.last_logits = prefill_blocks(self.model, self.cache, torch.tensor(ids, dtype=torch.long, device=self.device),
                                          block_size, run_chunk=self.prefill_chunk(block_size))  # fmt: skip
        self.tokens.extend(ids)
        self.ends.extend(range(block_end(start, block_size), self.cache.length, block_size))
        self.ends.append(self.cache.length)

    def prefill_chunk(self, block_size: int) -> ChunkForward | None:
        """How prefill runs a chunk: None for the model's own layers (subclasses with faster ones override)."""
        return None

    def reset(self) -> None:
        """Forget everything the cache holds; its memory (and any graphs bound to it) is kept for reuse."""
        self.cache.truncate(0)
        self.tokens, self.ends, self.last_logits = [], [], None

    def truncate(self, length: int) -> None:
        """Keep the first ``length`` positions (``length`` must be a block end)."""
        if length == self.cache.length:
            return
        if length and length not in self.ends:
            raise ValueError(f"{length} is not a block boundary of the cache")
        self.cache.truncate(length)
        del self.tokens[length:]
        self.ends = [e for e in self.ends if e <= length]
        self.last_logits = None


class RecomputeForward:
    """No cache: every pass runs the whole sequence under the block-causal mask of the same blocks."""

    def __init__(self, model: Transformer, prefix: Sequence[int], ends: Sequence[int]) -> None:
        if (ends[-1] if ends else 0) != len(prefix):
            raise ValueError("the segment ends must cover the prefix exactly")
        self.model, self.prefix, self.ends = model, list(prefix), list(ends)
        self.device = model.output_weight().device

    @property
    def length(self) -> int:
        return len(self.prefix)

    def _hidden(self, window: torch.Tensor) -> torch.Tensor:
        ids = torch.cat((torch.tensor(self.prefix, dtype=torch.long, device=window.device), window))
        mask = segment_mask([*self.ends, ids.shape[0]], window.device)
        return self.model.hidden_states(ids[None], attn_mask=mask)[0, self.length:]

    def denoise(self, window: torch.Tensor, rows: torch.Tensor, pending: torch.Tensor | None = None
                ) -> torch.Tensor:
        if pending is not None:
            self.commit(pending)
        return F.linear(self._hidden(window)[rows], self.model.output_weight())

    def commit(self, window: torch.Tensor) -> torch.Tensor:
        last = F.linear(self._hidden(window)[-1], self.model.output_weight())
        self.prefix.extend(window.tolist())
        self.ends.append(len(self.prefix))
        return last


@dataclass
class _Progress:
    """What has been generated and yielded so far."""

    policy: BlockPolicy
    generated: list[int] = field(default_factory=list)
    passes: int = 0
    finished: bool = False

    def accept(self, ids: list[int], block_done: bool) -> Commit:
        """Take newly final ids, cutting at a stop id or at max tokens."""
        fresh: list[int] = []
        for token in ids:
            if token in self.policy.stop_ids:
                self.finished = True
                break
            fresh.append(token)
            if len(self.generated) + len(fresh) >= self.policy.max_new_tokens:
                self.finished = True
                break
        self.generated.extend(fresh)
        return Commit(fresh, self.passes, block_done, self.finished)


def _no_mask(logits: torch.Tensor, mask_id: int) -> torch.Tensor:
    """Never predict the mask token: a position "decoded" to it would stream as text."""
    logits[:, mask_id] = float("-inf")
    return logits


def _select(
    policy: BlockPolicy, fused: bool, logits: torch.Tensor, share: int, generator: torch.Generator | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Tokens for the candidate rows, and which of them to unmask this pass (``fused``: on the kernel path)."""
    if fused and policy.threshold is not None and not policy.in_order:
        return above_threshold_fused(logits, policy.sampling, policy.threshold, generator)
    picked, conf = (pick_tokens_fused if fused else pick_tokens)(logits, policy.sampling, generator)
    every = torch.ones_like(conf, dtype=torch.bool)
    chosen = by_rule(conf, every, policy.threshold, policy.factor, share, policy.in_order)
    return picked, without_parallel_repeats(picked, chosen) if policy.in_order and policy.adaptive else chosen


@dataclass
class Pass:
    """A forward pass a decoder asks for: ``rows`` given = denoise (logits at rows), None = commit. The
    tensors may be on the host (the decoder keeps its window there): :meth:`on_device` moves them."""

    forward: BlockForward
    window: torch.Tensor
    rows: torch.Tensor | None
    pending: torch.Tensor | None = None

    def on_device(self) -> Pass:
        """This pass with its tensors on the forward's device."""
        device = self.forward.device
        return Pass(self.forward, self.window.to(device), None if self.rows is None else self.rows.to(device),
                    None if self.pending is None else self.pending.to(device))  # fmt: skip


def run_pass(p: Pass) -> torch.Tensor:
    p = p.on_device()
    if p.rows is None:
        return p.forward.commit(p.window)
    return p.forward.denoise(p.window, p.rows, p.pending)


def decode(
    cfg: ModelConfig,
    forward: BlockForward,
    tokens: list[int],
    policy: BlockPolicy,
    last_logits: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
    bias: LogitBias | None = None,
) -> Iterator[Commit]:
    """Generate after ``tokens`` (the prompt; ``forward.length`` of them already committed).

    Yields a :class:`Commit` after every forward pass (possibly with no new ids, so a caller can stop or
    switch between passes) and one with ``block_done`` when a window is fully decoded. ``tokens`` grows by
    each committed window. ``last_logits`` are the logits of position ``forward.length - 1`` (needed by
    token-shift families when the cache holds the whole prompt).
    """
    steps = decode_passes(cfg, forward, tokens, policy, last_logits, generator, bias)
    try:
        result = None
        while True:
            try:
                item = steps.send(result)
            except StopIteration:
                return
            if isinstance(item, Pass):
                result = run_pass(item)
            else:
                result = None
                yield item
    finally:
        steps.close()


def decode_passes(
    cfg: ModelConfig,
    forward: BlockForward,
    tokens: list[int],
    policy: BlockPolicy,
    last_logits: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
    bias: LogitBias | None = None,
) -> Generator[Commit | Pass, torch.Tensor | None, None]:
    """:func:`decode` with its forward passes handed to the caller: each :class:`Pass` it yields must be
    answered with ``send(run_pass(p))`` — or with the result of a batched run (see :mod:`dlm.batching`).
    ``bias`` is added to each pass's logits before selection (:mod:`dlm.decoding.logit_bias`)."""
    if not tokens:
        raise ValueError("the prompt is empty: give at least one token")
    if len(tokens) - forward.length >= policy.block_size:
        raise ValueError("prefill the prompt's full blocks first: the uncommitted tail must fit in one block")
    mask_id, shift = cfg.mask_token_id, cfg.token_shift
    # The kernel has no top-k / top-p filter: such sampling stays on the torch path.
    fused = kernel_path(policy.kernels, forward.device) == "triton" and fusable(policy.sampling)
    pick = pick_tokens_fused if fused else pick_tokens
    progress = _Progress(policy)
    sizes = block_sizes(policy.first_blocks, policy.block_size)
    pending: torch.Tensor | None = None  # a finished window whose KV rides along the next pass
    while True:
        start, known = forward.length + (pending.shape[0] if pending is not None else 0), len(tokens)
        end = window_end(known, next(sizes), cfg.max_position_embeddings)
        if end <= known:  # a window of nothing would be decoded for ever
            raise ValueError(f"decoding reached the end of the context ({cfg.max_position_embeddings} tokens): "
                             "cap max_new_tokens at the room the prompt leaves")
        # The window and its mask are host lists: the loop's tests and updates are then neither device launches
        # nor tensor ops (each a few microseconds of dispatch on tensors this small); a pass takes the window to
        # the device and brings back only the picked tokens.
        window = tokens[start:] + [mask_id] * (end - known)
        masked = [token == mask_id for token in window]
        emitted = known - start  # window offset of the first position not yet yielded
        shares: list[int] = []
        while True in masked:
            if shift and masked[0]:
                if last_logits is None:
                    raise ValueError("a token-shift model needs the last committed logits to start a window")
                token, _ = pick(_no_mask(last_logits[None].clone(), mask_id), policy.sampling, generator)
                window[0], masked[0] = int(token[0]), False
            else:
                sub = policy.sub_block or len(window)
                lo = masked.index(True) // sub * sub
                rows = [row for row in range(lo, min(lo + sub, len(window))) if masked[row]]
                if not shares and not policy.adaptive:
                    shares = transfer_counts(masked.count(True), policy.passes_per_block or 1)
                at = torch.tensor([row - 1 for row in rows] if shift else rows)
                logits = _no_mask((yield Pass(forward, torch.tensor(window), at, pending)), mask_id)
                if bias:
                    seen = [None if m else t for t, m in zip(window, masked, strict=True)]
                    line, offset = bias_line(tokens, start, seen, bias.reach)
                    logits = bias.apply(logits, line, [offset + row for row in rows])
                pending = None
                progress.passes += 1
                share = max(1, shares.pop(0)) if shares else 1
                picked, chosen = _select(policy, fused, logits, share, generator)
                # one transfer: the tokens that commit, else -1
                for row, token in zip(rows, torch.where(chosen, picked, -1).tolist(), strict=True):
                    if token >= 0:
                        window[row], masked[row] = token, False
            ready = masked.index(True) if True in masked else len(window)
            commit = progress.accept(window[emitted:ready], ready == len(window))
            emitted = ready
            yield commit
            if progress.finished:
                return
        tokens.extend(window[known - start:])
        if shift:  # the next window starts from this one's last logit: commit now, in a pass of its own
            last_logits = yield Pass(forward, torch.tensor(window), None)
            progress.passes += 1
        else:
            pending = torch.tensor(window)

