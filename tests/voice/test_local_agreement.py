import pytest

from voice.local_agreement import LocalAgreement, normalize_word


def test_normalize_word() -> None:
    assert normalize_word("France?") == "france"
    assert normalize_word('"Hello,') == "hello"
    assert normalize_word("3.5") == "3.5"
    assert normalize_word("don't") == "don't"
    assert normalize_word("—") == ""


def test_words_are_confirmed_when_two_hypotheses_agree() -> None:
    agreement = LocalAgreement(2)
    first = agreement.update(["What"])
    assert first.confirmed == () and first.tentative == ("What",)

    second = agreement.update(["What", "is", "the", "cap?"])
    assert second.confirmed == ("What",)
    assert second.newly_confirmed == ("What",)
    assert second.tentative == ("is", "the", "cap?")

    third = agreement.update(["What", "is", "the", "capital", "of"])
    assert third.confirmed == ("What", "is", "the")
    assert third.newly_confirmed == ("is", "the")
    assert third.tentative == ("capital", "of")

    fourth = agreement.update(["What", "is", "the", "capital", "of", "France?"])
    assert fourth.confirmed == ("What", "is", "the", "capital", "of")
    assert fourth.tentative == ("France?",)


def test_case_and_punctuation_do_not_block_agreement() -> None:
    agreement = LocalAgreement(2)
    agreement.update(["the", "capital", "of", "france"])
    result = agreement.update(["The", "capital", "of", "France?"])
    assert result.confirmed == ("The", "capital", "of", "France?")  # the later spelling is kept


def test_confirmed_words_are_never_taken_back() -> None:
    agreement = LocalAgreement(2)
    agreement.update(["I", "want", "to"])
    agreement.update(["I", "want", "to", "go"])
    assert agreement.confirmed == ("I", "want", "to")
    # Whisper changes its mind about an earlier word: confirmed words stay, the rest is compared by position.
    revised = agreement.update(["I", "wanted", "to", "go", "home"])
    assert revised.confirmed == ("I", "want", "to", "go")
    assert revised.tentative == ("home",)


def test_disagreement_confirms_nothing_new() -> None:
    agreement = LocalAgreement(2)
    agreement.update(["recognize", "speech"])
    result = agreement.update(["wreck", "a", "nice", "beach"])
    assert result.confirmed == ()
    assert result.tentative == ("wreck", "a", "nice", "beach")


def test_punctuation_only_tokens_are_ignored() -> None:
    agreement = LocalAgreement(2)
    agreement.update(["well", "-", "maybe"])
    assert agreement.update(["well", "maybe", "not"]).confirmed == ("well", "maybe")


def test_n3_needs_three_agreeing_hypotheses() -> None:
    agreement = LocalAgreement(3)
    agreement.update(["hello"])
    assert agreement.update(["hello", "there"]).confirmed == ()
    assert agreement.update(["hello", "there"]).confirmed == ("hello",)
    assert agreement.update(["hello", "there"]).confirmed == ("hello", "there")


def test_reset_and_bad_n() -> None:
    agreement = LocalAgreement()
    agreement.update(["a", "b"])
    agreement.update(["a", "b"])
    agreement.reset()
    assert agreement.confirmed == ()
    assert agreement.update(["c"]).confirmed == ()
    with pytest.raises(ValueError, match="n >= 2"):
        LocalAgreement(1)
