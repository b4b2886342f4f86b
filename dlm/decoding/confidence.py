"""Pick a token and its confidence for each position of a block, and choose which positions to unmask.

Greedy is the default (argmax; confidence = softmax probability of the argmax). Temperature / top-k / top-p
sampling works on float32 logits (never float64 over the vocabulary) and reports the probability of the
sampled token under the filtered distribution, which is what every reference sampler thresholds on.

The ``*_fused`` variants are the same selection on the Triton kernel path (:mod:`kernels.confidence`): one
streaming pass over the logits, the probabilities never materialised.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

import kernels

GREEDY_BELOW = 1e-4
"""Temperatures under this decode greedily: tempering then changes the pick only between logits closer than the
temperature, and float32 logits divided by one near 1e-38 overflow to infinity (a 500 from the API)."""


@dataclass(frozen=True)
class Sampling:
    temperature: float = 0.0  # 0 = greedy (as is anything below GREEDY_BELOW)
    top_p: float = 1.0
    top_k: int = 0  # 0 = off

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if self.temperature < GREEDY_BELOW:
            object.__setattr__(self, "temperature", 0.0)
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0, got {self.top_k}")


GREEDY = Sampling()


def _keep_top_k(logits: torch.Tensor, k: int) -> torch.Tensor:
    kth = torch.topk(logits, min(k, logits.shape[-1]), dim=-1).values[..., -1:]
    return logits.masked_fill(logits < kth, float("-inf"))


def _keep_top_p(logits: torch.Tensor, p: float) -> torch.Tensor:
    """Keep the smallest set of most likely tokens whose probability mass exceeds ``p``."""
    sorted_logits, order = torch.sort(logits, descending=True, dim=-1)
    cumulative = torch.softmax(sorted_logits, dim=-1).cumsum(dim=-1)
    drop_sorted = torch.zeros_like(cumulative, dtype=torch.bool)
    drop_sorted[..., 1:] = cumulative[..., :-1] > p  # the token that crosses p stays
    drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
    return logits.masked_fill(drop, float("-inf"))


def _filtered(logits: torch.Tensor, sampling: Sampling) -> torch.Tensor:
    """float32 logits after temperature, top-k and top-p; greedy ignores the filters, as the references do."""
    x = logits.float()
    if sampling.temperature == 0:
        return x
    x = x / sampling.temperature
    if sampling.top_k > 0:
        x = _keep_top_k(x, sampling.top_k)
    return _keep_top_p(x, sampling.top_p) if sampling.top_p < 1 else x


def pick_tokens(
    logits: torch.Tensor, sampling: Sampling = GREEDY, generator: torch.Generator | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """logits [N, V] -> (token ids [N], confidence [N] in float32)."""
    probs = torch.softmax(_filtered(logits, sampling), dim=-1)
    if sampling.temperature == 0:
        conf, tokens = probs.max(dim=-1)
        return tokens, conf
    tokens = torch.multinomial(probs, 1, generator=generator)
    return tokens[:, 0], probs.gather(-1, tokens)[:, 0]


def token_entropy(logits: torch.Tensor, sampling: Sampling = GREEDY) -> torch.Tensor:
    """Entropy [N] of each position's (filtered) distribution; filtered-out tokens contribute nothing."""
    log_probs = torch.log_softmax(_filtered(logits, sampling), dim=-1)
    terms = torch.where(torch.isfinite(log_probs), log_probs.exp() * log_probs, torch.zeros_like(log_probs))
    return -terms.sum(dim=-1)


def masked_confidence(conf: torch.Tensor, candidates: torch.Tensor) -> torch.Tensor:
    """Confidence where a position may be unmasked, -inf elsewhere."""
    return torch.where(candidates, conf, torch.full_like(conf, float("-inf")))


def above_threshold(conf: torch.Tensor, candidates: torch.Tensor, threshold: float) -> torch.Tensor:
    """Every candidate with confidence strictly above ``threshold``, and always the most confident one."""
    scores = masked_confidence(conf, candidates)
    chosen = scores > threshold
    chosen[scores.argmax()] = True
    return chosen & candidates


