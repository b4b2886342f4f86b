"""The streaming decoder of the fully bidirectional families (LLaDA, Dream), Fast-dLLM style.

A bidirectional model has no exact KV cache, and its answer length is a canvas of masks it sees all at
once. This decoder:

- decodes **semi-autoregressive blocks** after the prompt; each block opens with a *refresh* pass over
  prompt + canvas that rebuilds the :class:`~dlm.bidirectional_cache.CanvasCache` and already unmasks,
  and continues with cheap passes over the block (dual cache) or the block and the rest of the canvas
  (prefix cache);
- unmasks by **confidence threshold** (every mask at or above it, at least the best one per pass), by the
  **factor rule** (``confidence.by_factor``) or on the family's **fixed schedule** of ``steps_per_block`` passes
  (no more than the block has masks);
- **sizes the canvas adaptively**: it holds the current block plus ``lookahead_blocks`` blocks of masks
  and grows as decoding advances, so a 20-token answer never pays for a 512-token canvas in every
  refresh pass (``lookahead_blocks=None`` gives the references' full canvas);
- **streams** the contiguous decoded prefix the moment it exists (an unmasked token is never remasked,
  so it is final), in a commit after every pass, and stops at the first stop token, whose id is not emitted.

Unlike Dream's reference block sampler, a token-shift family's passes start one position before the
block, so every block position is predicted from its left neighbour as in training, instead of the
first block position being predicted from itself.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Literal

import torch

from dlm.bidirectional_cache import CanvasCache
from dlm.decoding import Commit, DecodeParams
from dlm.decoding.confidence import Sampling, by_rule, check_pass_rule, pick_tokens
from dlm.model import Transformer

CacheMode = Literal["prefix", "dual"]


@dataclass(frozen=True)
class Family:
    """What differs between the bidirectional families in this decoder."""

    name: str
    token_shift: bool  # output i-1 predicts token i (Dream)
    schedule: Callable[[int, int], list[int]]  # (masks in block, passes) -> tokens to unmask per pass


class _Decoder:
    """One generation's state: the canvas, its cache and what has been streamed."""

    def __init__(
        self,
        family: Family,
        model: Transformer,
        prompt: list[int],
        params: DecodeParams,
        mask_id: int,
        stop_ids: frozenset[int],
        lookahead_blocks: int | None,
    ) -> None:
        self.family, self.model, self.params, self.mask_id = family, model, params, mask_id
        self.stop_ids, self.lookahead = stop_ids, lookahead_blocks
        self.block = params.block_size or model.cfg.block_size
        self.answer_end = len(prompt) + params.max_new_tokens
        weight = model.output_weight()
        self.x = torch.full((self.answer_end,), mask_id, dtype=torch.long, device=weight.device)
        self.x[: len(prompt)] = torch.tensor(prompt, dtype=torch.long)
        self.kv: CanvasCache | None = None
        self.dtype = weight.dtype
        self.canvas_end = 0
        self.streamed = len(prompt)  # canvas positions already handed out
        self.passes = 0
        self.sampling = Sampling(temperature=params.temperature, top_p=params.top_p)
        self.generator = None
        if params.seed is not None:
            self.generator = torch.Generator(device=weight.device).manual_seed(params.seed)

    def grow_canvas(self, block_end: int) -> CanvasCache:
        """Masks up to ``lookahead`` blocks past the current one (all of the answer without a lookahead)."""
        want = self.answer_end if self.lookahead is None else block_end + self.lookahead * self.block
        self.canvas_end = max(self.canvas_end, min(want, self.answer_end))
        if self.kv is None or self.kv.capacity < self.canvas_end:
            # The next pass is a refresh that rewrites every position, so nothing needs copying.
            self.kv = CanvasCache(self.model.cfg, self.canvas_end, dtype=self.dtype, device=self.x.device)
        return self.kv

    def forward(self, start: int, end: int, rows: slice) -> torch.Tensor:
        """Logits [n, V] of the ``rows`` of a pass over x[start:end] (only the block's: the output head
        over a whole canvas would cost more than the rest of a small model)."""
        self.passes += 1
        with torch.no_grad():  # per pass: a generator must not leave grad mode off for its caller
            hidden = self.model.hidden_states(self.x[None, start:end], cache=self.kv)[0, rows]
            return torch.nn.functional.linear(hidden, self.model.output_weight())

    def unmask(self, start: int, end: int, logits: torch.Tensor, count: int | None) -> None:
        """Fill masks of block x[start:end] from its logits: ``count`` best, or by threshold / factor if None."""
        masked = self.x[start:end] == self.mask_id
        if not bool(masked.any()):
            return
        logits[:, self.mask_id] = -torch.inf  # writing the mask back would never finish the block
        tok, conf = pick_tokens(logits, self.sampling, self.generator)
        chosen = by_rule(conf, masked, self.params.threshold, self.params.factor, count)
        self.x[start:end][chosen] = tok[chosen]

    def ready(self, block_done: bool) -> Commit:
        """The newly final contiguous prefix (cut before a stop token), empty if it did not grow: a commit
        after every pass is where the scheduler runs other jobs and where a generation may be cancelled."""
        begin = self.streamed
        decoded = (self.x[begin : self.canvas_end] == self.mask_id).cumsum(0) == 0
        new = self.x[begin : begin + int(decoded.sum())].tolist()
        stop_at = next((i for i, t in enumerate(new) if t in self.stop_ids), None)
        finished = stop_at is not None or begin + len(new) >= self.answer_end
        if stop_at is not None:
            new = new[:stop_at]
        self.streamed += len(new)
        return Commit(new, self.passes, block_done or finished, finished)

    def schedule(self, masks: int) -> list[int]:
        """Tokens to unmask per pass of a block of ``masks`` masks on the fixed schedule, at most one pass per
        mask: a short last block given a full block's passes would spend most of them unmasking nothing
        (Dream's linspace puts its zeros first)."""
        return self.family.schedule(masks, min(self.params.steps_per_block or masks, masks))

    def decode_block(self, start: int, end: int, cache: CacheMode) -> Iterator[Commit]:
        shift = int(self.family.token_shift)
        fixed = self.params.threshold is None and self.params.factor is None
        schedule = self.schedule(end - start) if fixed else []
        kv = self.grow_canvas(end)
        kv.refresh()
        logits = self.forward(0, self.canvas_end, slice(start - shift, end - shift))
        window_start = start - shift
        window_end = end if cache == "dual" else self.canvas_end
        if cache == "dual":
            kv.dual(window_start, self.canvas_end)
        else:
            kv.prefix(window_start)
        step = 0
        while True:
            self.unmask(start, end, logits, schedule[step] if fixed else None)
            step += 1
            block_done = not bool((self.x[start:end] == self.mask_id).any())
            commit = self.ready(block_done)
            yield commit
            if commit.finished or block_done:
                return
            logits = self.forward(window_start, window_end, slice(0, end - start))


