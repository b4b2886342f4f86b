"""Logit biases: the copy bias's continuations on the demo tokenizer, and biases applied by the real engine."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from dlm.decoding.logit_bias import (
    COPY_HEAD,
    COPY_START,
    MID_WORD_FACTOR,
    RESULT_FOLLOW_FACTOR,
    TWIN_FACTOR,
    LogitBias,
    Pieces,
    between_requests,
    copy_phrases,
    reply_copy_bias,
)
from dlm.engine import Engine
from dlm.tools.registry import ASKING_WORDS

DEMO = Path(__file__).resolve().parents[2] / "dlm" / "assets" / "demo"


@pytest.fixture(scope="module")
def engine() -> Engine:
    return Engine.from_dir(DEMO)


def ids(engine: Engine, *pieces: str) -> list[int]:
    """The id of each piece, each a single token of the demo tokenizer."""
    out = []
    for piece in pieces:
        (token,) = engine.tokenizer.encode(piece)
        out.append(token)
    return out


def first_token(engine: Engine, word: str) -> int:
    """The token a word starts with in the demo tokenizer (which pieces those are changes when it is retrained)."""
    return engine.tokenizer.encode(word)[0]


def sure_of(token: int, vocab: int) -> torch.Tensor:
    """One position's logits, the model sure of ``token`` (well over UNSURE), so a start gets its plain bias."""
    logits = torch.zeros(1, vocab)
    logits[0, token] = 10.0
    return logits


def asked(engine: Engine, content: str) -> LogitBias:
    """The copy bias of the reply to a caller who said ``content``, with the vocabulary's pieces, as the engine
    builds it."""
    bias = reply_copy_bias([{"role": "user", "content": content}], engine.tokenizer.encode, pieces=engine.pieces)
    assert bias is not None
    return bias


def boosted(bias: LogitBias, vocab: int, left: list[int | None]) -> set[int]:
    """The tokens favoured at a position after ``left``."""
    return set((bias.apply(torch.zeros(1, vocab), [*left, None], [len(left)])[0] > 0).nonzero()[:, 0].tolist())


def test_the_longest_committed_tail_picks_the_phrase_continuation(engine: Engine) -> None:
    vocab = engine.model.cfg.vocab_size
    bias = LogitBias.copying(["f, a, m"], engine.tokenizer.encode, follow=4.0)
    f, comma, space, a, m = ids(engine, "f", ",", " ", "a", "m")
    assert boosted(bias, vocab, [f, comma, space]) == {a}  # after "f, " comes "a", not "m"
    assert boosted(bias, vocab, [a, comma, space]) == {m}
    assert boosted(bias, vocab, [None, comma, space]) == {a, m}  # only ", " is known
    assert boosted(bias, vocab, [f, comma, None]) == set()  # the neighbour is still masked
    assert boosted(bias, vocab, [space]) == set()  # a space alone would favour every word
    logits = bias.apply(torch.zeros(1, vocab), [f, comma, space, None], [3])
    assert logits[0, a] == 4.0


def test_a_copy_running_through_words_follows_them_more_strongly(engine: Engine) -> None:
    """Three tokens copied in a row, a word's letters among them, and the copy goes on three times as strongly
    ("garden senegal 978 vicious mesmill" had broken off a word it had begun); a run of digits and spaces does
    not ("71 plus 102" went into a calculator's expression as said)."""
    vocab = engine.model.cfg.vocab_size
    ine, er, space, kit, one, zero = ids(engine, "ine", "er", " ", "kit", "1", "0")
    ask = "repeat engineer kitchen 710 119"
    bias = asked(engine, ask)
    running = bias.apply(torch.zeros(1, vocab), [ine, er, space, None], [3])[0]
    assert running[kit] == bias.follow * MID_WORD_FACTOR
    begun = bias.apply(torch.zeros(1, vocab), [None, er, space, None], [3])[0]  # two tokens known: no run yet
    assert begun[kit] == bias.follow
    digits = bias.apply(torch.zeros(1, vocab), [one, zero, space, None], [3])[0]
    assert digits[one] == bias.follow
    unread = reply_copy_bias([{"role": "user", "content": ask}], engine.tokenizer.encode)  # no vocabulary pieces: no letters to tell a word by
    assert unread is not None and unread.apply(torch.zeros(1, vocab), [ine, er, space, None], [3])[0, kit] == unread.follow


