"""A constrained decode loop for JSON output, on the engine's block-causal forward and `dlm.constrained`.

The engine has no hook for constraining a span yet, so `response_format` json_schema / json_object and
forced tool calls decode here. A grammar reads left to right while diffusion fills a block in any order, so
each pass commits masked positions strictly left to right: the leftmost always (its best token among those
the schema allows next), then each following one while its own allowed-best is at least `bar(n)` confident,
n being its place in the pass's run (`BlockPolicy.bar`: a threshold, or the factor rule's rising bar).
Every committed token has been checked by the automaton, and none is committed that leaves the JSON unable
to close within `max_tokens`, so the output is valid by construction (given a budget at least the schema's
shortest instance, in tokens). Token-shift families predict position i from output i-1, like the engine's decoder.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch

from dlm.config import ModelConfig
from dlm.constrained import JsonSchemaConstraint
from dlm.decoding.block_causal import BlockForward
from dlm.decoding.confidence import Sampling, pick_tokens
from dlm.decoding.logit_bias import LogitBias, bias_line
from dlm.decoding.schedule import window_end


class UnsupportedModel(ValueError):
    """The checkpoint's family needs decoding this loop does not implement."""


def check_supported(cfg: ModelConfig) -> None:
    if cfg.bidirectional:
        raise UnsupportedModel(f"constrained JSON decoding needs a block-causal checkpoint (sdar, fast_dllm_qwen, "
                               f"a2d-*); this one is {cfg.model_type!r}")


def constrained_decode(
    cfg: ModelConfig,
    forward: BlockForward,
    tokens: list[int],
    constraint: JsonSchemaConstraint,
    max_tokens: int,
    sampling: Sampling,
    bar: Callable[[int], float],
    last_logits: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
    bias: LogitBias | None = None,
) -> Iterator[list[int]]:
    """Yield the ids each step commits (stop ids left out) until a stop id or `max_tokens`.

    `tokens` is the prompt, its full blocks already committed in `forward` (the engine session's prefill).
    `bias` (a copy bias, :mod:`dlm.decoding.logit_bias`) is added to each pass's logits before the schema
    filters them, as the free decoder adds it.
    """
    check_supported(cfg)
    mask_id, shift = cfg.mask_token_id, cfg.token_shift
    generated = 0
    while True:
        start, known = forward.length, len(tokens)
        window = tokens[start:] + [mask_id] * (window_end(known, cfg.block_size, cfg.max_position_embeddings) - known)
        first = known - start
        while first < len(window):
            if shift and first == 0:  # predicted by the last committed position: no pass needed
                if last_logits is None:
                    raise ValueError("a token-shift model needs the last committed logits to start a block")
                logits = last_logits[None]
            else:
                rows = torch.arange(first, len(window), device=forward.device)
                ids = torch.tensor(window, dtype=torch.long, device=forward.device)
                logits = forward.denoise(ids, rows - 1 if shift else rows)
            if bias:
                line, offset = bias_line(tokens, start, window[:first] + [None] * (len(window) - first), bias.reach)
                logits = bias.apply(logits, line, range(offset + first, offset + len(window)))
            committed: list[int] = []
            for row in range(logits.shape[0]):
                token, confidence = _pick(logits[row], constraint, sampling, generator, max_tokens - generated)
                if committed and confidence < bar(len(committed) + 1):
                    break
                constraint.advance(token)
                window[first] = token
                first += 1
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
        tokens.extend(window[known - start:])
        last_logits = forward.commit(torch.tensor(window, dtype=torch.long, device=forward.device))


def _pick(logits: torch.Tensor, constraint: JsonSchemaConstraint, sampling: Sampling,
          generator: torch.Generator | None, budget: int) -> tuple[int, float]:
    """The next token among those the schema allows and that can still close the JSON within `budget`
    tokens, with its probability among them."""
    allowed = constraint.allowed_token_ids(budget)
    if not allowed:
        raise RuntimeError(f"the schema allows no token after {constraint.text!r}")
    index = torch.tensor(allowed, device=logits.device)
    token, confidence = pick_tokens(logits[index][None], sampling, generator)
    return allowed[int(token[0])], float(confidence[0])
