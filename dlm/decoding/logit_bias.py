"""Copy biases: additive logit biases that steer a reply toward the phrases it is expected to repeat.

A small model copies a rare name from its context imperfectly: it writes "cohelhares" for the "copenhagen" a
tool just returned, or "scheelye" for the "schedule" the caller asked it to say back. Copy biasing is the text
counterpart of a speech recogniser's contextual biasing (hotwords): the phrases the context offers (a tool
result's values, the caller's words) are tokenized, and a position whose left neighbours are already committed
as the start of such a phrase gets the phrase's next token favoured by ``follow``. The longest committed run
(up to the longest phrase's length) that some phrase contains picks the continuation, so a token that occurs in a
phrase more than once ("," in "f, a, m, i, l, y") favours the token after *this* occurrence. Within one pass
the rows are biased left to right, each seeing its masked left neighbours as their likeliest tokens, so a run
of positions committed together copies as one, and no position writes its left neighbour's piece again where
the phrase goes on with another ("zealandand"). Words get more than phrases: a word begun is followed more
strongly until it is done ("aust" for australia), its first piece is favoured where its second comes next
("ningephone" for telephone), no letter goes on once it is done ("comingrt"), and the caller's words are
phrases only between the words that ask for a tool ("schedule spell" was a word to spell). A space or a closing
quote is never written twice in a row ('"yellow"}"}}'). A number is written as one the caller said: begun as one,
it is finished as it ("113 - 8" for "113 minus eighty-five"), and one about to begin as none of theirs begins as
one of theirs ("32 + 1" for "32 plus zero"). Where a call's string opens and the model is unsure of every token, a
name the caller said starts more strongly: a bias is a prior, and counts for most where the model has least to
say ("exex" for kitchen).
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any

from dlm.tools.grounding import FUNCTION_WORDS, heard_numbers, name_words, said_numbers

if TYPE_CHECKING:  # annotations only: voice.config reads COPY_FOLLOW without loading torch
    import torch

CONTEXT = 3  # committed tokens copied in a row that make a copy of a word follow more strongly
MAX_REACH = 64
"""The most committed tokens to the left that pick a phrase's continuation (:attr:`LogitBias.reach`)."""
# The copy bias a reply gets (a logit, so e^4 = 55 times the odds): on the demo checkpoint, held-out answers
# 80.3% -> 82.8% with calls grounded, "say back" 40% -> 70%, at the same 3.8 tokens per pass (following
# committed neighbours only, factor 0.4); 8 gained one dialogue more after tool results and lost two after the
# caller's words (python -m dlm.eval --limit 200, README).
COPY_FOLLOW = 4.0
# After a tool's result the follow bias is this many times as strong: a reply says the result word for word, where
# it repeats the caller's words only when asked to. On run S ("sonius" for sofia, "p, e, s, t" for pastime) held-out
# answers with calls grounded 91.3% -> 92.2% over the four samples, up or level on each (89.4 -> 91.4, 92.9 -> 93.2,
# 93.2, 89.8 -> 90.8); x3 92.0% (python -m dlm.eval --samples --efforts medium, docs/demo-model.md).
RESULT_FOLLOW_FACTOR = 2.0
# After a tool's result, a reply nearly always says it: the first token of each of the result's phrases gets this
# wherever no phrase is being followed, so the copy can start right ("sor, a, m, i, l, y" -> "f, a, m, ...").
# Held-out answers with calls grounded 84.3% -> 85.9%, 87.8% -> 89.2%, 82.7% -> 84.1% on the three samples
# (README) at +2. Only where a word may begin (after a space or a line break): 90.9% -> 91.4%, 91.7% -> 91.9%,
# 86.1% unchanged, with today's grounding; and then +3 rather than +2: 92.4% and 87.1% on the 200 and the 300
# (+4 the same). After the caller's words it starts a string in a tool call (below), and a spoken word only with
# a name the tokenizer spells in several pieces, which the model miscopies ("okay: sta lafaede" for "say this
# lafacur"), and not as the reply's first word, where it would oust the "okay:" the model begins with ("say back
# zefiramo" gave "zesciamo"): a reply repeats the caller's words only when asked to. Held-out answers free / grounded
# 85.7% / 92.3% -> 85.9% / 92.4%, "repeat" 63.2% -> 66.0%, the rest the same; on every word they said, "repeat"
# 67.1% but "goodbye" 66.7% -> 20.8% (85.5% / 92.0%; python -m dlm.eval --samples --efforts medium).
COPY_START = 3.0
WORD_BREAKS = (" ", "\n")  # where a copied phrase may start in a reply
# After the caller's words, a string in a tool call (right after its opening quote) starts with the first piece
# of a word they said that could begin a name (`dlm.tools.grounding.name_words`: no function words, no numbers,
# which a call writes as digits): "crivakia" -> "slovakia", "remepha" -> "remember". Free held-out calls 85.2%
# -> 89.7%, 85.5% -> 89.5%, 79.7% -> 85.9% on the three samples (README); +4: 89.0% on the 200; from every word
# said, numbers included: 87.7% ("ninety- + 160"). No word that asks for a tool ("capital city of kulevir"
# had begun "cityevir"): 91.9% -> 92.5% on the 600, 91.7% -> 92.1% on the seed-37 300, the others the same.
STRING_OPENINGS = ('"', ' "')
# A position that follows a phrase loses this many times the follow bias on its left neighbour's token, unless the
# phrase itself goes on with it. Two neighbours decided in the same pass are each predicted without the other, so
# both could take the piece that belongs to one of them ("zealandand", "schedulee", "5944" for "594"). Held-out
# answers free / with calls grounded 85.0% / 91.6% -> 85.3% / 91.9% (x1), 85.6% / 92.1% (x2), 85.7% / 92.2%
# (x3, and the same at x10), "repeat" 54.6% -> 63.2%, calls and tokens per pass the same (python -m dlm.eval
# --samples --efforts medium, docs/decoding.md). Where a copy has written a word's last two pieces the last is not
# written again either ("zavidustanstan", `LogitBias.ends`; letters only, since "5944" for "594" cost conversions):
# spelling calls 71.5% -> 78.4%, free calls / answers 93.0% / 88.6% -> 93.3% / 88.8%. Once a copied word is done no
# letter goes on it ("comingrt", "theaterry" to spell; `Pieces.letters`): free calls / answers 94.1% / 89.6% -> 94.3%
# / 89.8%. That settled the closing quote sooner, and two neighbours then closed a string together ('"yellow"}"}}'):
# a join (a space, a quote with punctuation: `Pieces.joins`) is not written twice in a row either ("can't brow  the
# web" too): 94.6% / 90.1%, spelling calls 80.6% -> 85.1%, 4.16 -> 4.22 tokens per pass, no intent lower. There a
# closing quote (`Pieces.closings`) gains the follow bias, where the string had been left open ("coming}", "zacasuora
# }"): 94.8% / 90.3%, spelling calls 87.3%, capital follow-ups 96.4% -> 100%; twice the follow bias wrote one into a
# spoken copy ('597 mogacer"} doutes'), 4.22 -> 3.97 tokens per pass on the 600. Not after a tool's result, whose
# reply is spoken: the same figures, 4.19 -> 4.22 tokens per pass.
TWIN_FACTOR = 3.0
# A copy two pieces into one of the words it copies follows this many times as strongly until the word is done. A
# call's string stopped mid-word where the model was unsure whether the name went on ("aust" for australia, "sche"
# for schedule), and a spoken copy garbled a word it had begun right: two pieces say which word it is, and a word
# begun is finished. Free calls / answers 90.7% / 85.9% -> 91.9% / 87.7%, with calls grounded answers 92.4% ->
# 93.3%, "repeat" 66.0% -> 78.2%, capitals 86.3% -> 90.8%, no intent lower; x4 the same (python -m dlm.eval
# --samples --efforts medium, docs/decoding.md). Not after the words that ask for a tool: "spelled" would have
# named the tool "spelled_word".
MID_WORD_FACTOR = 3.0
# A copy whose last CONTEXT tokens were copied in a row, a word's letters among them, follows MID_WORD_FACTOR
# times as strongly too, between words and at a word's second piece: a copy running through the caller's words goes
# on with them where one alone had broken off ("garden senegal 978 vicious mesmill", "australia coming frand").
# Held-out answers free / with calls grounded 90.6% / 93.6% -> 91.4% / 94.4%, "repeat" 82.3% -> 92.5%, 4.23 ->
# 4.26 tokens per pass, free calls 95.3% and every other intent the same; x2: 91.2% / 94.2%; x5 copied the system
# prompt into "who are you"'s reply (identity 100% -> 0%): 88.1% / 91.9% (python -m dlm.eval --samples --efforts
# medium, docs/decoding.md). Not where the run is digits and spaces alone: "71 plus 102" was copied as said into a
# calculator's expression (x2 with them: free calls 95.3% -> 93.5%).
# A number begun as one the caller said goes on with its next digit MID_WORD_FACTOR times as strongly too, where the
# digits so far are no number said and begin no earlier result's ("113 minus eighty-five" had called "113 - 8";
# "times it by 12" after 1024 became "1224 * 12" when the result's numbers counted). And where the model would begin
# a number with a digit that begins none of the numbers said or of the last result, theirs get the start bias
# (COPY_START): "32 + 1" for "32 plus zero", "45 - 10" for "45 less sixty-five"; "squared" and "half" say 2
# (`dlm.tools.grounding.said_numbers`). Together free calls / answers 95.3% / 91.4% -> 95.6% / 91.7%, arithmetic
# 97.1% -> 98.1%, conversions 97.8% -> 98.2%, no intent lower, grounded the same (python -m dlm.eval --samples
# --efforts medium, docs/decoding.md). At +8: "14 ** 1" for "14 times itself" (93.8%); also where the model's digit
# already begins a number said, so only made surer: "116 +32" for "116 and 3", its "3" committed before a space.
# Where a word may start and no phrase is being followed, a word whose second piece comes right after (committed, or
# that row's own likeliest token in this pass) gets its first piece favoured by this: the model often writes a word's
# later pieces right and its first one wrong, "ningephone" and "honeephone" for telephone. Free calls / answers
# 93.3% / 88.8% -> 94.1% / 89.6% at +4, 94.1% / 89.6% (one dialogue more) at +8, capitals 90.8% -> 94.8%, "repeat"
# 78.2% -> 81.6%, no intent lower (python -m dlm.eval --samples --efforts medium, docs/decoding.md). A number's first
# digit too (`LogitBias.numbering`: "87 / 2" for "eighteen split by 2", a value of 8 for eighteen yards): 95.0% / 90.4%
# -> 95.3% / 90.6%, arithmetic 96.9% -> 97.1%, conversions 96.9% -> 97.8%, timers 87.6% -> 88.6%, no intent lower;
# also before a second digit that is a number of its own, "15 / 15" for "15 split by 5" (95.2% / 90.5%).
COPY_HEAD = 8.0
# Where a call's string opens and the model is this unsure of the position (its likeliest token under this
# probability), the caller's name starts there with COPY_HEAD rather than COPY_START: the model has no word of its own
# to weigh against the copy, and the start bias was too weak to lift a name it barely knew ("exex" and "forset" for
# kitchen, "pretgaria" for bulgaria). Free calls / answers 95.6% / 91.7% -> 96.0% / 92.0%, 4.27 tokens per pass,
# nothing lost (python -m dlm.eval --samples --efforts medium, docs/decoding.md). At every start, spoken ones after
# the caller's words too: 96.0% / 92.2% ("okay: sta paltdge tunisia" for "say this knowledge tunisia" mended), but
# a real model's prose is often that unsure where a word begins, and +8 there would make it parrot the caller's
# rarer words; under 0.35 and under 0.1, +5 and +12: within a dialogue of it.
UNSURE = 0.2
LETTER_RUN = re.compile(r"[^\W\d_]+")  # a word's letters, without digits or marks


