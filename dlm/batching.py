"""Several sessions' denoising passes in one forward.

Passes are compatible when they are the same kind (denoise or commit) over windows of the same length
(and the same length of finished window riding along). Their sessions' caches differ in length, so the
batch attends to each cache's prefix left-aligned and padded to the longest, with the padding masked out;
positions continue after each session's own prefix. A single pass runs unbatched, bit-identical to
:func:`dlm.decoding.block_causal.run_pass`. A batch that fails (a CUDA out-of-memory in a large one, a full
cache) runs again pass by pass, so only the passes that fail alone fail.
"""

from __future__ import annotations

from collections import defaultdict

import torch
import torch.nn.functional as F

from dlm.decoding.block_causal import CachedForward, Pass, run_pass
from dlm.kv_cache import KVCache
from dlm.model import Transformer


class StackedCaches:
    """A cache view for the model: per layer, every session's prefix (padded) followed by the new keys."""

    def __init__(self, caches: list[KVCache], store: bool) -> None:
        self.caches, self.store = caches, store
        self.lengths = [c.length for c in caches]
        self.width = max(self.lengths)

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        b, h, n, d = k.shape
        keys = k.new_zeros(b, h, self.width + n, d)
        values = v.new_zeros(b, h, self.width + n, d)
        for i, (cache, length) in enumerate(zip(self.caches, self.lengths, strict=True)):
            keys[i, :, :length] = cache.k[layer, 0, :, :length]
            values[i, :, :length] = cache.v[layer, 0, :, :length]
            if self.store:
                cache.check_room(n)
                cache.k[layer, 0, :, length:length + n] = k[i]
                cache.v[layer, 0, :, length:length + n] = v[i]
        keys[:, :, self.width:] = k
        values[:, :, self.width:] = v
        return keys, values

    def mask(self, inner: torch.Tensor) -> torch.Tensor:
        """bool [B, n, width + n]: each session's own prefix, then ``inner`` [n, n] over the new positions."""
        n, device = inner.shape[0], inner.device
        prefix = torch.arange(self.width, device=device)[None, :] < torch.tensor(self.lengths, device=device)[:, None]
        return torch.cat((prefix[:, None, :].expand(-1, n, -1), inner.expand(len(self.caches), -1, -1)), dim=2)

    def positions(self, n: int, device: torch.device) -> torch.Tensor:
        return torch.tensor(self.lengths, device=device)[:, None] + torch.arange(n, device=device)


def _key(p: Pass) -> tuple[bool, int, int] | None:
    if not isinstance(p.forward, CachedForward):
        return None
    return p.rows is None, p.window.shape[0], 0 if p.pending is None else p.pending.shape[0]


def run_passes(model: Transformer, passes: list[Pass]) -> tuple[list[torch.Tensor | Exception], int]:
    """The result of every pass, as :func:`run_pass` would give it, batching the compatible ones, or the
    exception it raised alone; also how many of them ran inside a batch of two or more."""
    results: list[torch.Tensor | Exception | None] = [None] * len(passes)
    groups: dict[tuple[bool, int, int], list[int]] = defaultdict(list)
    for i, p in enumerate(passes):
        key = _key(p)
        if key is None:
            results[i] = _run_alone(p)
        else:
            groups[key].append(i)
    batched = 0
    for members in groups.values():
        outs = _run_batch(model, [passes[i] for i in members]) if len(members) > 1 else None
        if outs is None:
            outs = [_run_alone(passes[i]) for i in members]
        else:
            batched += len(members)
        for i, out in zip(members, outs, strict=True):
            results[i] = out
    return results, batched  # type: ignore[return-value]


def _run_alone(p: Pass) -> torch.Tensor | Exception:
    """The pass's result, or its exception: one session's failure is its own."""
    try:
        return run_pass(p)
    except Exception as exc:
        return exc


def _run_batch(model: Transformer, group: list[Pass]) -> list[torch.Tensor] | None:
    """The group's results as one batched forward, or None if it failed (having committed nothing), so that its
    passes run again one by one and only those that fail alone fail."""
    try:
        return _run_group(model, group)
    except Exception:
        return None


def _run_group(model: Transformer, group: list[Pass]) -> list[torch.Tensor]:
    group = [p.on_device() for p in group]
    forwards: list[CachedForward] = [p.forward for p in group]  # type: ignore[misc]
    first = group[0]
    device = first.forward.device
    done = 0 if first.pending is None else first.pending.shape[0]
    ids = torch.stack([p.window if p.pending is None else torch.cat((p.pending, p.window)) for p in group])
    n = ids.shape[1]
    inner = torch.ones(n, n, dtype=torch.bool, device=device)
    inner[:done, done:] = False  # the finished window does not see the next one
    stacked = StackedCaches([f.cache for f in forwards], store=first.rows is None or done > 0)
    hidden = model.hidden_states(ids, stacked.positions(n, device), stacked.mask(inner), stacked)
    weight = model.output_weight()
    out = [F.linear(hidden[i, -1] if p.rows is None else hidden[i, done + p.rows], weight) for i, p in enumerate(group)]
    # Committed only once every output exists: a group that fails has changed no cache and can run again.
    for p, f, logits in zip(group, forwards, out, strict=True):
        if p.rows is None:  # commit: keep the whole window
            f.record_commit(p.window, logits)
        elif p.pending is not None:
            f.record_commit(p.pending, None)
    return out