def check_pass_rule(threshold: float | None, factor: float | None) -> None:
    """A pass is sized by a threshold or by the factor rule, never both; a threshold is a probability and a
    factor must be positive. One rule for the decoders, the efforts and the command lines' arguments."""
    if threshold is not None and factor is not None:
        raise ValueError("give either a confidence threshold or a factor, not both")
    if threshold is not None and not 0 <= threshold <= 1:
        raise ValueError(f"threshold must be in [0, 1], got {threshold}")
    if factor is not None and factor <= 0:
        raise ValueError(f"factor must be positive, got {factor}")


def factor_bar(rank: torch.Tensor | int, factor: float) -> torch.Tensor | float:
    """The confidence the ``rank``-th most confident position (1-based) must exceed under the factor rule."""
    return 1 - factor / (rank + 1)


def by_factor(conf: torch.Tensor, candidates: torch.Tensor, factor: float) -> torch.Tensor:
    """Fast-dLLM's factor rule: the ``n`` most confident candidates for the largest ``n`` whose every ``k``-th
    (k <= n) is above ``1 - factor / (k + 1)``, and always the most confident one.

    Where a threshold takes every position above one bar, this one raises the bar with each extra token in
    the pass: two tokens need 0.5 and 0.67 at factor 1, seven need 0.875 for the seventh. Committing n tokens
    together is safe while (n + 1) times the doubt of the n-th stays small (the paper's bound), so a pass
    takes many tokens where the model is sure of many and few where it is sure of few. On the demo
    checkpoint it decodes more tokens per pass than a threshold at the same accuracy (README)."""
    scores = masked_confidence(conf, candidates)
    ordered, order = torch.sort(scores, descending=True, stable=True)  # ties: the lowest position first
    ranks = torch.arange(1, len(ordered) + 1, device=conf.device)
    count = torch.cumprod(ordered > factor_bar(ranks, factor), 0).sum().clamp(min=1)
    rank_of = torch.empty_like(ranks).scatter_(0, order, ranks)  # each position's rank, 1 = most confident
    return (rank_of <= count) & candidates  # no host sync: the count stays on the device


def most_confident(conf: torch.Tensor, candidates: torch.Tensor, count: int) -> torch.Tensor:
    """The ``count`` most confident candidates (fewer if there are fewer candidates)."""
    scores = masked_confidence(conf, candidates)
    chosen = torch.zeros_like(candidates)
    chosen[torch.topk(scores, min(count, scores.numel())).indices] = True
    return chosen & candidates


def leftmost_run(conf: torch.Tensor, candidates: torch.Tensor, threshold: float | None, factor: float | None,
                 count: int | None) -> torch.Tensor:
    """A rule of :func:`by_rule` applied left to right: the longest run of the leftmost candidates whose
    ``k``-th clears the rule's bar for rank ``k`` (``threshold``, the factor bar, or ``k <= count``), and
    always the leftmost candidate.

    Each committed token then has every token before it in the block already decided, as a left-to-right
    decoder has, which is what copying a heard value needs: a word's second piece follows from its first.
    The most confident positions are often late ones (closing punctuation, the end of the turn) that say
    little about the uncertain ones between. On the demo checkpoint it is more exact at more tokens per pass
    than the most confident ones (README, "How many tokens a pass commits"). No host sync."""
    rank = torch.cumsum(candidates, 0)  # 1-based rank of each candidate in position order
    if threshold is not None:
        clears = conf > threshold
    elif factor is not None:
        clears = conf > factor_bar(rank, factor)
    elif count is not None:
        clears = rank <= count
    else:
        raise ValueError("a pass needs a threshold, a factor or a count of positions to commit")
    run = torch.cumprod(clears | ~candidates, 0).bool()  # up to the first candidate that does not clear
    return candidates & (run | (rank == 1))


