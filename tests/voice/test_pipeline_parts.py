"""The pipeline's pure parts: tool-call splitting, the spoken log behind barge-in history, configs."""

from __future__ import annotations

import pytest

from dlm.tools.calls import ToolCallSplitter, parse_tool_call
from voice.config import ConfigError, load_config
from voice.trace import TurnTrace
from voice.tts_stage import SpokenLog
from voice.turn import Reply


def split(pieces: list[str]) -> tuple[str, list[str]]:
    splitter, spoken, calls = ToolCallSplitter(), [], []
    for piece in pieces:
        text, call = splitter.push(piece)
        spoken.append(text)
        if call is not None:
            calls.append(call)
    tail, unfinished = splitter.flush()
    spoken.append(tail)
    if unfinished is not None:
        calls.append(unfinished)
    return "".join(spoken), calls


def test_tool_call_is_never_spoken_even_when_its_tag_arrives_in_pieces() -> None:
    spoken, calls = split(["Let me check. <to", "ol_call>{\"name\": \"calculator\", ", "\"arguments\": {}}</tool", "_call>"])
    assert spoken == "Let me check. "
    assert calls == ['{"name": "calculator", "arguments": {}}']


def test_a_call_the_reply_ended_inside_is_kept_unless_the_token_cap_cut_it() -> None:
    for opening in ("sure <tool_call>", ""):  # tagged, and bare JSON
        pieces = [opening, '{"name": "country_capital", "arguments": {"country": "pretgaria"}']
        for cut, kept in ((False, [pieces[1]]), (True, [])):
            splitter = ToolCallSplitter()
            spoken = "".join(splitter.push(piece)[0] for piece in pieces)
            tail, unfinished = splitter.flush(cut)
            assert spoken + tail == opening.removesuffix("<tool_call>")
            assert ([] if unfinished is None else [unfinished]) == kept


def test_text_that_only_looks_like_a_tag_start_is_released() -> None:
    assert split(["one <", "two"]) == ("one <two", [])
    assert split(["ends with <to"]) == ("ends with <to", [])


def test_a_call_whose_tags_were_dropped_is_recognised_by_its_leading_brace() -> None:
    spoken, calls = split(['  {"name": "get_time", "argu', 'ments": {"timezone": "a}b\\"c"}}'])
    assert spoken == ""
    assert calls == ['{"name": "get_time", "arguments": {"timezone": "a}b\\"c"}}']
    assert parse_tool_call(calls[0]) == ("get_time", {"timezone": 'a}b"c'})


def test_a_call_the_stream_ends_inside_is_handed_over_unspoken() -> None:
    """The model may stop inside its call (a closing quote written twice leaves the JSON open): the call is
    still never spoken, and its body goes to the caller, which grounds it like any other call."""
    assert split(['Sure. <tool_call>{"name": "calc']) == ("Sure. ", ['{"name": "calc'])
    assert split(['{"name": "spell_word", "arguments": {"word": "teacher"}"}}']) == (
        "", ['{"name": "spell_word", "arguments": {"word": "teacher"}"}}'])
    assert split(["no call here <to"]) == ("no call here <to", [])


@pytest.mark.parametrize("body", ["not json", '{"arguments": {}}', '{"name": "x", "arguments": [1]}'])
def test_malformed_tool_calls_raise_with_a_reason(body: str) -> None:
    with pytest.raises(ValueError, match="tool call"):
        parse_tool_call(body)


def test_spoken_log_maps_played_samples_back_to_words() -> None:
    log = SpokenLog()
    log.add("The answer is forty-eight.", 1000)
    log.add("Anything else I can do?", 1000)
    assert log.heard(0) == ""
    assert log.heard(1000) == "The answer is forty-eight."
    assert log.heard(1500) == "The answer is forty-eight. Anything else"
    assert log.heard(5000) == "The answer is forty-eight. Anything else I can do?"


def test_rewind_returns_the_clauses_to_speak_again_and_keeps_counting_after_the_played_samples() -> None:
    log = SpokenLog()
    for clause in ("one two.", "three four.", "five six."):
        log.add(clause, 100)
    assert log.rewind(150) == ["three four.", "five six."]
    assert log.total == 150
    log.add("three four.", 100)
    assert log.heard(250) == "one two. three four."


def test_profiles_override_the_defaults() -> None:
    phone = load_config("phone")
    assert phone.name == "phone" and phone.output_rate == 8000
    assert phone.vad.aggressiveness == 3
    assert phone.asr == load_config("default").asr
    assert load_config("gpu").lm.device == "cuda" and load_config("default").lm.device == "auto"
    assert load_config("cpu-demo").lm.checkpoint == "dlm/assets/demo"