@dataclass(frozen=True)
class Pieces:
    """The vocabulary's tokens that the rules at a word's end need beyond the phrases' own: ``letters`` go on a
    word (they begin with a letter), ``digits`` make up a number; ``joins`` are never written twice in a row: a
    space, or a quote with punctuation ('"}', '",'), where a parallel pass commits the same closing piece at two
    neighbours; the joins that begin with a quote are ``closings``, which end a string. A lone quote is no join
    ('""' is an empty string), nor are brackets or dots, which nest or run on in code an API caller may ask for."""

    letters: frozenset[int] = frozenset()
    joins: frozenset[int] = frozenset()
    closings: frozenset[int] = frozenset()
    digits: frozenset[int] = frozenset()
    _letter_indexes: dict[Any, torch.Tensor] = field(default_factory=dict, init=False, repr=False, compare=False)

    @classmethod
    def of(cls, vocab: Sequence[str]) -> Pieces:
        """The pieces of ``vocab``, each token id's text ('' for special tokens, as `Engine.vocab` holds it)."""
        def join(text: str) -> bool:
            return text == " " or (text != '"' and '"' in text and not any(c.isalnum() for c in text))
        joins = frozenset(i for i, text in enumerate(vocab) if join(text))
        return cls(frozenset(i for i, text in enumerate(vocab) if LETTER_RUN.match(text)), joins,
                   frozenset(i for i in joins if vocab[i].startswith('"')),
                   frozenset(i for i, text in enumerate(vocab) if text.isdigit()))

    def letters_but(self, kept: Collection[int], device: torch.device) -> torch.Tensor:
        """``letters`` less ``kept`` as an index tensor on ``device``, from one built once per device: most of a
        large vocabulary begins with a letter, too many ids to list, or to copy to a GPU, at every word's end."""
        import torch  # here: voice.config reads this module without loading torch

        index = self._letter_indexes.get(device)
        if index is None:
            index = self._letter_indexes[device] = torch.tensor(sorted(self.letters), dtype=torch.long, device=device)
        return index[~torch.isin(index, index.new_tensor(sorted(kept)))] if kept else index

    @cached_property
    def spoken(self) -> Pieces:
        """These pieces less ``closings``, for a reply that is spoken and closes no string (built once, so its
        letters' index is too)."""
        return replace(self, closings=frozenset())