def without_parallel_repeats(picked: torch.Tensor, run: torch.Tensor) -> torch.Tensor:
    """A leftmost run (:func:`leftmost_run`) cut before the first token that repeats the one just before it in the
    same run.

    Positions decoded in one pass are predicted independently of each other, so two neighbours that both expect
    a word the context makes likely both write it: "2 plusplus 2 equals four" on the demo checkpoint, the copy
    bias toward the caller's "plus" on both. Cut there, the second position is decoded again in the next pass
    with the first one's word in view; a word that really repeats ("11", "no no") still comes, one pass later.
    For the rules that size a pass by confidence only: a fixed schedule's count is the reference's. No host
    sync."""
    repeat = torch.zeros_like(run)
    repeat[1:] = (picked[1:] == picked[:-1]) & run[:-1]
    return run & torch.cumprod(~repeat, 0).bool()


def by_rule(conf: torch.Tensor, candidates: torch.Tensor, threshold: float | None, factor: float | None,
            count: int | None, in_order: bool = False) -> torch.Tensor:
    """The candidates one pass commits: every one above ``threshold``, else the factor rule's, else the
    ``count`` most confident (a fixed schedule); with ``in_order`` the same rule as a run of the leftmost
    candidates (:func:`leftmost_run`). One dispatch for the block-causal and bidirectional decoders."""
    if in_order:
        return leftmost_run(conf, candidates, threshold, factor, count)
    if threshold is not None:
        return above_threshold(conf, candidates, threshold)
    if factor is not None:
        return by_factor(conf, candidates, factor)
    if count is None:
        raise ValueError("a pass needs a threshold, a factor or a count of positions to commit")
    return most_confident(conf, candidates, count)


def fusable(sampling: Sampling) -> bool:
    """Whether the fused kernel expresses ``sampling``: it has no top-k / top-p filter."""
    return sampling.top_k == 0 and sampling.top_p == 1


def _kernel_seed(sampling: Sampling, generator: torch.Generator | None) -> torch.Tensor | None:
    """This pass's Gumbel seed, drawn from ``generator`` on its own device (no host sync).

    None (greedy, or no generator) lets the kernel need none or draw one from torch's default generator.
    """
    if sampling.temperature == 0 or generator is None:
        return None
    return torch.randint(0, 2**31 - 1, (1,), generator=generator, device=generator.device)


def _check_fusable(sampling: Sampling) -> None:
    if not fusable(sampling):
        raise ValueError("the fused confidence kernel has no top-k / top-p filter; use pick_tokens")


def pick_tokens_fused(
    logits: torch.Tensor, sampling: Sampling = GREEDY, generator: torch.Generator | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`pick_tokens` on the kernel path: the same argmax and confidence (up to float rounding).

    A sample follows the same distribution with the same confidence (its tempered probability) but comes
    from another random stream: Gumbel-max noise seeded from ``generator``, not ``torch.multinomial``.
    """
    _check_fusable(sampling)
    seed = _kernel_seed(sampling, generator)
    conf, tokens = kernels.confidence_and_token(logits, sampling.temperature, seed, tempered=True, path="triton")
    return tokens, conf


def above_threshold_fused(
    logits: torch.Tensor, sampling: Sampling, threshold: float, generator: torch.Generator | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`pick_tokens_fused` then :func:`above_threshold` over every row, in the kernel's two launches.

    Returns (tokens [N], chosen [N] bool); tokens of rows not chosen are -1. The kernel's strict test and its
    at-least-one fallback (ties to the lowest row) are exactly :func:`above_threshold`'s rule.
    """
    _check_fusable(sampling)
    n = logits.shape[0]
    undecided = torch.ones(n, dtype=torch.bool, device=logits.device)
    tokens = torch.full((n,), -1, dtype=torch.int64, device=logits.device)
    seed = _kernel_seed(sampling, generator)
    kernels.select_confident(
        logits, undecided, tokens, threshold, sampling.temperature, seed, strict=True, tempered=True, path="triton"
    )
    return tokens, ~undecided
