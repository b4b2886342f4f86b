"""Cut streamed LM text into speakable clauses, each released the moment it is complete.

Time to first audio is set by the first clause, so it may be short (a comma after a couple of words
will do); later clauses wait for longer stretches because Piper's prosody is better on whole phrases and
the first one is already playing. A boundary only counts once the character after it is seen: "3." may
become "3.5", "Dr." is followed by a name, "1,000" has no space after its comma.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

ABBREVIATIONS = frozenset(
    {"mr", "mrs", "ms", "dr", "prof", "sr", "jr", "st", "mt", "vs", "etc", "approx", "fig", "inc", "ltd"}
)
"""Words whose trailing period is not a sentence end (compared lower-case, without the period)."""

_SENTENCE_END = ".!?…"
_CLAUSE_END = ",;:"
_CLOSERS = "\"')]}”’»"
# Markdown that would be read out: a pair of emphasis marks around words ("*so*", "_so_"), doubled marks and
# code ticks anywhere ("**", "`"), a heading's hashes, a bullet. A lone "*" or "_" ("12 * 4", "*args",
# "snake_case") and "C#" are text, not markup.
_EMPHASIS = re.compile(r"(?<!\w)([*_])(?=\S)(.+?)(?<=\S)\1(?!\w)")
_MARKS = re.compile(r"[*_]{2,}|`+")
_LINE_MARK = re.compile(r"^\s*(?:[-•]|#{1,6})\s+")
_TIMES = re.compile(r"(?<=\d)\s*[*×]\s*(?=\d)")  # "12 * 4" is said "12 times 4"
# what espeak reads wrongly: "seven am" as the word "am" (the clock tool's wording; "a.m." is read A M), and the
# speller's "/" between two words' letters as "slash"
_HOUR = (r"\d{1,2}(?::\d\d)?|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|thirteen|fourteen|"
         r"fifteen|sixteen|seventeen|eighteen|nineteen|(?:twenty|thirty|forty|fifty)(?:-\w+)?")
_MERIDIEM = re.compile(rf"\b({_HOUR}) ([ap])m\b\.?", re.IGNORECASE)
_LETTER_GROUPS = re.compile(r"(?<=\b\w) / (?=\w\b)")
_LIST_NUMBER = re.compile(r"(?:^|\n)\s*\d+\.$")  # "1." opening a numbered item: not a sentence's end


@dataclass(frozen=True)
class ChunkerConfig:
    first_min_words: int = 2
    """The first clause may be released at a comma, semicolon or colon after this many words."""
    clause_min_words: int = 6
    """Later clauses need this many words to be cut at a comma; sentences are always released."""
    max_words: int = 30
    """A run without any boundary is cut at a word boundary here, so speech never waits indefinitely."""

    def __post_init__(self) -> None:
        if min(self.first_min_words, self.clause_min_words, self.max_words) < 1:
            raise ValueError("chunker word counts must be >= 1")


class ClauseChunker:
    """``push`` text pieces as the LM commits them; get back the clauses that became complete."""

    def __init__(self, config: ChunkerConfig | None = None) -> None:
        self.config = config or ChunkerConfig()
        self._buffer = ""
        self._released = 0

    def push(self, piece: str) -> list[str]:
        self._buffer += piece
        out: list[str] = []
        while (cut := self._find_cut()) is not None:
            out += self._release(self._buffer[:cut])
            self._buffer = self._buffer[cut:]
        return out

    def flush(self) -> list[str]:
        """The end of the reply: whatever is left is the last clause."""
        rest, self._buffer = self._buffer, ""
        return self._release(rest)

    def _release(self, text: str) -> list[str]:
        clause = _speakable(text)
        if not any(ch.isalnum() for ch in clause):
            return []
        self._released += 1
        return [clause]

    def _find_cut(self) -> int | None:
        """Index just after the first complete clause in the buffer, or None."""
        text = self._buffer
        min_words = self.config.first_min_words if self._released == 0 else self.config.clause_min_words
        for i, ch in enumerate(text):
            if ch == "\n" and text[:i].strip():
                return i + 1
            if ch not in _SENTENCE_END and ch not in _CLAUSE_END:
                continue
            end = i + 1
            while end < len(text) and (text[end] in _CLOSERS or text[end] in _SENTENCE_END):
                end += 1
            if end >= len(text) or not text[end].isspace():
                continue  # not known to be a boundary yet ("3." -> "3.5"), or not one ("1,000", "e.g.")
            if ch in _SENTENCE_END and not (ch == "." and self._not_a_sentence_end(text[: i + 1])):
                return end
            if ch in _CLAUSE_END and len(text[:i].split()) >= min_words:
                return end
        words = list(re.finditer(r"\S+\s", text))
        if len(words) >= self.config.max_words:
            return words[self.config.max_words - 1].end()
        return None

    @staticmethod
    def _not_a_sentence_end(upto_period: str) -> bool:
        """Whether the period ending ``upto_period`` belongs to an abbreviation, an initial or a list number."""
        if _LIST_NUMBER.search(upto_period):
            return True
        word = upto_period.split()[-1] if upto_period.split() else ""
        word = word.lstrip("\"'([{“‘«")
        bare = word[:-1]
        if bare.lower() in ABBREVIATIONS:
            return True
        if re.fullmatch(r"(?:[A-Za-z]\.)+[A-Za-z]", bare):  # e.g. / i.e. / U.S. / a.m.
            return True
        return len(bare) == 1 and bare.isupper()  # an initial: "J. Smith"


def _speakable(text: str) -> str:
    """``text`` as Piper should read it: markup dropped, "12 * 4" as "12 times 4", "seven am" as "seven a.m.",
    a spelled name's words apart, single spaces."""
    text = _EMPHASIS.sub(r"\2", _MARKS.sub("", _LINE_MARK.sub("", text)))
    text = _MERIDIEM.sub(lambda m: f"{m[1]} {m[2].lower()}.m.", _LETTER_GROUPS.sub(". ", text))
    return " ".join(_TIMES.sub(" times ", text).split())
