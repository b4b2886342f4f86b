"""Fast-dLLM v2's reference samplers (``Fast_dLLM_QwenForCausalLM.generate`` and ``batch_sample``), exactly.

Semantics worth knowing: logits are token-shifted inside the block window (position i is predicted by
output i-1, position 0 by its own output); a prompt longer than a block has its full blocks prefilled, and if
it ends on a block boundary the next token is predicted autoregressively from the last prompt logit; every
committed block likewise appends one autoregressive token, which becomes the first token of the next
block; blocks are decoded in ``small_block_size`` sub-blocks, left to right, unmasking the most confident
position plus every one strictly above ``threshold``. The denoising passes do not pass ``block_size`` to
the model, so their mask is block-causal with the model's default block of 32 (all-true whenever the block
size divides 32). ``use_block_cache`` reuses a sub-block-stale KV of the window, an approximation
reproduced here as the reference computes it. A prompt exactly one block long is ignored by the
reference (it is neither prefilled nor in the window); that quirk is reproduced too.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from dlm.decoding.confidence import Sampling, above_threshold, pick_tokens
from dlm.decoding.prefill import chunk_mask, prefill_blocks
from dlm.kv_cache import KVCache
from dlm.model import Transformer

DENOISE_MASK_BLOCK = 32  # the model's default ``block_size`` argument, which the denoising passes use


class WindowScratch:
    """Cache view for the block-cache approximation: the window's KV lives, uncommitted, after the prefix.

    ``offset`` is where the new keys go inside the window; attention always sees prefix + whole window, so
    the positions not recomputed in this pass keep the keys of an earlier pass.
    """

    def __init__(self, cache: KVCache, offset: int, window: int) -> None:
        self.cache, self.offset, self.window = cache, offset, window
        self.length = cache.length

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        start = self.cache.length + self.offset
        self.cache.k[layer, :, :, start:start + k.shape[2]] = k
        self.cache.v[layer, :, :, start:start + v.shape[2]] = v
        end = self.cache.length + self.window
        return self.cache.k[layer, :, :, :end], self.cache.v[layer, :, :, :end]


def _shift(logits: torch.Tensor) -> torch.Tensor:
    return torch.cat((logits[:1], logits[:-1]))


@dataclass
class _Window:
    """The block being decoded: the last ``size`` ids of ``x``, at positions after the cache."""

    model: Transformer
    cache: KVCache
    x: list[int]
    size: int
    small: int
    sampling: Sampling
    threshold: float
    mask_id: int
    use_block_cache: bool

    def _positions(self, offset: int, n: int) -> torch.Tensor:
        return torch.arange(self.cache.length + offset, self.cache.length + offset + n)

    def _logits(self, start: int, end: int, fresh: bool) -> torch.Tensor:
        """Shifted logits for window positions [start, end)."""
        ids = torch.tensor(self.x[-self.size:])
        if self.use_block_cache and not fresh:
            part = ids[start:end]
            view = WindowScratch(self.cache, start, self.size)
            return _shift(self.model(part[None], self._positions(start, end - start), cache=view)[0])
        # the denoising mask: block-causal with the model's default block, over the cache and the window
        mask = chunk_mask(self.cache.length, self.size, DENOISE_MASK_BLOCK, ids.device)
        cache = WindowScratch(self.cache, 0, self.size) if self.use_block_cache else self.cache
        return _shift(self.model(ids[None], self._positions(0, self.size), mask, cache)[0])[start:end]

    def denoise(self, should_stop: Callable[[], bool]) -> None:
        """Unmask the window sub-block by sub-block until it is full or ``should_stop()``."""
        have_block_cache = False
        base = len(self.x) - self.size
        for start in range(0, self.size, self.small):
            end = start + self.small
            while True:
                masked = torch.tensor(self.x[base + start:base + end]) == self.mask_id
                if not masked.any() or should_stop():
                    break
                fresh = not have_block_cache or self.x[base + start] == self.mask_id
                logits = self._logits(start, end, fresh)
                have_block_cache = True
                tokens, conf = pick_tokens(logits, self.sampling)
                for i in above_threshold(conf, masked, self.threshold).nonzero()[:, 0].tolist():
                    self.x[base + start + i] = int(tokens[i])

    def commit(self) -> int:
        """Write the window's KV into the cache; returns the autoregressive next token."""
        ids = torch.tensor(self.x[-self.size:])
        mask = chunk_mask(self.cache.length, self.size, self.size, ids.device)
        self.cache.store = True
        logits = self.model(ids[None], self._positions(0, self.size), mask, self.cache)[0]
        self.cache.store = False
        self.cache.commit(self.size)
        return int(logits[-1].argmax())