@dataclass(frozen=True)
class LogitBias:
    """What to add to a generation's logits: ``follow`` to a copy phrase's next token (:data:`MID_WORD_FACTOR`
    times that right after a pair of pieces in ``inside``, the middle of a word being copied, and where the last
    :data:`CONTEXT` tokens, a word's letters among them, were copied in a row), ``start`` to a phrase's first
    token where no phrase is being followed and one may begin (``starts``: the first tokens favoured right after
    each token that lets a phrase begin; :data:`COPY_HEAD` instead after one of ``eager_after`` where the model
    is :data:`UNSURE` of every token), and there :data:`COPY_HEAD` to the first piece of a word whose second
    comes next (``heads``: first pieces keyed by the second). A number is steered toward ``numbers`` (token
    ids), and one begun as one of those ``said`` is finished as it. Where a copied word is done (its last pair
    in ``ends`` and in no other word) no letter of ``pieces`` goes on it and its closing quotes gain ``follow``,
    and no join is written twice in a row."""

    follow: float = 0.0
    continuations: Mapping[tuple[int, ...], frozenset[int]] = field(default_factory=dict)
    reach: int = CONTEXT
    """Committed tokens to the left that pick a continuation: the longest phrase's length (at most
    :data:`MAX_REACH`), so a phrase's end is never read as its middle. With 3 (a space is a token of its own) the
    end of "three point three three" had read as its middle and a reply went on "three three three ..." to the
    token cap, as did a spelled word whose last letter occurs earlier ("k, n, o, w, l, e, d, g, e, d, g, e, ..."):
    46 of the 54 such words the training data spells; with 12, "a, s, s, e, s, s, e, s, ..." still did."""
    start: float = 0.0
    starts: Mapping[int, frozenset[int]] = field(default_factory=dict)
    eager_after: frozenset[int] = frozenset()
    inside: frozenset[tuple[int, int]] = frozenset()
    ends: frozenset[tuple[int, int]] = frozenset()
    heads: Mapping[int, frozenset[int]] = field(default_factory=dict)
    numbers: frozenset[tuple[int, ...]] = frozenset()
    said: frozenset[tuple[int, ...]] = frozenset()
    pieces: Pieces = Pieces()

    @classmethod
    def copying(cls, phrases: Iterable[str], encode: Callable[[str], list[int]], follow: float,
                start: float = 0.0) -> LogitBias:
        """Copy biases toward ``phrases``, each tokenized as it reads mid-sentence (after a space) and at the
        start of one, their first pieces favoured by ``start`` (if any) after a space or a line break. A run of spaces
        alone picks no continuation: it would favour every word of every phrase wherever a word starts."""
        spaces = set(encode(" "))
        continuations: dict[tuple[int, ...], set[int]] = defaultdict(set)
        spelled = [ids for phrase in phrases for ids in (encode(" " + phrase), encode(phrase))]
        reach = min(MAX_REACH, max([CONTEXT, *map(len, spelled)]))
        for ids in spelled:
            for i in range(1, len(ids) + 1):
                for n in range(1, min(reach, i) + 1):
                    if not spaces.issuperset(ids[i - n:i]):
                        # at the phrase's end (i == len) an entry that favours nothing
                        continuations[tuple(ids[i - n:i])].update(ids[i:i + 1])
        bias = cls(follow, {k: frozenset(v) for k, v in continuations.items()}, reach)
        return bias.starting(phrases, encode, start, WORD_BREAKS) if start else bias

    def unanchored(self, words: Iterable[str], encode: Callable[[str], list[int]]) -> LogitBias:
        """This bias with no phrase followed on from ``words`` alone: where one of them is written, what comes
        next is the model's to choose."""
        spaces = set(encode(" "))
        ends = {tuple(ids[i:]) for word in words for ids in (encode(" " + word + " "), encode(word + " "))
                for i in range(len(ids)) if not spaces.issuperset(ids[i:])}
        return replace(self, continuations={k: v for k, v in self.continuations.items() if k not in ends})

    def starting(self, words: Iterable[str], encode: Callable[[str], list[int]], start: float,
                 after: Iterable[str], eager: bool = False) -> LogitBias:
        """This bias with the first piece of each of ``words`` (mid-sentence and at the start) favoured by
        ``start`` right after any of ``after``'s last tokens too. Only there: favoured right after a word, a
        phrase's first piece would be glued to it ("you havefif-"). ``eager``: there a position the model is
        :data:`UNSURE` of gets :data:`COPY_HEAD` instead (``eager_after``)."""
        spaces = set(encode(" "))
        firsts = {first for word in words for ids in (encode(" " + word), encode(word))
                  if (first := next((t for t in ids if t not in spaces), None)) is not None}
        starts, eager_after = dict(self.starts), set(self.eager_after)
        for text in after:
            if ids := encode(text):
                starts[ids[-1]] = starts.get(ids[-1], frozenset()) | firsts
                if eager:
                    eager_after.add(ids[-1])
        return replace(self, start=start, starts=starts, eager_after=frozenset(eager_after))

    def finishing(self, texts: Iterable[str], encode: Callable[[str], list[int]]) -> LogitBias:
        """This bias with each word of ``texts`` (each run of letters: "australia" of "australia's") followed
        :data:`MID_WORD_FACTOR` times as strongly once a copy has written two of its pieces and it goes on, and
        its last piece not written twice once its last two are ("zavidustanstan"), and its first piece favoured
        where a word may start before its second ("ningephone" for telephone)."""
        inside, ends = set(self.inside), set(self.ends)
        words = [encode(run) for text in texts for run in LETTER_RUN.findall(text)]
        for ids in words:
            inside.update((ids[i - 2], ids[i - 1]) for i in range(2, len(ids)))
            if len(ids) > 1:
                ends.add((ids[-2], ids[-1]))
        return replace(self, inside=frozenset(inside), ends=frozenset(ends)).heading(words)

    def numbering(self, numbers: Iterable[str], encode: Callable[[str], list[int]],
                  said: Iterable[str] = ()) -> LogitBias:
        """This bias with the first digit of each of ``numbers`` favoured where a word may start before its second,
        as :meth:`finishing` favours a word's first piece ("87 / 2" for "eighteen split by 2"), except where that
        second digit begins a number of its own ("15 / 15" for "15 split by 5"). ``said``, the numbers the caller
        said (some of ``numbers``, with those their words imply: "squared" says 2), and ``numbers`` are those a
        number written is steered toward: :meth:`apply`."""
        spelled = [ids for ids in map(encode, numbers) if ids]
        own = {ids[0] for ids in spelled}
        heard = frozenset(tuple(ids) for ids in map(encode, said) if ids)
        return replace(self.heading(ids for ids in spelled if len(ids) > 1 and ids[1] not in own),
                       numbers=self.numbers | heard | {tuple(ids) for ids in spelled}, said=self.said | heard)

    def heading(self, words: Iterable[Sequence[int]]) -> LogitBias:
        """This bias with the first piece of each of ``words`` (token ids) among ``heads``, keyed by its second."""
        heads: dict[int, set[int]] = defaultdict(set, {second: set(f) for second, f in self.heads.items()})
        for ids in words:
            if len(ids) > 1:
                heads[ids[1]].add(ids[0])
        return replace(self, heads={second: frozenset(f) for second, f in heads.items()})

    def __bool__(self) -> bool:
        return bool(self.follow and self.continuations) or bool(self.start and any(self.starts.values()))

    def apply(self, logits: torch.Tensor, line: list[int | None], positions: Sequence[int]) -> torch.Tensor:
        """``logits`` [rows, V] biased in place. ``line`` holds the tokens up to and across the rows' positions
        (None where masked) and ``positions[r]`` is row r's index in it, rows left to right. A masked left
        neighbour that is itself a row counts as that row's likeliest token once biased: a pass that commits
        a run of positions together then follows a phrase along the whole run, not just from its first one, and
        does not write its left neighbour's token twice where the phrase goes on with another. A row that is not
        yet biased counts as its own likeliest token to the row on its left, which may start the word it goes on."""
        line = list(line)
        likeliest = logits.argmax(-1).tolist()
        row_at = {at: row for row, at in enumerate(positions)}
        for row, at in enumerate(positions):
            tail = line[max(0, at - self.reach):at]
            nexts = self.continuation(tail) if self.follow else frozenset()
            left = line[at - 1] if at > 0 else None
            begins = self.starts.get(left, frozenset()) if left is not None else frozenset()
            pair = tuple(line[max(0, at - 2):at])
            follow = self.follow * (MID_WORD_FACTOR if pair in self.inside or self._copying_words(tail[-CONTEXT:])
                                    else 1.0)
            begun = self._digits_before(line, at) if self.numbers else None  # a number written so far
            if said_goes_on := self._said_number_goes_on(begun):
                nexts, follow = said_goes_on, self.follow * MID_WORD_FACTOR
            favoured, value = (nexts, follow) if nexts else (begins, self.start)
            if not nexts and begun == () and self._begins_unknown_number(likeliest[row]):
                favoured = self.number_firsts
            if not nexts and favoured and value and left in self.eager_after and _unsure(logits[row]):
                value = COPY_HEAD  # a start where the model has no word of its own to weigh against the copy
            heads = self._heads_before(line, at, row_at, likeliest) if begins and not nexts else frozenset()
            # no twin of the neighbour where the phrase goes on with another piece, its word is done or it is a join
            ended = pair in self.ends
            twin = left is not None and ((nexts and left not in nexts) or ended
                                         or (left in self.pieces.joins and left not in nexts))
            done = ended and pair not in self.inside  # a copied word's last piece: no letter goes on
            if favoured and value:
                logits[row, list(favoured)] += value
            if heads:
                logits[row, list(heads)] += COPY_HEAD
            if twin:
                logits[row, left] -= follow * TWIN_FACTOR
            if done and self.pieces.letters:
                logits[row, self.pieces.letters_but(nexts, logits.device)] -= follow * TWIN_FACTOR
            if done and self.pieces.closings:
                logits[row, list(self.pieces.closings - {left})] += follow
            if (favoured and value) or heads or twin or done:
                likeliest[row] = int(logits[row].argmax())
            if line[at] is None:
                line[at] = likeliest[row]
        return logits

    def _heads_before(self, line: list[int | None], at: int, row_at: Mapping[int, int],
                      likeliest: list[int]) -> frozenset[int]:
        """The first pieces of the words whose second piece is right after ``at``: committed there, or the
        likeliest token of the row there, not yet biased."""
        right = line[at + 1] if at + 1 < len(line) else None
        if right is None and at + 1 in row_at:
            right = likeliest[row_at[at + 1]]
        return self.heads.get(right, frozenset()) if right is not None else frozenset()

    @cached_property
    def number_firsts(self) -> frozenset[int]:
        """The first digits of ``numbers``."""
        return frozenset(ids[0] for ids in self.numbers if ids[0] in self.pieces.digits)

    @cached_property
    def _unsaid_numbers(self) -> frozenset[tuple[int, ...]]:
        """``numbers`` the caller did not say: an earlier result's."""
        return self.numbers - self.said

    def _digits_before(self, line: list[int | None], at: int) -> tuple[int, ...] | None:
        """The digits written right before ``at`` (empty where none are), or None where what precedes them is
        masked or out of sight, so whether a number begins there is not known."""
        start = at
        while start > 0 and line[start - 1] in self.pieces.digits:
            start -= 1
        return tuple(line[start:at]) if start > 0 and line[start - 1] is not None else None  # type: ignore[arg-type]

    def _said_number_goes_on(self, begun: tuple[int, ...] | None) -> frozenset[int]:
        """The next digits of the numbers said that ``begun``, the digits written so far, begin, where those are no
        number said and begin none of the other ``numbers`` (an earlier result's "1024" begins as "12" does)."""
        if not begun or begun in self.said or any(n[:len(begun)] == begun for n in self._unsaid_numbers):
            return frozenset()
        return frozenset(n[len(begun)] for n in self.said if len(n) > len(begun) and n[:len(begun)] == begun)

    def _begins_unknown_number(self, likeliest: int) -> bool:
        """Whether ``likeliest``, a digit where a number begins, begins it as none of ``numbers`` does."""
        return likeliest in self.pieces.digits and likeliest not in self.number_firsts and bool(self.number_firsts)

    def _copying_words(self, tail: Sequence[int | None]) -> bool:
        """Whether the :data:`CONTEXT` tokens of ``tail`` were copied in a row, a word's letters among them, and the
        copy goes on: then it follows :data:`MID_WORD_FACTOR` times as strongly."""
        return (len(tail) == CONTEXT and None not in tail and bool(self.continuations.get(tuple(tail)))  # type: ignore[arg-type]
                and not self.pieces.letters.isdisjoint(tail))

    def continuation(self, context: Sequence[int | None]) -> frozenset[int]:
        """The next tokens of the phrases that contain the longest committed tail of ``context``: none where that
        tail ends every phrase it is in, so a copy that is complete stops there ("22" went on to "222" when the
        shorter tail "2" picked the continuation). The shipped checkpoint scores the same either way on the four
        held-out samples; configs/demo.toml's 89.4% -> 89.5% free calls (docs/demo-model.md)."""
        best: frozenset[int] = frozenset()
        for n in range(1, min(self.reach, len(context)) + 1):
            tail = tuple(context[len(context) - n:])
            if None in tail:
                break
            best = self.continuations.get(tail, best)  # type: ignore[arg-type]
        return best