def test_a_copy_that_ends_its_phrase_is_not_led_on(engine: Engine) -> None:
    """After "22" the phrase "22" is complete: its shorter tail "2" (which "22" continues) must not favour a
    third "2" (the checkpoint in budget had written "10 - 222" for "22")."""
    vocab = engine.model.cfg.vocab_size
    two, three = ids(engine, "2", "3")
    bias = LogitBias.copying(["22"], engine.tokenizer.encode, follow=4.0)
    assert boosted(bias, vocab, [two]) == {two}
    assert boosted(bias, vocab, [two, two]) == set()
    both = LogitBias.copying(["22", "223"], engine.tokenizer.encode, follow=4.0)
    assert boosted(both, vocab, [two, two]) == {three}  # ends one phrase, goes on in another


def test_a_run_decided_in_one_pass_follows_the_phrase_along_its_length(engine: Engine) -> None:
    """Three masked positions after "copenhagen"'s first token: each is biased to the next of its tokens,
    counting the row before it as that token, where each row's own logits would have said "x"."""
    vocab = engine.model.cfg.vocab_size
    bias = LogitBias.copying(["copenhagen"], engine.tokenizer.encode, follow=4.0)
    first, *rest = engine.tokenizer.encode("copenhagen")
    (x,) = ids(engine, "x")
    assert len(rest) >= 3 and x not in rest
    logits = torch.zeros(3, vocab)
    logits[:, x] = 1.0
    biased = bias.apply(logits, [first, None, None, None], [1, 2, 3])
    assert biased.argmax(-1).tolist() == rest[:3]


def test_neighbours_decided_in_one_pass_do_not_both_take_the_same_piece(engine: Engine) -> None:
    """Two masked positions after "s" of "schedule", each row's own logits saying "che" (each is predicted
    without the other): the second must not write "che" again ("schedulee", "zealandand" were such twins),
    while a phrase that does repeat a piece ("22") keeps it."""
    vocab = engine.model.cfg.vocab_size
    s, che, dul, two = ids(engine, "s", "che", "dul", "2")
    bias = LogitBias.copying(["schedule"], engine.tokenizer.encode, follow=4.0)
    logits = torch.zeros(2, vocab)
    logits[:, che] = 6.0
    biased = bias.apply(logits, [s, None, None], [1, 2])
    assert biased.argmax(-1).tolist() == [che, dul]
    assert biased[1, che] == 6.0 - 4.0 * TWIN_FACTOR
    repeated = LogitBias.copying(["22"], engine.tokenizer.encode, follow=4.0)
    assert repeated.apply(torch.zeros(1, vocab), [two, None], [1])[0, two] == 4.0


def test_a_word_begun_is_finished(engine: Engine) -> None:
    """Two pieces into a name the caller said ("a", "ust" of "australia's"), the copy follows
    :data:`MID_WORD_FACTOR` times as strongly, so a string the model is unsure about does not close at "aust";
    one piece in ("a" is also a word) it follows as usual, and a word that asks for a tool is not copied at all
    ("spelled" would have named the tool "spelled_word"). After a tool's result its words are finished too."""
    vocab = engine.model.cfg.vocab_size
    quote, a, ust, ral, sp, ell, ed = ids(engine, '"', "a", "ust", "ral", "sp", "ell", "ed")
    ask = {"role": "user", "content": "so how is australia's capital spelled"}
    bias = reply_copy_bias([ask], engine.tokenizer.encode, asking_words=ASKING_WORDS)
    assert bias is not None

    def follow_after(left: list[int | None], token: int) -> float:
        return float(bias.apply(torch.zeros(1, vocab), [*left, None], [len(left)])[0, token])

    assert follow_after([quote, a, ust], ral) == bias.follow * MID_WORD_FACTOR > bias.follow
    assert follow_after([quote, a], ust) == bias.follow
    assert follow_after([quote, sp, ell], ed) == 0.0
    can, ber, ra = ids(engine, "can", "ber", "ra")
    tool = {"role": "tool", "content": json.dumps({"country": "australia", "capital": "canberra"})}
    after_result = reply_copy_bias([tool], engine.tokenizer.encode)
    assert after_result is not None
    logits = after_result.apply(torch.zeros(1, vocab), [can, ber, None], [2])
    assert logits[0, ra] == after_result.follow * MID_WORD_FACTOR