def stream_blocks(
    family: Family,
    model: Transformer,
    prompt_ids: Iterable[int],
    params: DecodeParams,
    mask_id: int,
    stop_ids: Iterable[int] = (),
    *,
    cache: CacheMode = "dual",
    lookahead_blocks: int | None = 2,
) -> Iterator[Commit]:
    """Decode an answer to ``prompt_ids`` block by block, yielding each newly final run of tokens."""
    prompt = list(prompt_ids)
    if not prompt:
        raise ValueError("the prompt is empty: a bidirectional model needs at least one token to condition on")
    if params.max_new_tokens <= 0:
        raise ValueError(f"max_new_tokens must be positive, got {params.max_new_tokens}")
    if cache not in ("prefix", "dual"):
        raise ValueError(f"cache must be 'prefix' or 'dual', got {cache!r}")
    if params.block_size is not None and params.block_size <= 0:
        raise ValueError(f"block_size must be positive, got {params.block_size}")
    check_pass_rule(params.threshold, params.factor)
    if params.threshold is None and params.steps_per_block is not None and params.steps_per_block <= 0:
        raise ValueError(f"steps_per_block must be positive, got {params.steps_per_block}")
    if lookahead_blocks is not None and lookahead_blocks < 0:
        raise ValueError(f"lookahead_blocks must be >= 0 or None, got {lookahead_blocks}")
    decoder = _Decoder(
        family, model, prompt, params, mask_id, frozenset(stop_ids) | params.stop_ids, lookahead_blocks
    )
    for start in range(len(prompt), decoder.answer_end, decoder.block):
        for commit in decoder.decode_block(start, min(start + decoder.block, decoder.answer_end), cache):
            yield commit
            if commit.finished:
                return
