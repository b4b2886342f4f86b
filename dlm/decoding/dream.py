"""Dream: the official samplers, reproduced exactly, and the streaming generator the engine uses.

Dream's quirks, all taken from its reference code (Fast-dLLM's ``dream/model/generation_utils.py`` and
``generation_utils_block.py``, themselves modified from HKUNLP/Dream):

- **Token shift**: Dream was adapted from the autoregressive Qwen2.5, so the output at position i-1
  predicts token i. Every sampler shifts the logits right by one, and position 0 of the window keeps
  its own output (``cat([logits[:1], logits[:-1]])``). Inside a cached window this means the first
  block position is predicted from *itself*, not from the prompt's last position; the block sampler
  sidesteps that by filling the first block position from the full refresh pass.
- **The schedule is a float32 linspace**: ``timesteps = linspace(1, eps, steps + 1)`` and step i unmasks
  ``int(n_mask * (1 - s / t))`` tokens. The float32 rounding of ``s / t`` makes the counts uneven (16
  masks in 16 steps unmask ``[0, 1, ..., 1, 2]``, not sixteen 1s), so the schedule must be computed in
  float32 exactly as the reference does, never in exact arithmetic.
- **Confidence** per ``alg``: top-1 probability (``maskgit_plus``), top-1 minus top-2 (``topk_margin``),
  or negative entropy (``entropy``), all from the float32 softmax. The block sampler uses the entropy for
  every alg except ``confidence_threshold``.
- **confidence_threshold** offers ``n_mask / steps`` tokens per step plus those rejected before; the
  top-1 is always kept, the rest only at or above the threshold. Rejections on the last step add one
  more step, so the forward count can exceed ``steps``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import partial

import torch

from dlm.bidirectional_cache import CanvasCache
from dlm.decoding.bidirectional import Family, stream_blocks
from dlm.model import Transformer

ALGS = ("maskgit_plus", "topk_margin", "entropy", "confidence_threshold")


@dataclass
class DreamGeneration:
    """A reference sampler's result: the whole sequence, the forward count and, without a cache, the
    step at which each generated position was filled."""

    output_ids: list[int]
    nfe: int
    unmask_step: list[int] = field(default_factory=list)

    @property
    def tokens_unmasked_per_step(self) -> list[int]:
        return [self.unmask_step.count(i) for i in range(self.nfe)]


def shift_logits(logits: torch.Tensor) -> torch.Tensor:
    """[..., L, V] -> the prediction for each position: output i-1, and output 0 for position 0."""
    return torch.cat((logits[..., :1, :], logits[..., :-1, :]), dim=-2)


# The references build their generation config from the model config, which in transformers 4.53 still
# carries the legacy default ``top_k=50``; so even greedy Dream decoding renormalises the softmax over the
# 50 best tokens before taking confidences, which shifts them enough to reorder close positions.
REFERENCE_TOP_K = 50


def confidence(logits: torch.Tensor, alg: str, top_k: int | None = REFERENCE_TOP_K) -> tuple[torch.Tensor, torch.Tensor]:
    """(confidence, greedy token) per row of ``logits`` [n, V], from the float32 softmax over the top-k."""
    if top_k is not None:
        kth = torch.topk(logits, min(top_k, logits.shape[-1]))[0][..., -1:]
        logits = logits.masked_fill(logits < kth, torch.finfo(logits.dtype).min)
    probs = torch.softmax(logits, dim=-1)
    top, x0 = probs.max(dim=-1)
    if alg == "topk_margin":
        two = probs.topk(2, dim=-1).values
        return two[:, 0] - two[:, 1], x0
    if alg == "entropy":
        return (probs * torch.log(probs + 1e-10)).sum(-1), x0
    return top, x0


def linspace_count(n_mask: int, timesteps: torch.Tensor, step: int) -> int:
    """Tokens to unmask at ``step`` (not the last) of the float32 linspace schedule, rounded as Dream does."""
    t, s = timesteps[step], timesteps[step + 1]
    return int(torch.tensor(float(n_mask)) * (1 - s / t))


def dream_timesteps(steps: int, eps: float = 1e-3) -> torch.Tensor:
    return torch.linspace(1, eps, steps + 1, dtype=torch.float32)


def linspace_schedule(mask_count: int, steps: int, eps: float = 1e-3) -> list[int]:
    """Tokens unmasked per step when every step unmasks what the schedule asks (the last one: the rest)."""
    timesteps, left, counts = dream_timesteps(steps, eps), mask_count, []
    for i in range(steps):
        counts.append(left if i == steps - 1 else linspace_count(left, timesteps, i))
        left -= counts[-1]
    return counts


def _check_alg(alg: str) -> None:
    if alg not in ALGS:
        raise ValueError(f"unknown Dream alg {alg!r}; supported: {', '.join(ALGS)} ('origin' is random)")


def _canvas(model: Transformer, prompt_ids: Iterable[int], max_new_tokens: int, mask_id: int) -> torch.Tensor:
    prompt = torch.tensor(list(prompt_ids), dtype=torch.long)
    x = torch.full((len(prompt) + max_new_tokens,), mask_id, dtype=torch.long, device=model.output_weight().device)
    x[: len(prompt)] = prompt
    return x


@torch.no_grad()
def diffusion_generate(
    model: Transformer,
    prompt_ids: Iterable[int],
    *,
    max_new_tokens: int,
    steps: int,
    alg: str,
    mask_id: int,
    threshold: float = 0.9,
    eps: float = 1e-3,
) -> DreamGeneration:
    """``DreamGenerationMixin.diffusion_generate`` without a cache, greedy (temperature 0, alg_temp 0)."""
    _check_alg(alg)
    x = _canvas(model, prompt_ids, max_new_tokens, mask_id)
    prompt_len = len(x) - max_new_tokens
    filled_at = torch.full((len(x),), -1, dtype=torch.long, device=x.device)
    timesteps = dream_timesteps(steps, eps)
    if alg == "confidence_threshold":
        if max_new_tokens % steps:
            raise ValueError(f"confidence_threshold needs max_new_tokens {max_new_tokens} divisible by steps {steps}")
        per_step, carry = max_new_tokens // steps, 0
    i = 0
    while i < steps:
        conf, tokens = _ranked(x, shift_logits(model(x[None])[0]), len(x), alg, mask_id)
        n_mask = int((x == mask_id).sum())
        if alg == "confidence_threshold":
            top_conf, top = _topk(conf, per_step + carry)
            keep = top_conf >= threshold
            keep[0] = True
            carry = int((~keep).sum())
            if carry and i == steps - 1:  # the reference grows the loop by one step and offers only the carry
                steps, per_step = steps + 1, 0
            top = top[keep]
        else:
            _, top = _topk(conf, linspace_count(n_mask, timesteps, i) if i < steps - 1 else n_mask)
        x[top] = tokens[top]
        filled_at[top] = i
        i += 1
    return DreamGeneration(x.tolist(), steps, filled_at[prompt_len:].tolist())


@torch.no_grad()
def block_generate(
    model: Transformer,
    prompt_ids: Iterable[int],
    *,
    max_new_tokens: int,
    steps: int,
    alg: str,
    block_length: int,
    dual_cache: bool,
    mask_id: int,
    threshold: float = 0.9,
    eps: float = 1e-3,
) -> DreamGeneration:
    """``generation_utils_block.py``'s ``_sample``: blocks after the prompt with a prefix or dual cache.

    Each block opens with a full forward that refreshes the cache and fills the block's first position;
    the passes after it see the window ``x[start:]`` (prefix) or ``x[start:end]`` (dual), shifted inside
    the window. Like the reference, every pass is taken before the loop checks whether it was needed.
    """
    _check_alg(alg)
    x = _canvas(model, prompt_ids, max_new_tokens, mask_id)
    prompt_len = len(x) - max_new_tokens
    if max_new_tokens % block_length:
        raise ValueError(f"max_new_tokens {max_new_tokens} is not a multiple of block_length {block_length}")
    num_blocks = max_new_tokens // block_length
    if steps % num_blocks:
        raise ValueError(f"steps {steps} is not a multiple of the number of blocks {num_blocks}")
    steps_per_block = steps // num_blocks
    timesteps = dream_timesteps(steps_per_block, eps)
    kv = CanvasCache(model.cfg, len(x), dtype=model.output_weight().dtype, device=x.device)
    nfe = 0
    for block in range(num_blocks):
        start = prompt_len + block * block_length
        end = start + block_length
        kv.refresh()
        x[start] = _probs_argmax(shift_logits(model(x[None], cache=kv)[0])[start])
        nfe += 1
        kv.dual(start, len(x)) if dual_cache else kv.prefix(start)
        i = 1
        while True:
            window = x[start:end] if dual_cache else x[start:]
            logits = shift_logits(model(window[None], cache=kv)[0])
            nfe += 1
            n_mask = int((x[start:end] == mask_id).sum())
            if alg == "confidence_threshold":
                conf, tokens = _ranked(window, logits, block_length, "maskgit_plus", mask_id)
                top_conf, top = _topk(conf, n_mask)
                if n_mask:
                    keep = top_conf >= threshold
                    keep[0] = True
                    window[top[keep]] = tokens[top[keep]]
            else:
                if i == steps_per_block:
                    break
                count = n_mask if i == steps_per_block - 1 else linspace_count(n_mask, timesteps, i)
                conf, tokens = _ranked(window, logits, block_length, "entropy", mask_id)
                _, top = _topk(conf, count)
                window[top] = tokens[top]
                i += 1
            if not bool((x[start:end] == mask_id).any()):
                break
    return DreamGeneration(x.tolist(), nfe)


def _ranked(
    window: torch.Tensor, logits: torch.Tensor, limit: int, alg: str, mask_id: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """(confidence, greedy token) over the whole fed window, -inf / mask where nothing may be unmasked.

    Shaped like the reference's ``full_confidence`` on purpose: the float32 top-1 probabilities of a
    peaked softmax tie exactly, and ``torch.topk`` breaks ties by layout, so ranking a differently
    shaped tensor would pick other positions.
    """
    masked = window == mask_id
    masked[limit:] = False
    conf_m, x0_m = confidence(logits[masked], alg)
    conf = torch.full(window.shape, -torch.inf, dtype=logits.dtype, device=logits.device)
    conf[masked] = conf_m
    tokens = torch.full_like(window, mask_id)
    tokens[masked] = x0_m
    return conf, tokens


def _topk(conf: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``torch.topk`` on a [1, L] row, as the reference calls it (tie order depends on the shape)."""
    values, index = torch.topk(conf[None], k)
    return values[0], index[0]


def _probs_argmax(logits: torch.Tensor) -> torch.Tensor:
    """The reference's greedy token: argmax of the softmax (which can tie where the logits do not)."""
    return torch.softmax(logits, dim=-1).argmax(-1)


DREAM = Family(name="dream", token_shift=True, schedule=linspace_schedule)


# Stream a Dream answer block by block (see :func:`dlm.decoding.bidirectional.stream_blocks`).
stream_generate = partial(stream_blocks, DREAM)
