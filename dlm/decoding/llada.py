"""LLaDA: the official samplers, reproduced exactly, and the streaming generator the engine uses.

LLaDA's quirks, all taken from its reference code (ML-GSAI/LLaDA ``generate.py`` and NVlabs/Fast-dLLM
``llada/generate.py``):

- **No token shift**: the logit at position i predicts token i.
- **Blocks start right after the prompt**, not at multiples of the block size: the answer canvas of
  ``gen_length`` masks is cut into ``gen_length // block_length`` blocks, each given
  ``steps // num_blocks`` steps.
- **The fixed schedule spreads the remainder over the first steps**: ``mask_count // steps`` tokens per
  step plus one for the first ``mask_count % steps`` steps (:func:`~dlm.decoding.schedule.transfer_counts`).
- **Confidence** is the softmax probability of the argmax token. ML-GSAI computes it in the model's dtype,
  Fast-dLLM in float64; both are offered because a threshold can fall between the two roundings.
- **Nothing stops at EOS**: the references fill the whole canvas. LLaDA-Instruct pads its answers with
  EOS, which is why :func:`stream_generate` may stop there and why its canvas can be sized adaptively.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import partial
from typing import Literal

import torch

from dlm.bidirectional_cache import CanvasCache
from dlm.decoding.bidirectional import Family, stream_blocks
from dlm.decoding.schedule import transfer_counts
from dlm.model import Transformer


@dataclass
class Generation:
    """What a reference sampler returns: the whole sequence (prompt included) and its forward count."""

    output_ids: list[int]
    nfe: int


def _unmask(
    window: torch.Tensor,
    logits: torch.Tensor,
    limit: int,
    mask_id: int,
    count: int | None,
    threshold: float | None,
    confidence_dtype: torch.dtype | None,
) -> None:
    """Fill some masks of ``window[:limit]`` (a view into the canvas) from the window's ``logits`` [n, V].

    ``count`` given: the ``count`` most confident masks. ``threshold`` given: the most confident mask
    plus every other mask whose confidence reaches the threshold. The ranking runs over the whole fed
    window, as in the references, because ``torch.topk`` breaks exact ties by layout.
    """
    masked = window == mask_id
    masked[limit:] = False
    x0 = logits.argmax(-1)
    probs = torch.softmax(logits.to(confidence_dtype or logits.dtype), dim=-1)
    conf = probs.gather(-1, x0[:, None])[:, 0]
    conf = torch.where(masked, conf, torch.full_like(conf, -torch.inf))
    k = int(masked.sum()) if threshold is not None else count
    if not k:
        return
    top_conf, top = torch.topk(conf, k)
    if threshold is not None:
        keep = top_conf >= threshold
        keep[0] = True
        top = top[keep]
    window[top] = x0[top]


@torch.no_grad()
def generate(
    model: Transformer,
    prompt_ids: Iterable[int],
    *,
    steps: int,
    gen_length: int,
    block_length: int,
    mask_id: int,
    threshold: float | None = None,
    cache: Literal["prefix", "dual"] | None = None,
    confidence_dtype: torch.dtype | None = torch.float64,
) -> Generation:
    """Greedy LLaDA decoding, the way the reference samplers do it (batch of one, temperature 0).

    - ML-GSAI ``generate``: ``threshold=None, cache=None, confidence_dtype=None`` (model dtype).
    - Fast-dLLM ``generate``: ``cache=None`` with a ``threshold`` or the fixed schedule.
    - Fast-dLLM ``generate_with_prefix_cache`` / ``generate_with_dual_cache``: ``cache="prefix"|"dual"``.
      Each block starts with a full forward that refreshes the cache *and* unmasks (step 0 of the
      schedule); the passes after it feed ``x[start:]`` (prefix) or ``x[start:end]`` (dual).
    """
    prompt = torch.tensor(list(prompt_ids), dtype=torch.long)
    if gen_length % block_length:
        raise ValueError(f"gen_length {gen_length} is not a multiple of block_length {block_length}")
    num_blocks = gen_length // block_length
    if steps % num_blocks:
        raise ValueError(f"steps {steps} is not a multiple of the number of blocks {num_blocks}")
    steps_per_block = steps // num_blocks
    device = model.output_weight().device
    x = torch.full((len(prompt) + gen_length,), mask_id, dtype=torch.long, device=device)
    x[: len(prompt)] = prompt
    kv = None
    if cache is not None:
        kv = CanvasCache(model.cfg, len(x), dtype=model.output_weight().dtype, device=device)
    nfe = 0
    for block in range(num_blocks):
        start = len(prompt) + block * block_length
        end = start + block_length
        schedule = transfer_counts(block_length, steps_per_block)
        step = 0
        while True:
            if kv is None or step == 0:
                if kv is not None:
                    kv.refresh()
                window, limit = x, end
                logits = model(window[None], cache=kv)[0]
                if kv is not None:
                    kv.prefix(start) if cache == "prefix" else kv.dual(start, len(x))
            else:
                window, limit = (x[start:] if cache == "prefix" else x[start:end]), block_length
                logits = model(window[None], cache=kv)[0]
            nfe += 1
            count = None  # by threshold
            if threshold is None:  # (the cached references' extra pass after a full block has no entry)
                count = schedule[step] if step < len(schedule) else 0
            _unmask(window, logits, limit, mask_id, count, threshold, confidence_dtype)
            step += 1
            # The cached references enter their pass loop after the refresh unconditionally, so a block
            # the refresh pass already finished still costs one more pass (it shows in nfe).
            if not bool((x[start:end] == mask_id).any()) and (kv is None or step > 1):
                break
    return Generation(x.tolist(), nfe)


LLADA = Family(name="llada", token_shift=False, schedule=transfer_counts)


# Stream a LLaDA answer block by block (see :func:`dlm.decoding.bidirectional.stream_blocks`).
stream_generate = partial(stream_blocks, LLADA)
