"""The Realtime wire format on its own: session updates, and pipeline events as Realtime server events."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from voice.events import (
    AudioCleared,
    AudioOut,
    ReplyTextDelta,
    ResponseDone,
    ResponseOptions,
    SpeechStarted,
    SpeechStopped,
    TokenUsage,
    TranscriptCompleted,
    TranscriptDelta,
)
from voice.transports.realtime_events import (
    MAX_OUTPUT_TOKENS,
    PCMA_8K,
    PCMU_8K,
    ClientEventError,
    RealtimeEncoder,
    SessionConfig,
    apply_session_update,
    response_options,
)


def test_session_update_accepts_ga_and_beta_shapes() -> None:
    config = SessionConfig(id="s")
    ga = apply_session_update(config, {"type": "realtime", "instructions": "hi", "audio": {
        "input": {"format": {"type": "audio/pcmu"}, "turn_detection": {"type": "semantic_vad"}},
        "output": {"format": {"type": "audio/pcm", "rate": 24000}, "voice": "joe"}}})
    assert ga.input_format == PCMU_8K and ga.turn_detection == {"type": "server_vad"} and ga.instructions == "hi"
    beta = apply_session_update(config, {"output_audio_format": "g711_ulaw", "turn_detection": {"type": "server_vad"}})
    assert beta.output_format == PCMU_8K and beta.to_json()["audio"]["output"]["format"]["rate"] == 8000
    alaw = apply_session_update(config, {"input_audio_format": "g711_alaw",
                                         "audio": {"output": {"format": {"type": "audio/pcma", "rate": 8000}}}})
    assert alaw.input_format == alaw.output_format == PCMA_8K  # G.711 A-law had been refused
    assert apply_session_update(config, {"turn_detection": None}).turn_detection is None  # push to talk
    for bad in ({"audio": {"output": {"format": {"type": "audio/pcm", "rate": 16000}}}},
                {"turn_detection": {"type": "push_to_talk"}}, {"instructions": 5},
                "nope"):
        with pytest.raises(ClientEventError):
            apply_session_update(config, bad)
    # a format's field this server does not read had been ignored: stereo would have been taken for mono
    stereo = {"audio": {"input": {"format": {"type": "audio/pcm", "rate": 24000, "channels": 2}}}}
    with pytest.raises(ClientEventError, match="session.audio.input.format.channels") as refused:
        apply_session_update(config, stereo)
    assert refused.value.code == "unknown_parameter"


def test_transcript_deltas_only_append_and_carry_the_tentative_tail() -> None:
    enc = RealtimeEncoder(SessionConfig(id="s"), audio_in_events=True, t0=0.0)
    [started] = enc.encode(SpeechStarted(4, at=9.0, audio_at=1.5))
    first = enc.encode(TranscriptDelta(4, "what is", "the cap"))[0]
    second = enc.encode(TranscriptDelta(4, "what is the", "capital"))[0]
    assert started["audio_start_ms"] == 1500 and first["item_id"] == started["item_id"] == second["item_id"]
    assert (first["delta"], first["tentative"]) == ("what is", "the cap")
    assert (second["delta"], second["tentative"]) == (" the", "capital")


def test_a_response_opens_once_streams_audio_and_closes_with_its_trace() -> None:
    enc = RealtimeEncoder(SessionConfig(id="s"), audio_in_events=True, t0=0.0)
    tone = (5000 * np.sin(np.arange(2400) / 3)).astype(np.int16)
    out = enc.encode(ReplyTextDelta(2, "Paris."))
    out += enc.encode(AudioOut(2, tone, 24000))
    out += enc.encode(ResponseDone(2, "Paris.", False, {"voice_to_voice_ms": 321.0}))
    kinds = [kind for i, kind in enumerate(e["type"] for e in out) if i == 0 or kind != out[i - 1]["type"]]
    assert kinds == [  # the GA protocol's order: the item and its content part open and close around the deltas
        "response.created", "response.output_item.added", "conversation.item.added", "response.content_part.added",
        "response.output_audio_transcript.delta", "response.output_audio.delta", "response.output_audio.done",
        "response.output_audio_transcript.done", "response.content_part.done", "response.output_item.done",
        "conversation.item.done", "response.done"]
    item_done = next(e for e in out if e["type"] == "response.output_item.done")["item"]
    assert item_done == out[-1]["response"]["output"][0] and item_done["content"][0]["transcript"] == "Paris."
    assert next(e for e in out if e["type"] == "conversation.item.added")["item"]["id"] == item_done["id"]
    assert out[-1]["response"]["status"] == "completed" and out[-1]["trace"] == {"voice_to_voice_ms": 321.0}
    assert len({e["event_id"] for e in out}) == len(out)
    assert out[-1]["response"]["usage"] is None  # nobody counted
    cut = enc.encode(ResponseDone(4, "Par", False, reason="max_output_tokens", usage=TokenUsage(40, 2)))[-1]["response"]
    assert cut["usage"] == {"total_tokens": 42, "input_tokens": 40, "output_tokens": 2,
                            "input_token_details": {"text_tokens": 40, "audio_tokens": 0},
                            "output_token_details": {"text_tokens": 2, "audio_tokens": 0}}
    assert (cut["status"], cut["output"][0]["status"]) == ("incomplete", "incomplete")
    assert cut["status_details"] == {"type": "incomplete", "reason": "max_output_tokens"}
    stopped = enc.encode(ResponseDone(5, "", True, reason="turn_detected"))[-1]["response"]
    assert stopped["status_details"] == {"type": "cancelled", "reason": "turn_detected"}
    assert "status_details" not in out[-1]["response"]
    # Over WebRTC the server owns playback: audio stays off the events, a barge-in is reported.
    rtc = RealtimeEncoder(SessionConfig(id="s"), audio_in_events=False, t0=0.0)
    opened = [e["type"] for e in rtc.encode(AudioOut(3, tone, 24000))]
    assert opened[0] == "response.created" and "response.output_audio.delta" not in opened
    assert rtc.encode(AudioCleared(3))[0]["type"] == "output_audio_buffer.cleared"


def test_a_response_is_active_from_its_request_to_its_done() -> None:
    """The window in which the session refuses another response.create."""
    enc = RealtimeEncoder(SessionConfig(id="s"), audio_in_events=True, t0=0.0)
    assert not enc.responding
    enc.ask_response()  # accepted: active before the pipeline's first event announces it
    assert enc.responding
    assert enc.encode(ReplyTextDelta(2, "Hi."))[0]["type"] == "response.created" and enc.responding
    enc.encode(ResponseDone(2, "Hi.", False))
    assert not enc.responding
    enc.encode(ReplyTextDelta(3, "Hello."))  # a response the server started on its own (the caller's turn)
    assert enc.responding


def test_audio_of_a_finished_reply_resumed_after_a_noise_reopens_no_response() -> None:
    """A finished reply still playing out, paused by a cough and resumed, sends audio after its response.done: it
    had sent a second response.created and no response.done, and the session refused every later response.create."""
    tone = (5000 * np.sin(np.arange(2400) / 3)).astype(np.int16)
    for audio_in_events in (False, True):
        enc = RealtimeEncoder(SessionConfig(id="s"), audio_in_events=audio_in_events, t0=0.0)
        out = [e["type"] for ev in (ReplyTextDelta(2, "Hi."), AudioOut(2, tone, 24000), ResponseDone(2, "Hi.", False),
                                    AudioCleared(2), AudioOut(2, tone, 24000)) for e in enc.encode(ev)]
        assert out.count("response.created") == out.count("response.done") == 1, out
        assert "response.output_audio.delta" not in out[out.index("response.done"):], out
        assert not enc.responding


def test_a_setting_given_in_both_its_ga_and_beta_spellings_must_agree() -> None:
    """The nested GA spelling had silently won over a top-level beta one (never even checked), or the other way
    round for audio formats."""
    config = SessionConfig(id="s")
    both = {"audio": {"input": {"format": {"type": "audio/pcmu"}}}, "input_audio_format": "g711_ulaw"}
    assert apply_session_update(config, both).input_format == PCMU_8K
    for update, param in [
        ({"audio": {"input": {"turn_detection": {"type": "server_vad"}}},
          "turn_detection": {"type": "none", "bogus": 1}}, "session.turn_detection"),
        ({"audio": {"input": {"format": {"type": "audio/pcm", "rate": 24000}}}, "input_audio_format": "g711_ulaw"},
         "session.input_audio_format"),
        ({"audio": {"output": {"voice": "alloy"}}, "voice": "echo"}, "session.voice"),
        ({"max_output_tokens": 5, "max_response_output_tokens": "inf"}, "session.max_response_output_tokens"),
    ]:
        with pytest.raises(ClientEventError) as refused:
            apply_session_update(config, update)
        assert refused.value.param == param, update


def test_session_update_refuses_what_it_would_acknowledge_and_ignore() -> None:
    """output_modalities ["text"] had been answered with session.updated (and audio replies); every field is now
    applied, accepted only where it asks for what happens anyway, or refused naming it."""
    config = SessionConfig(id="s")
    same = apply_session_update(config, {
        "type": "realtime", "model": "gpt-realtime", "output_modalities": ["audio"], "modalities": ["text", "audio"],
        "tools": [], "tool_choice": "auto", "input_audio_transcription": {"model": "whisper-1"},
        "audio": {"input": {"noise_reduction": None, "transcription": {"model": "x", "language": "en"},
                            "turn_detection": {"type": "server_vad", "create_response": True, "threshold": None}},
                  "output": {"speed": 1.0, "voice": "alloy"}}})
    assert same == replace(config, voice="alloy")
    refusals = [
        ({"output_modalities": ["text"]}, "unsupported_value", "session.output_modalities"),
        ({"modalities": ["text"]}, "unsupported_value", "session.modalities"),
        ({"audio": {"output": {"speed": 1.5}}}, "unsupported_value", "session.audio.output.speed"),
        ({"audio": {"input": {"transcription": {"language": "fr"}}}}, "unsupported_value",
         "session.audio.input.transcription"),
        ({"audio": {"input": {"turn_detection": {"type": "server_vad", "silence_duration_ms": 50}}}},
         "invalid_request", "session.audio.input.turn_detection.silence_duration_ms"),
        ({"turn_detection": {"type": "server_vad", "threshold": "high"}}, "invalid_request",
         "session.turn_detection.threshold"),
        ({"turn_detection": {"type": "server_vad", "idle_timeout_ms": 5000}}, "unsupported_value",
         "session.turn_detection.idle_timeout_ms"),
        ({"turn_detection": {"type": "server_vad", "create_response": False}}, "unsupported_value",
         "session.turn_detection.create_response"),
        ({"tools": [{"type": "function", "name": "f"}]}, "unsupported_value", "session.tools"),
        ({"model": 5}, "unsupported_value", "session.model"),
        ({"temperature": 0.6}, "unknown_parameter", "session.temperature"),
        ({"audio": {"output": {"pitch": 2}}}, "unknown_parameter", "session.audio.output.pitch"),
        ({"audio": []}, "invalid_request", "session.audio"),
    ]
    for update, code, param in refusals:
        with pytest.raises(ClientEventError) as refused:
            apply_session_update(config, {"instructions": "applied only with the rest", **update})
        assert (refused.value.code, refused.value.param) == (code, param), update
        assert param in refused.value.message
    with pytest.raises(ClientEventError, match=r"output_modalities can only be \['audio'\]"):
        apply_session_update(config, {"output_modalities": ["text"]})


def test_response_options_are_checked_not_ignored() -> None:
    """response.create's 'response' had been ignored whole; what the session cannot do for it is refused, and
    its own token cap and instructions are read (instructions other than the session's had been refused)."""
    for fine, options in ((None, ResponseOptions()), ({}, ResponseOptions()), ({"max_output_tokens": 7}, ResponseOptions(7)),
                          ({"max_response_output_tokens": 7, "instructions": None}, ResponseOptions(7)),
                          ({"instructions": "be verbose"}, ResponseOptions(instructions="be verbose")),
                          ({"output_modalities": ["audio"], "conversation": "auto", "instructions": "",
                            "max_output_tokens": "inf", "tool_choice": "none"}, ResponseOptions(MAX_OUTPUT_TOKENS, ""))):
        assert response_options(fine) == options, fine
    refusals = [
        ("nope", "invalid_request", "response"),
        ({"instructions": 5}, "invalid_request", "response.instructions"),
        ({"modalities": ["text"], "instructions": 5}, "unsupported_value", "response.modalities"),
        ({"output_modalities": ["text"]}, "unsupported_value", "response.output_modalities"),
        ({"conversation": "none"}, "unsupported_value", "response.conversation"),
        ({"input": []}, "unknown_parameter", "response.input"),
        ({"max_output_tokens": 0}, "invalid_request", "response.max_output_tokens"),
        ({"max_output_tokens": 5, "max_response_output_tokens": 6}, "invalid_request",
         "response.max_response_output_tokens"),
    ]
    for response, code, param in refusals:
        with pytest.raises(ClientEventError) as refused:
            response_options(response)
        assert (refused.value.code, refused.value.param) == (code, param), response


def test_each_event_about_a_spoken_item_names_the_item_its_speech_started_announced() -> None:
    """A transcript had carried the latest unclaimed item: the second utterance's speech_started, when it came
    before the first one's transcript. Each item's committed, transcription and conversation.item events name
    the item of its own speech_started, and the item order (previous_item_id) follows the commits."""
    enc = RealtimeEncoder(SessionConfig(id="s"), audio_in_events=True, t0=0.0)
    out = [e for ev in (SpeechStarted(1, 0.5, 0.5), SpeechStopped(1, 1.0, 1.0), SpeechStarted(2, 1.2, 1.2),
                        TranscriptCompleted(1, "hi."), SpeechStopped(2, 2.0, 2.0), TranscriptCompleted(2, "bye."))
           for e in enc.encode(ev)]
    first, second = [e["item_id"] for e in out if e["type"] == "input_audio_buffer.speech_started"]
    assert first != second
    assert [(e["item_id"], e["transcript"]) for e in out
            if e["type"] == "conversation.item.input_audio_transcription.completed"] == [(first, "hi."), (second, "bye.")]
    assert [(e["item_id"], e["previous_item_id"]) for e in out if e["type"] == "input_audio_buffer.committed"] == [
        (first, None), (second, first)]
    assert [(e["item"]["id"], e["previous_item_id"]) for e in out if e["type"] == "conversation.item.added"] == [
        (first, None), (second, first)]
    assert [e["audio_end_ms"] for e in out if e["type"] == "input_audio_buffer.speech_stopped"] == [1000, 2000]