def _unsure(row: torch.Tensor) -> bool:
    """Whether the model gives no token of ``row`` (one position's logits) :data:`UNSURE` of its probability."""
    return float(row.softmax(-1).max()) < UNSURE


def bias_line(tokens: Sequence[int], start: int, window: Sequence[int | None], reach: int) -> tuple[list[int | None], int]:
    """What :meth:`LogitBias.apply` needs to see of a generation whose window begins at ``start``: the
    ``reach`` committed tokens before it (:attr:`LogitBias.reach`) and the window itself (None: still masked),
    with the window's offset in that line."""
    before = list(tokens[max(0, start - reach):start])
    return [*before, *window], len(before)


def _values(value: Any, numbers: bool) -> Iterator[str]:
    """The string values in a tool's JSON result, and with ``numbers`` its numbers too, in digits."""
    if isinstance(value, str):
        yield value
    elif numbers and isinstance(value, int | float) and not isinstance(value, bool):
        yield str(value)
    elif isinstance(value, dict | list):
        for item in value.values() if isinstance(value, dict) else value:
            yield from _values(item, numbers)


def copy_phrases(messages: Sequence[dict[str, Any]], asking_words: Collection[str] = (),
                 numbers: bool = False) -> list[str]:
    """What a reply to ``messages`` is expected to repeat: a tool result's string values when it follows one (a
    capital, a spelling; the reply says numbers in words), with ``numbers`` its numbers in digits too; the caller's
    words when it answers them (a name to look up, words to say back), cut where they ask for a tool
    (:func:`between_requests`), the numbers they said in digits, as a call writes them (free held-out calls
    89.7% -> 91.6% on the 200, README), and the latest tool result's values too, which a follow-up may ask for
    again ("spell it again"), its numbers in digits ("times it by 12" after a 1024 had called "102 * 12"; free
    calls / answers 94.8% / 90.3% -> 95.0% / 90.4%, follow-ups to arithmetic 90.5% -> 93.5%)."""
    if not messages:
        return []
    last = messages[-1]
    content = last.get("content")
    if not isinstance(content, str) or not content.strip():
        return []
    if last.get("role") == "user":
        earlier = next((m for m in reversed(messages) if m.get("role") == "tool"), None)
        said_numbers = [str(n) for n in heard_numbers(content)]  # a call writes "16" for "sixteen"
        return [*between_requests(content, asking_words), *said_numbers,
                *(copy_phrases([earlier], numbers=True) if earlier is not None else [])]
    if last.get("role") == "tool":
        try:
            result = json.loads(content)
        except json.JSONDecodeError:
            return [content]
        if isinstance(result, dict) and "error" in result:  # said in the reply's own words, not read out
            return _call_strings(messages[:-1])
        return [s for s in _values(result, numbers) if s.strip()]
    return []