def test_a_copied_word_once_done_goes_on_with_no_letter(engine: Engine) -> None:
    """Once a copy has written the last two pieces of a word the caller said ("kit", "chen" of "kitchen") no
    letter goes on it ("comingrt", "theaterry" were spelling calls), a space may, and a closing quote is favoured
    ("coming}" had left the string open); where another word they said goes on from there ("kitchens") the letter
    it goes on with is free. After a tool's result the reply is spoken: it ends words but closes no string."""
    vocab = engine.model.cfg.vocab_size
    quote, kit, chen, s, rt, space, close = ids(engine, '"', "kit", "chen", "s", "rt", " ", '"}')
    ask = {"role": "user", "content": "how is kitchen spelled"}
    bias = reply_copy_bias([ask], engine.tokenizer.encode, asking_words=ASKING_WORDS, pieces=engine.pieces)
    assert bias is not None
    logits = bias.apply(torch.zeros(1, vocab), [quote, kit, chen, None], [3])[0]
    assert logits[s] == logits[rt] == -bias.follow * TWIN_FACTOR
    assert logits[close] == bias.follow and logits[space] == 0.0
    both = reply_copy_bias([{"role": "user", "content": "how is kitchen spelled in kitchens"}], engine.tokenizer.encode,
                           asking_words=ASKING_WORDS, pieces=engine.pieces)
    assert both is not None
    logits = both.apply(torch.zeros(1, vocab), [quote, kit, chen, None], [3])[0]
    assert logits[s] == both.follow * MID_WORD_FACTOR and logits[rt] == 0.0
    unread = reply_copy_bias([ask], engine.tokenizer.encode, asking_words=ASKING_WORDS)  # no vocabulary pieces
    assert unread is not None and unread.apply(torch.zeros(1, vocab), [quote, kit, chen, None], [3])[0, s] == 0.0
    tool = {"role": "tool", "content": json.dumps({"word": "kitchen", "letters": "k, i, t, c, h, e, n"})}
    spoken = reply_copy_bias([tool], engine.tokenizer.encode, pieces=engine.pieces)
    assert spoken is not None
    logits = spoken.apply(torch.zeros(1, vocab), [space, kit, chen, None], [3])[0]
    assert logits[rt] == -spoken.follow * TWIN_FACTOR and logits[close] == 0.0


def test_a_join_is_not_written_twice_in_a_row(engine: Engine) -> None:
    """A space or a quote with punctuation right after the same piece loses the twin penalty: two neighbours
    decided in one pass had both closed a string ('"yellow"}"}}') or both spaced ("can't brow  the web"). A
    lone quote ('""' is an empty string) and brackets (which nest) may repeat."""
    vocab = engine.model.cfg.vocab_size
    space, close, comma, quote, brace, y = ids(engine, " ", '"}', '",', '"', "}", "y")
    bias = reply_copy_bias([{"role": "user", "content": "spell yellow"}], engine.tokenizer.encode,
                           asking_words=ASKING_WORDS, pieces=engine.pieces)
    assert bias is not None

    def after(left: int) -> float:
        return float(bias.apply(torch.zeros(1, vocab), [y, left, None], [2])[0, left])

    assert after(space) == after(close) == after(comma) == -bias.follow * TWIN_FACTOR
    assert after(quote) == after(brace) == 0.0


def test_pieces_are_read_from_the_vocabulary() -> None:
    """Letters begin with a letter; joins are a space or a quote with punctuation, never a special token's ''
    or a lone quote, a bracket, digits or dots; closings are the joins that begin with a quote; digits are
    digits alone."""
    vocab = ["", "a", " ", '"}', '"', "}", "1", "..", "ab", '",', "  ", '"a', '}"']
    assert Pieces.of(vocab) == Pieces(letters=frozenset({1, 8}), joins=frozenset({2, 3, 9, 12}),
                                      closings=frozenset({3, 9}), digits=frozenset({6}))


