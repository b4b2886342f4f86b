"""The hallucination guard's decisions on Whisper's figures (the real-audio cases are in test_speech_models)."""

import pytest

from voice.asr import AsrConfig, collapse_repeats, guard_reason, normalize_text

CONFIG = AsrConfig()


@pytest.mark.parametrize(
    ("text", "no_speech", "logprob", "reason"),
    [
        ("What is the capital of France?", 0.01, -0.05, None),
        ("Thank you.", 0.05, -0.1, None),  # said clearly: kept
        ("Thank you.", 0.45, -0.3, "phantom"),  # Whisper unsure whether anyone spoke
        ("Thanks for watching!", 0.1, -0.8, "phantom"),
        (" you", 0.2, -0.4, None),
        ("you", 0.35, -0.4, "phantom"),
        ("Subtitles by the Amara.org community", 0.01, -0.1, "phantom"),
        ("Paris", 0.7, -0.2, "no_speech"),
        (" .", 0.2, -1.0, "empty"),
        ("", 1.0, -1.0, "empty"),
    ],
)
def test_guard(text: str, no_speech: float, logprob: float, reason: str | None) -> None:
    assert guard_reason(text, no_speech, logprob, CONFIG) == reason


def test_normalize_text() -> None:
    assert normalize_text("  Thank you, Doctor! ") == "thank you doctor"
    assert normalize_text("It's 3 o'clock.") == "it's 3 o'clock"


@pytest.mark.parametrize(("heard", "kept"), [
    ("How are you doing today? " * 20, "How are you doing today?"),  # a decoding loop to the token cap
    ("Stop. stop! stop. What time is it? What time is it? What time is it", "Stop. What time is it?"),
    ("Stop. Stop. What time is it?", "Stop. Stop. What time is it?"),  # said twice: a caller, as heard
    ("What is 3.5 times 2? It is 7.", "What is 3.5 times 2? It is 7."),  # nothing repeated: as heard
    ("", ""),
])
def test_a_sentence_whisper_repeats_in_a_loop_is_kept_once(heard: str, kept: str) -> None:
    assert collapse_repeats(heard) == kept