def _stop_reached(x: list[int], start: int, stop_token: int, mask_id: int) -> bool:
    """The stop token is in x[start:] with no mask before it."""
    tail = x[start:]
    return stop_token in tail and mask_id not in tail[:tail.index(stop_token)]


@torch.no_grad()
def _run(
    model: Transformer, prompt_ids: Sequence[int], max_new_tokens: int, mask_id: int, threshold: float,
    small_block_size: int, block_size: int, stop_token: int, top_p: float, temperature: float,
    use_block_cache: bool, pad_id: int | None,
) -> list[int]:
    """Both samplers; ``pad_id`` selects batch_sample's stop handling (finish the block, pad after the stop)."""
    if block_size % small_block_size:
        raise ValueError(f"small_block_size {small_block_size} must divide block_size {block_size}")
    batch = pad_id is not None
    x, prompt_len = list(prompt_ids), len(prompt_ids)
    cache = KVCache(model.cfg, prompt_len + max_new_tokens + 2 * block_size, dtype=model.output_weight().dtype)
    if prompt_len > block_size:
        last = prefill_blocks(model, cache, torch.tensor(x[:prompt_len // block_size * block_size]), block_size)
        if prompt_len % block_size == 0:
            x.append(int(last.argmax()))
    sampling = Sampling(temperature=temperature, top_p=top_p)
    for _ in range(max_new_tokens // block_size):
        if not batch and stop_token in x[prompt_len:]:
            break
        block_start = len(x)
        x.extend([mask_id] * (block_size - len(x) % block_size))
        window = _Window(model, cache, x, block_size, small_block_size, sampling, threshold, mask_id, use_block_cache)
        window.denoise(lambda s=block_start: not batch and _stop_reached(x, s, stop_token, mask_id))
        if stop_token in x[block_start:]:
            if batch:  # everything after the first stop token becomes padding
                first = x.index(stop_token, prompt_len)
                x[first + 1:] = [pad_id] * (len(x) - first - 1)
            break
        x.append(window.commit())
    if not batch and stop_token in x[prompt_len:]:
        x = x[:x.index(stop_token, prompt_len) + 1]
    return x


def generate(
    model: Transformer, prompt_ids: Sequence[int], max_new_tokens: int, mask_id: int = 151665,
    threshold: float = 1.0, small_block_size: int = 8, block_size: int = 32, stop_token: int = 151645,
    top_p: float = 0.95, temperature: float = 0.0, use_block_cache: bool = False,
) -> list[int]:
    """``Fast_dLLM_QwenForCausalLM.generate``: the full sequence, truncated right after the first stop token."""
    return _run(model, prompt_ids, max_new_tokens, mask_id, threshold, small_block_size, block_size, stop_token,
                top_p, temperature, use_block_cache, pad_id=None)


def batch_sample(
    model: Transformer, prompt_ids: Sequence[int], max_new_tokens: int, pad_id: int, mask_id: int = 151665,
    threshold: float = 0.95, small_block_size: int = 8, block_size: int = 32, stop_token: int = 151645,
    top_p: float = 0.95, temperature: float = 0.0,
) -> list[int]:
    """``batch_sample`` for a batch of one (layer reuse off): the block holding a stop token is finished,
    positions after the stop token become ``pad_id``, and nothing is truncated."""
    return _run(model, prompt_ids, max_new_tokens, mask_id, threshold, small_block_size, block_size, stop_token,
                top_p, temperature, use_block_cache=False, pad_id=pad_id)