def test_a_copy_stops_where_the_caller_asks_for_a_tool(engine: Engine) -> None:
    """"how is schedule spelled?": after "schedule" the copy does not lead on into "spelled" (the word to spell
    had been "schedule spell"), and a word's last piece is not written twice ("zavidustanstan")."""
    vocab = engine.model.cfg.vocab_size
    space, dul, e, s = ids(engine, " ", "dul", "e", "s")
    assert between_requests("well how is schedule Spelled?", ASKING_WORDS) == ["well how is schedule"]
    assert between_requests("say the name of the city", ASKING_WORDS) == ["say the", "of the"]
    ask = [{"role": "user", "content": "well how is schedule spelled"}]
    cut = reply_copy_bias(ask, engine.tokenizer.encode, asking_words=ASKING_WORDS)
    whole = reply_copy_bias(ask, engine.tokenizer.encode)
    assert cut is not None and whole is not None
    assert boosted(whole, vocab, [s, dul, e]) == {space}
    assert boosted(cut, vocab, [s, dul, e]) == set()
    assert cut.apply(torch.zeros(1, vocab), [dul, e, None], [2])[0, e] == -cut.follow * TWIN_FACTOR


def test_a_word_s_first_piece_is_favoured_before_its_second(engine: Engine) -> None:
    """The model wrote telephone's later pieces right and its first wrong ("ningephone"): where a word may start
    and the next position holds "e", or most likely takes it in this pass, "tel" gets :data:`COPY_HEAD` on top of
    its start; glued to a word, where no word starts, nothing."""
    vocab = engine.model.cfg.vocab_size
    space, quote, tel, e, ning, have = ids(engine, " ", '"', "tel", "e", "ning", "have")
    assert engine.tokenizer.encode("telephone")[:2] == [tel, e]
    ask = [{"role": "user", "content": "say back telephone 594"}]
    bias = reply_copy_bias(ask, engine.tokenizer.encode, asking_words=ASKING_WORDS)
    assert bias is not None
    logits = torch.zeros(2, vocab)
    logits[0, ning], logits[1, e] = 10.0, 5.0
    biased = bias.apply(logits, [space, None, None], [1, 2])
    assert biased[0].argmax() == tel and biased[0, tel] == bias.start + COPY_HEAD
    assert bias.apply(sure_of(ning, vocab), [quote, None, e], [1])[0, tel] == bias.start + COPY_HEAD
    assert bias.apply(sure_of(ning, vocab), [have, None, e], [1])[0, tel] == 0.0


def test_a_number_s_first_digit_is_favoured_before_its_second(engine: Engine) -> None:
    """"eighteen split by 2" had called "87 / 2": where a string opens before an "8", the "1" of the 18 the
    caller said is favoured; before a "5" that is a number of its own ("15 split by 5"), nothing is."""
    vocab = engine.model.cfg.vocab_size
    quote, one, eight, five = ids(engine, '"', "1", "8", "5")
    assert engine.tokenizer.encode("18") == [one, eight]
    bias = reply_copy_bias([{"role": "user", "content": "what's eighteen split by 2"}], engine.tokenizer.encode,
                           asking_words=ASKING_WORDS)
    assert bias is not None
    assert bias.apply(torch.zeros(1, vocab), [quote, None, eight], [1])[0, one] == COPY_HEAD
    own = reply_copy_bias([{"role": "user", "content": "what's 15 split by 5"}], engine.tokenizer.encode,
                          asking_words=ASKING_WORDS)
    assert own is not None and own.apply(torch.zeros(1, vocab), [quote, None, five], [1])[0, one] == 0.0


def test_a_number_begun_as_one_said_is_finished_as_it(engine: Engine) -> None:
    """"113 minus eighty-five" had called "113 - 8": a "8" that is no number said but begins the 85 the caller said
    goes on with its "5" three times as strongly. Not where the digits are a number said ("1" of "1 plus 12"), nor
    where they begin an earlier result's number too ("times it by 12" after 1024 had become "1224 * 12")."""
    vocab = engine.model.cfg.vocab_size
    space, minus, one, two, five, eight = ids(engine, " ", "-", "1", "2", "5", "8")
    bias = asked(engine, "tell me 113 minus eighty-five")
    begun = bias.apply(torch.zeros(1, vocab), [minus, space, eight, None], [3])[0]
    assert begun[five] == bias.follow * MID_WORD_FACTOR
    unknown = bias.apply(torch.zeros(1, vocab), [None, eight, None], [2])[0]  # whether a number begins: unknown
    assert unknown[five] == bias.follow
    said = asked(engine, "what is 1 plus 12")
    assert said.apply(torch.zeros(1, vocab), [space, one, None], [2])[0, two] == said.follow
    result = {"role": "tool", "content": json.dumps({"result": 1024})}
    follow_up = reply_copy_bias([result, {"role": "user", "content": "times it by 12"}], engine.tokenizer.encode,
                                pieces=engine.pieces)
    assert follow_up is not None
    after_one = follow_up.apply(torch.zeros(1, vocab), [space, one, None], [2])[0]
    assert after_one[two] == follow_up.follow  # followed as "12" and "1024" are, not more


