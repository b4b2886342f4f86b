import pytest

from voice.chunker import ChunkerConfig, ClauseChunker


def chunk_all(pieces: list[str], config: ChunkerConfig | None = None) -> list[list[str]]:
    """What each push released, then what flush released."""
    chunker = ClauseChunker(config)
    return [chunker.push(p) for p in pieces] + [chunker.flush()]


def chunk_text(text: str, config: ChunkerConfig | None = None) -> list[str]:
    """Feed ``text`` one character at a time (the worst case for boundary detection)."""
    return [clause for released in chunk_all(list(text), config) for clause in released]


def test_sentence_is_released_once_the_next_character_confirms_it() -> None:
    chunker = ClauseChunker()
    assert chunker.push("The capital of France is Paris.") == []  # "." could still become "Paris.5"
    assert chunker.push(" It") == ["The capital of France is Paris."]
    assert chunker.flush() == ["It"]


def test_question_and_exclamation_marks() -> None:
    assert chunk_text("Really? Yes! Great.") == ["Really?", "Yes!", "Great."]


def test_short_first_fragment_then_longer_clauses() -> None:
    text = "Sure thing, the capital is Paris, which sits on the Seine, and it is lovely."
    assert chunk_text(text) == [
        "Sure thing,",  # first fragment: two words are enough
        "the capital is Paris, which sits on the Seine,",  # later: a comma needs six words
        "and it is lovely.",
    ]


def test_single_word_before_a_comma_waits() -> None:
    assert chunk_text("Well, it depends on the day.") == ["Well, it depends on the day."]


@pytest.mark.parametrize(
    "text",
    [
        "Pi is about 3.14159 and e is 2.718 today.",
        "It costs 1,000 dollars or 1,500.50 euros.",
        "Dr. Smith met Mr. Jones and Mrs. Brown at St. Mary's.",
        "Fruits, e.g. apples, and tools, i.e. hammers, are fine.",
        "The U.S. Army and the U.K. Navy met at 9 a.m. sharp.",
        "J. R. R. Tolkien wrote it.",
        "The meeting is at 3:30 in room 4.",
    ],
)
def test_numbers_and_abbreviations_do_not_split(text: str) -> None:
    assert chunk_text(text, ChunkerConfig(first_min_words=30, clause_min_words=30)) == [text]


def test_closing_quotes_and_brackets_stay_with_their_sentence() -> None:
    assert chunk_text('He said "hello." Then (briefly) he left.) Ok.') == [
        'He said "hello."',
        "Then (briefly) he left.)",
        "Ok.",
    ]


def test_ellipsis_and_semicolon_and_colon() -> None:
    assert chunk_text("Hmm... let me think; here it is: forty two.") == [
        "Hmm...",
        "let me think; here it is:",  # after the first clause, a clause needs six words
        "forty two.",
    ]


def test_newlines_separate_list_items_and_bullets_are_not_spoken() -> None:
    assert chunk_text("Two options:\n- the bus\n• the train") == ["Two options:", "the bus", "the train"]


def test_markdown_is_not_spoken_and_empty_pieces_are_dropped() -> None:
    assert chunk_text("**Paris** is the `capital`. ... ") == ["Paris is the capital."]
    assert chunk_text("## Steps\n1. Boil _some_ water.\n2. Add the pasta.") == [
        "Steps", "1. Boil some water.", "2. Add the pasta."]


def test_the_tools_wording_is_given_as_piper_reads_it_right() -> None:
    assert chunk_text("it's seven am. The meeting is at 10 PM, I am told.") == [
        "it's seven a.m.", "The meeting is at 10 p.m.,", "I am told."]
    assert chunk_text("it's two twenty-five pm in tokyo.") == ["it's two twenty-five p.m. in tokyo."]
    spelled = chunk_text("it's spelled m, a, r, y / j, a, n, e.")  # in clauses, at its commas
    assert " ".join(spelled) == "it's spelled m, a, r, y. j, a, n, e."


def test_symbols_that_are_text_not_markup_are_kept() -> None:
    assert chunk_text("Well, 12 * 4 is 48, and 3×3 is 9.") == [
        "Well, 12 times 4 is 48,", "and 3 times 3 is 9."]
    assert chunk_text("Name it snake_case in C# or *args in Python.") == [
        "Name it snake_case in C# or *args in Python."]


def test_long_runs_without_punctuation_are_cut_at_a_word() -> None:
    text = " ".join(f"w{i}" for i in range(25))
    released = chunk_text(text, ChunkerConfig(max_words=10))
    assert released == [
        " ".join(f"w{i}" for i in range(0, 10)),
        " ".join(f"w{i}" for i in range(10, 20)),
        " ".join(f"w{i}" for i in range(20, 25)),
    ]


def test_pieces_of_any_size_give_the_same_clauses() -> None:
    text = "Hi there, Dr. Lee. The total is 3.5 kg, or 3,500 g, roughly. Anything else? No."
    by_char = chunk_text(text)
    whole = [c for released in chunk_all([text]) for c in released]
    words = [c for released in chunk_all([w + " " for w in text.split()]) for c in released]
    assert by_char == whole == words
    assert " ".join(by_char) == text


def test_clauses_are_released_as_soon_as_complete() -> None:
    released = chunk_all(["Sure, here", " it is, the answer", " is 42. And", " more"])
    assert released == [[], ["Sure, here it is,"], ["the answer is 42."], [], ["And more"]]


def test_bad_config() -> None:
    with pytest.raises(ValueError, match=">= 1"):
        ChunkerConfig(max_words=0)
