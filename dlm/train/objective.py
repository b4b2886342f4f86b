"""The block-diffusion training objective (BD3-LM / SDAR style) in one forward pass.

The batch holds, per dialogue, a noisy copy of every block that contains target tokens followed by the
clean sequence x0. Noisy tokens see their own block bidirectionally and the clean blocks before it; clean
tokens see clean blocks up to their own (block-causal), which is exactly the attention a block gets at
decoding time with the earlier blocks in the KV cache. Within each noisy block a rate t ~ U(eps, 1) is drawn
and each target token is masked with probability t; the loss is cross-entropy on the masked tokens.
Blocks are aligned at absolute position 0, as in the engine, so an answer usually starts mid-block after
clean prompt tokens; see `decoding_targets` for what counts as a target.

With `complementary` masking each noisy block comes twice: the second copy masks exactly the target tokens
the first left clean (rate 1 - t). Every target token then carries a loss on every step, for the price of
the noisy half of the sequence only, since both copies read the same clean prefix.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from dlm.model import Transformer
from dlm.train.encode import Encoded

_PAD_CLEAN_BLOCK = 1 << 30


@dataclass
class Batch:
    ids: torch.Tensor  # [B, N + L]: noisy blocks then the clean sequence
    positions: torch.Tensor  # [B, N + L]
    mask: torch.Tensor  # [B, N + L, N + L] bool, True = may attend
    loss_index: torch.Tensor  # [M, 2] (row, column) of masked target tokens
    labels: torch.Tensor  # [M]
    weights: torch.Tensor  # [M]
    tokens: int  # real (unpadded) tokens in the batch


def decoding_targets(item: Encoded, block_size: int, pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Ids padded to a whole block and the positions to learn, as decoding sees them.

    At decoding time everything after the first generated position of a block is masked, including what
    follows the answer's <|im_end|>. So in every block that holds a target, all later positions are targets
    too (the next turn's opening tokens, or end-of-text padding after the dialogue): were they left clean,
    the model would learn to end its answer where it sees the next turn begin, a cue it never has live.
    """
    length = len(item.ids)
    padded = -(-length // block_size) * block_size
    ids = torch.tensor(item.ids + [pad_id] * (padded - length))
    targets = torch.tensor(item.targets + [False] * (padded - length))
    pos = torch.arange(padded)
    block = pos // block_size
    first = torch.full((padded // block_size,), padded).scatter_reduce(0, block[targets], pos[targets], "amin")
    return ids, pos >= first[block]


def _noisy_copies(ids: torch.Tensor, keep: torch.Tensor, block_size: int,
                  copies: list[tuple[torch.Tensor, torch.Tensor]], mask_id: int) -> tuple[torch.Tensor, ...]:
    """The kept blocks once per (masked, rate) copy, concatenated: ids, positions, blocks, copy index,
    labels, masked flags and rates."""
    pos = torch.arange(len(ids))[keep]
    parts = [(torch.where(masked, mask_id, ids)[keep], pos, pos // block_size, torch.full_like(pos, index),
              ids[keep], masked[keep], rate[keep]) for index, (masked, rate) in enumerate(copies)]
    return tuple(torch.cat(column) for column in zip(*parts, strict=True))


def make_batch(items: list[Encoded], block_size: int, mask_id: int, pad_id: int, eps: float,
               inverse_t: bool, generator: torch.Generator, complementary: bool = False) -> Batch:
    noisy_rows, clean_rows = [], []
    for item in items:
        ids, targets = decoding_targets(item, block_size, pad_id)
        pos = torch.arange(len(ids))
        block = pos // block_size
        chosen = torch.unique(block[targets])
        keep = torch.isin(block, chosen)
        rate = torch.rand(len(chosen), generator=generator) * (1 - eps) + eps
        token_rate = torch.zeros(len(ids))
        token_rate[keep] = rate[torch.searchsorted(chosen, block[keep])]
        masked = targets & (torch.rand(len(ids), generator=generator) < token_rate)
        copies = [(masked, token_rate)]
        if complementary:
            copies.append((targets & ~masked, 1 - token_rate))
        noisy_rows.append(_noisy_copies(ids, keep, block_size, copies, mask_id))
        clean_rows.append((ids, pos, block))
    n_max = max(len(r[0]) for r in noisy_rows)
    l_max = max(len(r[0]) for r in clean_rows)
    size = n_max + l_max
    batch_ids = torch.full((len(items), size), pad_id)
    positions = torch.zeros((len(items), size), dtype=torch.long)
    blocks = torch.full((len(items), size), _PAD_CLEAN_BLOCK)
    blocks[:, :n_max] = -1
    copy = torch.full((len(items), size), -1)
    noisy = torch.zeros(size, dtype=torch.bool)
    noisy[:n_max] = True
    loss_index, labels, weights = [], [], []
    for row, ((n_ids, n_pos, n_blk, n_copy, n_lab, n_masked, n_rate), (c_ids, c_pos, c_blk)) in enumerate(
            zip(noisy_rows, clean_rows, strict=True)):
        n, length = len(n_ids), len(c_ids)
        batch_ids[row, :n], positions[row, :n], blocks[row, :n], copy[row, :n] = n_ids, n_pos, n_blk, n_copy
        span = slice(n_max, n_max + length)
        batch_ids[row, span], positions[row, span], blocks[row, span] = c_ids, c_pos, c_blk
        cols = torch.nonzero(n_masked).flatten()
        loss_index.append(torch.stack([torch.full_like(cols, row), cols], dim=1))
        labels.append(n_lab[cols])
        weights.append(1.0 / n_rate[cols] if inverse_t else torch.ones(len(cols)))
    bi, bj = blocks[:, :, None], blocks[:, None, :]
    same_copy = copy[:, :, None] == copy[:, None, :]
    qi, kj = noisy[None, :, None], noisy[None, None, :]
    mask = (qi & kj & (bi == bj) & same_copy) | (qi & ~kj & (bj < bi)) | (~qi & ~kj & (bj <= bi))
    mask |= torch.eye(size, dtype=torch.bool)
    return Batch(batch_ids, positions, mask, torch.cat(loss_index), torch.cat(labels), torch.cat(weights),
                 tokens=sum(len(c[0]) for c in clean_rows))


def masked_logits(model: Transformer, batch: Batch) -> torch.Tensor:
    """[M, vocab] logits at the masked target tokens only (the full [B, L, vocab] is never built)."""
    hidden = model.hidden_states(batch.ids, batch.positions, batch.mask)
    picked = hidden[batch.loss_index[:, 0], batch.loss_index[:, 1]]
    return F.linear(picked, model.output_weight()).float()


def diffusion_loss(model: Transformer, batch: Batch, normaliser: float) -> torch.Tensor:
    """Weighted masked-token cross-entropy, divided by `normaliser` (masked or target token count)."""
    losses = F.cross_entropy(masked_logits(model, batch), batch.labels, reduction="none")
    return (losses * batch.weights).sum() / max(normaliser, 1.0)
