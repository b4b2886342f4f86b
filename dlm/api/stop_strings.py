"""`stop` strings cut across streamed pieces: text is held back only while it could still begin a stop.

They cut free text only (:class:`FreeTextStops`): a tool call passes through unmatched, as OpenAI applies no
stop sequence to a call's arguments; `"stop": ["*"]` had cut `{"expression": "12 * 4"}` to
`{"expression": "12 `, a call that does not parse.
"""

from __future__ import annotations


class StopMatcher:
    def __init__(self, stops: tuple[str, ...]) -> None:
        self.stops = stops
        self.pending = ""
        self.stopped = False

    def feed(self, text: str) -> str:
        """The part of `text` now certain to precede any stop string; sets `stopped` when one appeared."""
        if self.stopped:
            return ""
        self.pending += text
        hits = [i for i in (self.pending.find(s) for s in self.stops) if i >= 0]
        if hits:
            self.stopped = True
            out, self.pending = self.pending[: min(hits)], ""
            return out
        keep = max((partial_prefix_length(self.pending, s) for s in self.stops), default=0)
        out = self.pending[: len(self.pending) - keep]
        self.pending = self.pending[len(out):]
        return out

    def flush(self) -> str:
        out, self.pending = self.pending, ""
        return out


class FreeTextStops:
    """Stop strings over a reply that may hold tool calls: the text from an opening tag through its closing tag
    (or to the end) passes through unmatched, and a tag ends any stop begun before it."""

    def __init__(self, stops: tuple[str, ...], call_tags: tuple[str, str] | tuple[()] = ()) -> None:
        self.text = StopMatcher(stops)
        self.call_tags = call_tags  # (opening, closing) where the reply holds calls
        self.pending = ""  # what may still begin the next tag
        self.in_call = False

    @property
    def stopped(self) -> bool:
        return self.text.stopped

    def feed(self, piece: str) -> str:
        """The part of the reply now certain to precede any stop string, calls included."""
        self.pending += piece
        out = ""
        while self.call_tags and not self.stopped:
            tag = self.call_tags[self.in_call]
            at = self.pending.find(tag)
            if at < 0:
                break
            before, self.pending = self.pending[:at], self.pending[at + len(tag):]
            out += self._through(before)
            if not self.stopped:
                out += self.text.flush() + tag
                self.in_call = not self.in_call
        if self.stopped:
            return out
        tag = self.call_tags[self.in_call] if self.call_tags else ""
        cut = len(self.pending) - partial_prefix_length(self.pending, tag)
        certain, self.pending = self.pending[:cut], self.pending[cut:]
        return out + self._through(certain)

    def flush(self) -> str:
        """What is held back, at the reply's end: a tag's beginning it had held is text after all."""
        rest, self.pending = self.pending, ""
        return self._through(rest) + self.text.flush()

    def _through(self, text: str) -> str:
        return text if self.in_call else self.text.feed(text)


def partial_prefix_length(text: str, tag: str) -> int:
    """Length of the longest end of `text` that is a proper start of `tag` (to hold back until it is known)."""
    for n in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:n]):
            return n
    return 0