def _call_strings(messages: Sequence[dict[str, Any]]) -> list[str]:
    """The string arguments of the call ``messages`` end with, what a reply to its error says back ("sorry, i don't
    know the capital of mordor"): copying nothing after an error had garbled the name ("muser ry")."""
    calls = messages[-1].get("tool_calls") if messages and messages[-1].get("role") == "assistant" else None
    arguments = [call.get("function", {}).get("arguments") for call in calls or ()]
    return [s for args in arguments if isinstance(args, dict) for s in _values(args, False) if s.strip()]


def _asked_heads(phrases: Iterable[str], messages: Sequence[dict[str, Any]]) -> list[str]:
    """The first words of the result's phrases of several words that the caller's request holds too, there going
    on with another word: a reply that says the request back ("7 minus 14 is minus seven") writes them before the
    result's own. Followed on from there, "minus" had gone on with the result's "seven": "7 minus seven is minus
    seven". A head going on as in the phrase ("new zealand" asked, "new zealand" the result) is still followed."""
    asked = next((m.get("content") for m in reversed(messages) if m.get("role") == "user"), None)
    if not isinstance(asked, str):
        return []
    said = [word.strip(".,!?;:").lower() for word in asked.split()]
    heads = []
    for phrase in phrases:
        words = phrase.lower().split()
        if len(words) > 1 and any(w == words[0] and nxt != words[1] for w, nxt in zip(said, [*said[1:], None], strict=True)):
            heads.append(phrase.split()[0])
    return heads