def test_a_number_that_begins_as_none_said_is_steered_to_one_said(engine: Engine) -> None:
    """"32 plus zero" had called "32 + 1": where the model would begin a number with a digit no number the caller
    said begins with, the first digits of theirs are favoured by the start bias; not where its digit begins one
    (a confident "2" of "squared" stays, and nothing is made surer than it was), nor inside a number."""
    vocab = engine.model.cfg.vocab_size
    space, plus, zero, one, two, three = ids(engine, " ", "+", "0", "1", "2", "3")
    bias = asked(engine, "okay 32 plus zero equals what")

    def at_number_start(likeliest: int, left: list[int | None]) -> torch.Tensor:
        return bias.apply(sure_of(likeliest, vocab), [*left, None], [len(left)])[0]

    unsaid = at_number_start(one, [plus, space])
    assert unsaid[zero] == unsaid[three] == bias.start and unsaid[one] == 10.0
    assert at_number_start(three, [plus, space])[zero] == 0.0  # "3" begins the 32 said
    inside = at_number_start(one, [space, three])  # after a digit: no number begins here
    assert inside[zero] == 0.0
    assert two in asked(engine, "35 squared").number_firsts  # "squared" says 2
    bare = reply_copy_bias([{"role": "user", "content": "okay 32 plus zero"}], engine.tokenizer.encode)  # no digits
    assert bare is not None and bare.apply(torch.zeros(1, vocab), [plus, space, None], [2])[0, zero] == 0.0


def test_a_phrase_is_followed_mid_sentence_and_at_the_start(engine: Engine) -> None:
    vocab = engine.model.cfg.vocab_size
    bias = LogitBias.copying(["copenhagen"], engine.tokenizer.encode, follow=4.0)
    space, co, pen = ids(engine, " ", "co", "pen")
    assert boosted(bias, vocab, [co]) == {pen}
    assert boosted(bias, vocab, [space, co]) == {pen}
    assert not LogitBias.copying(["copenhagen"], engine.tokenizer.encode, follow=0.0)  # nothing to add


def test_a_tool_result_s_phrases_are_started_where_none_is_being_followed(engine: Engine) -> None:
    vocab = engine.model.cfg.vocab_size
    space, ac, cra, gh, ana = ids(engine, " ", "ac", "cra", "gh", "ana")
    bias = LogitBias.copying(["accra", "ghana"], engine.tokenizer.encode, follow=4.0, start=2.0)
    logits = bias.apply(torch.zeros(2, vocab), [space, None, None], [1, 2])
    assert set(logits[0].nonzero()[:, 0].tolist()) == {ac, gh} and logits[0, ac] == 2.0
    assert logits[1].argmax() in (cra, ana) and logits[1].max() == 4.0  # after the first row's likeliest start
    have, newline = ids(engine, "have", "\n")
    assert boosted(bias, vocab, [newline]) == {ac, gh}  # the reply's first word
    assert boosted(bias, vocab, [have]) == set()  # glued to a word, a start would spell "haveac"
    tool = {"role": "tool", "content": json.dumps({"country": "ghana", "capital": "accra"})}
    after_result = reply_copy_bias([tool], engine.tokenizer.encode)
    assert after_result is not None and after_result.start > 0 and after_result.starts[space] == {ac, gh}
    after_words = reply_copy_bias([{"role": "user", "content": "say ghana accra"}], engine.tokenizer.encode)
    assert after_words is not None and after_result.follow == RESULT_FOLLOW_FACTOR * after_words.follow > 0


