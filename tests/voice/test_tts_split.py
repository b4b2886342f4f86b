"""How long text is cut before Piper, which renders each sentence in one model call whose memory grows with its
audio: only where a piece does not fit, after a sentence's end, else at whitespace, else between characters."""

import pytest

from voice.tts import split_long


def _shorter_than(n: int):
    return lambda text: len(text) < n


@pytest.mark.parametrize(("text", "limit", "pieces"), [
    ("Short enough.", 20, ["Short enough."]),
    # a sentence's end is taken over a space nearer the middle
    ("One two three. Four five six seven eight nine.", 40, ["One two three. ", "Four five six seven eight nine."]),
    ("alpha beta gamma delta", 15, ["alpha beta ", "gamma delta"]),  # no sentence end: at whitespace
    ("你好你好你好你好", 3, ["你好", "你好", "你好", "你好"]),  # neither: between characters
    ("你好。再见你好再见", 8, ["你好。", "再见你好再见"]),  # a full stop needs no space after it
    ("pi is 3.14159 exactly", 12, ["pi is ", "3.14159 ", "exactly"]),  # a decimal point is not a sentence end
])
def test_split_long(text, limit, pieces):
    assert split_long(text, _shorter_than(limit)) == pieces


def test_every_piece_fits_and_nothing_is_lost():
    text = "word " * 97 + "x" * 60 + ". Then more words follow here"
    pieces = split_long(text, _shorter_than(25))
    assert "".join(pieces) == text
    assert all(len(piece) < 25 for piece in pieces)