def between_requests(text: str, asking_words: Collection[str]) -> list[str]:
    """The runs of ``text``'s words between those of ``asking_words`` that ask for a tool, so a copy of a name
    stops where the request goes on: "how is schedule spelled" had given the word to spell as "schedule spell",
    and a tool's name does not copy the caller's "timer" ("check my timer" had called "list_timer", not
    list_timers). Function words ("the", "of") do not cut: a phrase to say back holds them. Free calls / answers
    91.9% / 87.7% -> 93.0% / 88.6%, spelling calls 66.4% -> 71.5%, timers checked or cancelled 86.8% -> 99.0%,
    no intent lower; cut at function words too, identity 100% -> 97.2% (python -m dlm.eval --samples --efforts
    medium)."""
    cutting = frozenset(asking_words) - FUNCTION_WORDS
    runs: list[list[str]] = [[]]
    for word in text.split():
        if word.lower().strip(".,!?;:") in cutting:
            runs.append([])
        else:
            runs[-1].append(word)
    return [" ".join(run) for run in runs if run]


def reply_copy_bias(messages: Sequence[dict[str, Any]], encode: Callable[[str], list[int]],
                    follow: float = COPY_FOLLOW, asking_words: frozenset[str] = frozenset(),
                    pieces: Pieces = Pieces()) -> LogitBias | None:
    """The copy bias of the reply to ``messages`` (None: nothing to copy, or ``follow`` is 0, which turns the
    start bias off too). After a tool's result it follows the result's phrases :data:`RESULT_FOLLOW_FACTOR` times
    as strongly and starts them where a word may begin; after the caller's words, their names where a string
    opens, as a tool call's arguments do, and those spelled in several pieces after a space in a spoken reply
    (:data:`COPY_START`); either way it finishes the words it copies (:meth:`LogitBias.finishing`). Not
    ``asking_words``, the words that ask for a tool (`dlm.tools.registry.asking_words`): "capital city of
    kulevir" had begun its country "city", "spell kitchen" its word "spell". ``pieces``, the vocabulary's letters
    and joins (`Engine.pieces`), lets it end the words it copies and keep joins single."""
    if not follow:
        return None
    phrases = copy_phrases(messages, asking_words)
    if not phrases:
        return None
    if messages[-1].get("role") == "tool":
        bias = (LogitBias.copying(phrases, encode, follow * RESULT_FOLLOW_FACTOR, COPY_START)
                .finishing(phrases, encode)
                .unanchored(_asked_heads(phrases, messages), encode))
        return replace(bias, pieces=pieces.spoken)
    words = [word for word in name_words(messages[-1]["content"]) if word not in asking_words]
    spaces = set(encode(" "))
    rare = [word for word in words if sum(t not in spaces for t in encode(" " + word)) > 1]  # several pieces
    bias = (LogitBias.copying(phrases, encode, follow)
            .starting(words, encode, COPY_START, STRING_OPENINGS, eager=True)
            .starting(rare, encode, COPY_START, (" ",))  # not the reply's first word: "okay: ..." may come first
            .finishing(words, encode)
            .numbering([phrase for phrase in phrases if phrase.isdigit()], encode,
                       [str(abs(n)) for n in said_numbers(messages[-1]["content"])]))
    return replace(bias, pieces=pieces)