@pytest.mark.parametrize("phrase", ["three point three three", "k, n, o, w, l, e, d, g, e", "a, s, s, e, s, s, e, s"])
def test_a_phrase_whose_end_repeats_its_middle_is_not_led_on_at_its_end(engine: Engine, phrase: str) -> None:
    """Three tokens of context read the end of these as their middle: replies went on "three three three ..."
    and "d, g, e, d, g, e, ..." to the token cap; twelve still did for "assesses", whose last twelve tokens occur
    inside it. The reach is the longest phrase's."""
    bias = LogitBias.copying([phrase], engine.tokenizer.encode, follow=4.0)
    whole = engine.tokenizer.encode(" " + phrase)
    assert bias.continuation(whole) == frozenset()
    middle = whole[: len(whole) - 3]  # the same last tokens, inside the phrase: it goes on
    assert bias.continuation(middle) == {whole[len(middle)]}


def test_an_error_result_is_no_phrase_to_copy_but_its_call_s_words_are() -> None:
    error = {"role": "tool", "content": json.dumps({"error": "country_capital: no capital known for 'atlantis'"})}
    call = {"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": "country_capital", "arguments": {"country": "atlantis"}}}]}
    assert copy_phrases([call, error]) == ["atlantis"]
    assert copy_phrases([error]) == []
    assert copy_phrases([error, {"role": "user", "content": "and of peru"}]) == ["and of peru"]


def test_a_result_is_not_followed_on_from_a_word_the_caller_asked_with(engine: Engine) -> None:
    """"what is 7 minus 14" gives "minus seven": said back, the request's "minus" had gone on with the result's
    "seven" ("7 minus seven is minus seven"). A word the request goes on from as the result does still leads
    on."""
    vocab = engine.model.cfg.vocab_size
    tool = {"role": "tool", "content": json.dumps({"result": -7, "spoken": "minus seven"})}
    sev = first_token(engine, "seven")
    minus_then = engine.tokenizer.encode(" minus ")
    plain = reply_copy_bias([tool], engine.tokenizer.encode)
    assert plain is not None and sev in boosted(plain, vocab, minus_then)  # nobody asked with "minus"
    bias = reply_copy_bias([{"role": "user", "content": "What is 7 minus 14?"}, tool], engine.tokenizer.encode)
    assert bias is not None and sev not in boosted(bias, vocab, minus_then)
    tool = {"role": "tool", "content": json.dumps({"country": "new zealand", "capital": "wellington"})}
    asked_new = reply_copy_bias([{"role": "user", "content": "capital of new zealand"}, tool], engine.tokenizer.encode)
    zeal = first_token(engine, "zealand")
    assert asked_new is not None and zeal in boosted(asked_new, vocab, engine.tokenizer.encode(" new "))


def test_a_call_s_string_starts_with_a_name_the_caller_said(engine: Engine) -> None:
    """After the caller's words a string (a tool call's argument) starts with a word they said that could begin
    a name, never a number; a spoken word only with such a name the tokenizer spells in several pieces (a reply
    repeats the caller only when asked to, and a word of one piece the model copies well)."""
    vocab = engine.model.cfg.vocab_size
    quote, space, d, two, newline, good = ids(engine, '"', " ", "d", "2", "\n", "good")
    twen = first_token(engine, "twenty")
    ask = {"role": "user", "content": "um tell me denmark's good capital in twenty words or 20"}
    bias = reply_copy_bias([ask], engine.tokenizer.encode)
    assert bias is not None and bias.start > 0
    assert {d, good} <= boosted(bias, vocab, [quote])
    assert not {twen, two} & boosted(bias, vocab, [quote])
    assert len(engine.tokenizer.encode("denmark")) > 1 and engine.tokenizer.encode("good") == [good]
    assert d in boosted(bias, vocab, [space])
    assert d not in boosted(bias, vocab, [newline])  # the reply's first word is its own: "okay: ..."
    assert not {good, twen, two} & boosted(bias, vocab, [space])