def test_config_errors_name_the_problem(tmp_path) -> None:
    with pytest.raises(ConfigError, match="no config named 'nope'; voice profiles: cpu-demo, default, gpu, phone$"):
        load_config("nope")  # the training configs beside them had been listed as profiles
    with pytest.raises(ConfigError, match=r"demo.toml is a training config \(python -m dlm.train --config "):
        load_config("demo")  # had been "unknown setting(s) curriculum, data, ..."
    bad = tmp_path / "bad.toml"
    bad.write_text("[vad]\nhangover = 300\n")
    with pytest.raises(ConfigError, match=r"vad: unknown setting\(s\) hangover"):
        load_config(str(bad))
    bad.write_text('[turn]\nbarge_in = "always"\n')
    with pytest.raises(ConfigError, match="barge_in.*'always' is not one of"):
        load_config(str(bad))
    bad.write_text("[vad]\nhangover_ms = \"long\"\n")
    with pytest.raises(ConfigError, match="expected int"):
        load_config(str(bad))
    bad.write_text("[vad]\naggressiveness = 7\n")
    with pytest.raises(ConfigError, match="aggressiveness must be 0..3"):
        load_config(str(bad))
    bad.write_text("[vad\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(str(bad))


@pytest.mark.parametrize(("section", "setting", "message"), [
    # each had loaded: every reply then failed, start-up crashed with a traceback, or every reply was silent
    ("lm", 'effort = "extreme"', "effort must be one of low, medium, high"),
    ("lm", "threshold = 2.0", r"threshold must be in \[0, 1\]"),
    ("lm", "max_new_tokens = 0", "max_new_tokens must be at least 1"),
    ("lm", "threads = 0", "threads must be at least 1"),
    ("lm", "max_tool_rounds = -1", "max_tool_rounds must be at least 0"),
    ("lm", "temperature = -1", "temperature must be a number >= 0"),
    ("tts", "volume = nan", "volume must be a number >= 0"),
    ("tts", "length_scale = 0", "length_scale must be above 0"),
])
def test_out_of_range_settings_are_refused_when_the_config_loads(tmp_path, section: str, setting: str,
                                                                  message: str) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text(f"[{section}]\n{setting}\n")
    with pytest.raises(ConfigError, match=f"{section}: {message}"):
        load_config(str(bad))
    for name in ("default", "cpu-demo", "gpu", "phone"):  # the shipped profiles load
        load_config(name)


def test_a_tool_result_offers_its_spoken_words_as_the_fallback_reply() -> None:
    from dlm.tools.calls import spoken_result

    assert spoken_result('{"result": 48, "spoken": "forty-eight"}') == "forty-eight"
    assert spoken_result('{"capital": "paris"}') is None
    assert spoken_result('{"spoken": "  "}') is None
    assert spoken_result("not json") is None
    assert spoken_result("[1, 2]") is None


def test_voice_benchmark_report_compares_each_variant_with_the_full_design() -> None:
    from latency_bench.voice_bench import format_report, report, stacked_bars_svg

    def trace(v2v: float, reply: str = "Paris is the capital of France.", expected: tuple[str, ...] = ("paris",)) -> dict:
        return {"voice_to_voice_ms": v2v, "durations_ms": {"asr": v2v / 2, "lm": 10.0, "tts": v2v / 2 - 10, "output": 0.0},
                "reply": reply, "expected": expected}

    rep = report({"full": [trace(400), trace(600, "it's noon.", ())],
                  "baseline": [trace(800, "iis is the capital of france."), trace(1200, "it's noon.", ())]})
    assert rep["voice_to_voice_ratio"] == {"baseline/full": {"p50": 2.0, "p95": 2.0}}
    assert rep["right_replies"] == {"full": {"right": 1, "scored": 1}, "baseline": {"right": 0, "scored": 1}}
    text = format_report(rep)
    assert "voice-to-voice baseline/full: p50 x2.0" in text and "baseline: 2 turns, 0 of 1 replies right" in text
    svg = stacked_bars_svg(rep)
    assert svg.startswith("<svg") and svg.count("<rect") == 8 + 4  # 4 stages x 2 variants, 4 legend keys


def test_a_truncated_reply_is_no_longer_audible_and_later_reports_do_not_undo_it() -> None:
    """A truncated reply had stayed "audible" until the next one (its played count stays below its total), so with
    barge_in = ignore_while_speaking the caller's speech was ignored; and a later playback report's max() had
    undone the truncation."""
    reply = Reply(1, TurnTrace(1), 24000)
    reply.log.add("twelve times four is forty-eight.", 24000)
    reply.report_played(6000)
    assert reply.audible(), "a quarter played: still talking"
    reply.report_played(3000)
    assert reply.played() == 6000, "reports are cumulative"
    reply.report_played(6000, truncated=True)
    assert not reply.audible()
    reply.report_played(18000)
    assert reply.played() == 6000 and reply.log.heard(reply.played()) == "twelve"
