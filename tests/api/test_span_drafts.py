"""Drafted spans: the free decoder's span is kept only when it closes on JSON its schema accepts, and the
cache rewinds to a block boundary it can resume from (one block further for token-shift models)."""

from __future__ import annotations

import pytest
import torch

from dlm.api.span_generation import _closed_span, _rewind
from dlm.checkpoint import load_checkpoint
from dlm.constrained import CompiledSchema
from dlm.decoding.block_causal import CachedForward
from dlm.kv_cache import KVCache

VOCAB = ['{"n": ', "1", "x", "}", "<close>", " "]
CLOSE = 4
SCHEMA = CompiledSchema({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]})


@pytest.mark.parametrize(("draft", "kept"), [
    ([0, 1, 3, CLOSE, 5], [0, 1, 3, CLOSE]),  # valid and closed: kept up to the closing token
    ([0, 1, 3], None),  # never closed
    ([0, 1, CLOSE], None),  # not JSON
    ([0, 2, 3, CLOSE], None),  # not JSON either ("x" is no value)
    ([0, 5, 1, 3, CLOSE], [0, 5, 1, 3, CLOSE]),
])
def test_a_draft_is_kept_only_when_closed_on_json_the_schema_accepts(draft: list[int], kept: list[int] | None
                                                                     ) -> None:
    assert _closed_span(draft, CLOSE, SCHEMA, VOCAB) == kept


def test_a_draft_breaking_the_schema_is_not_kept() -> None:
    vocab = ['{"n": ', '"one"', "}", "<close>"]
    assert _closed_span([0, 1, 2, 3], 3, SCHEMA, vocab) is None


@pytest.fixture(scope="module")
def model(fixtures_dir):
    return load_checkpoint(fixtures_dir / "sdar" / "checkpoint")[0]


def _cache_of(model, length: int) -> CachedForward:
    state = CachedForward(model, KVCache(model.cfg, 64))
    state.extend(torch.randint(0, 97, (length,), generator=torch.Generator().manual_seed(0)).tolist(), 4)
    return state


@pytest.mark.parametrize(("keep", "token_shift", "length"), [
    (10, False, 8),  # back to the boundary before the kept tokens end
    (8, False, 8),  # a boundary: nothing more to drop
    (8, True, 4),  # a boundary, but a token-shift model needs the commit pass of the block before it
    (10, True, 8),  # mid-block: the block's known tokens start the next window, no logits needed
    (20, False, 16),  # nothing past `keep` in the cache: left as it is
])
def test_rewind_keeps_a_resumable_prefix(model, keep: int, token_shift: bool, length: int) -> None:
    state = _cache_of(model, 16)
    held = list(state.tokens)
    _rewind(state, keep, token_shift)
    assert state.length == length and state.tokens == held[:length]
