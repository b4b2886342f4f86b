"""A constrained decode loop for JSON output, on the model's forward pass and `dlm.constrained`.

The engine has no hook yet for constraining a span, so `response_format` json_schema / json_object and forced
tool calls decode here. A grammar is a left-to-right object while diffusion fills a block in any order, so
each pass commits masked positions strictly left to right: the leftmost always (its argmax over the tokens
the schema allows next), then each following one while its own allowed-argmax is at least `threshold`
confident. Every committed token is checked by the automaton, so the output is valid by construction.

Supported: block-causal checkpoints without token shift (SDAR, the a2d Qwen conversions) — their KV cache is
exact, so committing a block and appending it to the cache is all the bookkeeping there is.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch

from dlm.constrained import JsonSchemaConstraint
from dlm.decoding.confidence import Sampling, pick_tokens
from dlm.decoding.prefill import prefill_blocks
from dlm.decoding.schedule import align_up
from dlm.kv_cache import KVCache
from dlm.model import Transformer


class UnsupportedModel(ValueError):
    """The checkpoint's family needs decoding this loop does not implement."""


def check_supported(model: Transformer) -> None:
    cfg = model.cfg
    if cfg.bidirectional or cfg.token_shift:
        raise UnsupportedModel(f"constrained JSON decoding needs a block-causal checkpoint without token shift "
                               f"(sdar, a2d-*); this one is {cfg.model_type!r}")


@torch.no_grad()
def constrained_decode(
    model: Transformer,
    constraint: JsonSchemaConstraint,
    prompt_ids: Sequence[int],
    max_tokens: int,
    sampling: Sampling,
    threshold: float,
    generator: torch.Generator | None = None,
) -> Iterator[list[int]]:
    """Yield the token ids committed by each pass (stop ids left out); ends at a stop id or `max_tokens`."""
    check_supported(model)
    cfg = model.cfg
    size, mask_id = cfg.block_size, cfg.mask_token_id
    device = model.output_weight().device
    prompt = list(prompt_ids)
    start = len(prompt) // size * size
    cache = KVCache(cfg, align_up(len(prompt) + max_tokens, size), dtype=model.output_weight().dtype,
                    device=device)
    prefill_blocks(model, cache, torch.tensor(prompt[:start], dtype=torch.long, device=device), size)
    ids = prompt[start:]  # the prompt's tail shares the first generated block
    generated = 0
    while True:
        first = len(ids)
        ids += [mask_id] * (size - first)
        positions = torch.arange(cache.length, cache.length + size, device=device)
        for _ in range(size - first):
            if first == size:
                break
            logits = model(torch.tensor(ids, device=device)[None], position_ids=positions, cache=cache)[0]
            committed = []
            for p in range(first, size):
                token, confidence = _pick(logits[p], constraint, sampling, generator)
                if committed and confidence < threshold:
                    break
                constraint.advance(token)
                ids[p] = token
                first = p + 1
                if constraint.stopped:
                    break
                committed.append(token)
                generated += 1
                if generated == max_tokens:
                    break
            if committed:
                yield committed
            if constraint.stopped or generated == max_tokens:
                return
        cache.store = True
        model(torch.tensor(ids, device=device)[None], position_ids=positions, cache=cache)
        cache.store = False
        cache.commit(size)
        ids = []


def _pick(logits: torch.Tensor, constraint: JsonSchemaConstraint, sampling: Sampling,
          generator: torch.Generator | None) -> tuple[int, float]:
    """The next token among those the schema allows, with its probability among them."""
    allowed = constraint.allowed_token_ids()
    if not allowed:
        raise RuntimeError(f"the schema allows no token after {constraint.text!r}")
    index = torch.tensor(allowed, device=logits.device)
    token, confidence = pick_tokens(logits[index][None], sampling, generator)
    return allowed[int(token[0])], float(confidence[0])