def test_a_call_s_string_starts_as_strongly_as_a_word_s_head_where_the_model_is_unsure(engine: Engine) -> None:
    """"how is kitchen spelled" had called "exex": where no token of a string's opening has UNSURE of the model's
    probability, the word said starts with COPY_HEAD, not COPY_START; where the model is sure of one, as before;
    and a spoken word after a space only with COPY_START, sure or not (a real model's prose would parrot)."""
    vocab = engine.model.cfg.vocab_size
    quote, space = ids(engine, '"', " ")
    kit = first_token(engine, "kitchen")
    bias = reply_copy_bias([{"role": "user", "content": "how is kitchen spelled"}], engine.tokenizer.encode,
                           asking_words=ASKING_WORDS)
    assert bias is not None
    unsure = bias.apply(torch.zeros(1, vocab), [quote, None], [1])[0]  # every token alike
    assert unsure[kit] == COPY_HEAD
    assert bias.apply(sure_of(quote, vocab), [quote, None], [1])[0, kit] == bias.start == COPY_START
    assert bias.apply(torch.zeros(1, vocab), [space, None], [1])[0, kit] == COPY_START


def test_a_word_that_asks_for_a_tool_starts_no_name(engine: Engine) -> None:
    """"capital city of kulevir": the country starts "kul", never "city" or "capital" (the call had said
    "cityevir"); a unit code the caller says is a value the call takes, so "mm" still starts one."""
    vocab = engine.model.cfg.vocab_size
    quote, kul, mm = ids(engine, '"', "kul", "mm")
    city, capi = first_token(engine, "city"), first_token(engine, "capital")
    ask = {"role": "user", "content": "capital city of kulevir and 10 mm"}
    bias = reply_copy_bias([ask], engine.tokenizer.encode, asking_words=ASKING_WORDS)
    assert bias is not None and {kul, mm} <= boosted(bias, vocab, [quote])
    assert not {city, capi} & boosted(bias, vocab, [quote])
    assert {city, capi} <= boosted(reply_copy_bias([ask], engine.tokenizer.encode), vocab, [quote])
    assert {"capital", "city", "spell", "timer"} <= ASKING_WORDS and not {"mm", "minutes", "c"} & ASKING_WORDS


def test_the_engine_decodes_under_a_bias(engine: Engine) -> None:
    (period,) = engine.tokenizer.encode(".")
    anywhere = range(engine.model.cfg.vocab_size)  # a phrase may start after any token
    every_position = LogitBias(start=100.0, starts=dict.fromkeys(anywhere, frozenset({period})))
    assert engine.generate("hello", bias=every_position, max_new_tokens=6).token_ids == [period] * 6
    assert engine.generate("hello", max_new_tokens=6).token_ids != [period] * 6


def test_bidirectional_families_refuse_a_bias(fixtures_dir: Path) -> None:
    llada = Engine.from_dir(fixtures_dir / "llada" / "checkpoint")
    with pytest.raises(ValueError, match="block-causal"):
        llada.generate([1, 2, 3], bias=LogitBias(start=1.0, starts={0: frozenset({5})}), max_new_tokens=4)


def test_a_reply_copies_what_it_answers() -> None:
    user = {"role": "user", "content": "say back rizigaora"}
    tool = {"role": "tool", "content": json.dumps({"country": "ghana", "capital": "accra", "n": 3, "more": ["x"],
                                                   "ok": True})}
    assert copy_phrases([user]) == ["say back rizigaora"]
    assert copy_phrases([user, tool]) == ["ghana", "accra", "x"]  # the reply says numbers in words
    assert copy_phrases([{"role": "tool", "content": "plain text"}]) == ["plain text"]
    assert copy_phrases([user, {"role": "assistant", "content": "ok"}]) == []
    again = {"role": "user", "content": "spell it again"}  # a follow-up may ask for the last result again
    assert copy_phrases([user, tool, {"role": "assistant", "content": "it's accra"}, again]) == [
        "spell it again", "ghana", "accra", "3", "x"]  # its numbers in digits, as a call writes them
    assert copy_phrases([{"role": "user", "content": "a sixteen minute timer"}]) == ["a sixteen minute timer", "16"]
    asked = [{"role": "user", "content": "a sixteen minute tea timer for the kids"}]
    assert copy_phrases(asked, ASKING_WORDS) == ["a sixteen", "tea", "for the kids", "16"]
    assert copy_phrases([{"role": "user", "content": " "}]) == copy_phrases([]) == []
    assert reply_copy_bias([user], lambda text: [ord(c) for c in text], follow=0.0) is None
    assert reply_copy_bias([user], lambda text: [ord(c) for c in text]).continuation([ord("z")]) == {ord("i")}
