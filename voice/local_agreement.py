"""LocalAgreement-n: decide which words of a streaming transcript are stable enough to act on.

Whisper re-transcribes the growing buffer every interval and each hypothesis may revise its last words.
A word is *confirmed* once ``n`` consecutive hypotheses agree on it (and on everything before it);
confirmed words are never taken back, so the LM can prefill them while the person is still talking.
Words are compared after normalisation (case and surrounding punctuation), because Whisper often
changes "france" into "France?" as more audio arrives; a confirmed word keeps the spelling it had
when it was confirmed.
"""

from __future__ import annotations

import collections
from collections.abc import Sequence
from dataclasses import dataclass

_EDGE_PUNCTUATION = ".,!?;:\"'()[]{}<>«»“”‘’…-—–"


def normalize_word(word: str) -> str:
    """Lower-case and strip punctuation at the edges ("France?" -> "france", "3.5" stays)."""
    return word.strip(_EDGE_PUNCTUATION).lower()


@dataclass(frozen=True)
class Agreement:
    confirmed: tuple[str, ...]
    """All words confirmed so far in this utterance."""
    tentative: tuple[str, ...]
    """The rest of the latest hypothesis."""
    newly_confirmed: tuple[str, ...]
    """The words this update confirmed (a suffix of ``confirmed``)."""


def _common_prefix_len(hypotheses: Sequence[Sequence[str]]) -> int:
    length = min(len(h) for h in hypotheses)
    for i in range(length):
        if len({normalize_word(h[i]) for h in hypotheses}) > 1:
            return i
    return length


class LocalAgreement:
    """Confirms the longest prefix on which the last ``n`` hypotheses agree."""

    def __init__(self, n: int = 2) -> None:
        if n < 2:
            raise ValueError(f"LocalAgreement needs n >= 2 hypotheses to agree, got {n}")
        self.n = n
        self._confirmed: list[str] = []
        self._recent: collections.deque[list[str]] = collections.deque(maxlen=n)

    @property
    def confirmed(self) -> tuple[str, ...]:
        return tuple(self._confirmed)

    def update(self, words: Sequence[str]) -> Agreement:
        """Add the next hypothesis (all words of the whole utterance so far)."""
        # Confirmed words are fixed; only what a hypothesis says beyond them is compared. Hypotheses
        # are aligned by position, which holds because each one transcribes the same growing audio.
        tail = [w for w in words if normalize_word(w)][len(self._confirmed) :]
        self._recent.append(tail)
        newly: list[str] = []
        if len(self._recent) == self.n:
            agreed = _common_prefix_len(self._recent)
            newly = self._recent[-1][:agreed]
            self._confirmed.extend(newly)
            self._recent = collections.deque((h[agreed:] for h in self._recent), maxlen=self.n)
        return Agreement(tuple(self._confirmed), tuple(tail[len(newly) :]), tuple(newly))

    def reset(self) -> None:
        """Start a new utterance."""
        self._confirmed.clear()
        self._recent.clear()
