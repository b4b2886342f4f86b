"""The OpenAI Realtime API wire format, apart from any transport.

Both the ``/v1/realtime`` websocket and the WebRTC ``oai-events`` data channel speak it: client events are
parsed and validated here (a bad one becomes an ``error`` event, never an exception that ends a session),
and pipeline events are turned into the server events an existing Realtime client expects. Names follow
the GA protocol (``response.output_audio.delta``, ``audio.input.format`` ...); the beta session fields
(``input_audio_format: "pcm16"``) are accepted too. A session or response option is applied, accepted where it
asks for what happens anyway, or refused naming the field: none is acknowledged and then ignored.

Extensions, ignored by standard clients: a transcription delta carries ``tentative`` (the words the
recogniser may still change) and ``response.done`` carries ``trace`` (the turn's latency breakdown).
"""

from __future__ import annotations

import base64
import binascii
import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from dlm.api.json_text import JsonTextError, loads_client_json
from voice.audio import (
    AudioFormatError,
    Resampler,
    alaw_decode,
    alaw_encode,
    mulaw_decode,
    mulaw_encode,
    pcm_from_bytes,
)
from voice.events import (
    SESSION_DEFAULTS,
    AudioCleared,
    AudioOut,
    PipelineError,
    PipelineEvent,
    ReplyTextDelta,
    ResponseDone,
    ResponseOptions,
    SpeechStarted,
    SpeechStopped,
    TokenUsage,
    TranscriptCompleted,
    TranscriptDelta,
)

CLIENT_EVENTS = frozenset({
    "session.update",
    "input_audio_buffer.append",
    "input_audio_buffer.commit",
    "input_audio_buffer.clear",
    "conversation.item.create",
    "conversation.item.truncate",
    "response.create",
    "response.cancel",
    "output_audio_buffer.clear",
})

MODEL_NAME = "dlm-voice"


class ClientEventError(Exception):
    """A client event the server refuses; becomes an ``error`` event and the session lives on."""

    def __init__(self, message: str, code: str = "invalid_request", param: str | None = None,
                 event_id: str | None = None) -> None:
        super().__init__(message)
        self.message, self.code, self.param, self.event_id = message, code, param, event_id


# ---------------------------------------------------------------------------------------------- formats

def _pcm16_bytes(pcm: np.ndarray) -> bytes:
    return pcm.astype("<i2").tobytes()


_CODECS: dict[str, tuple[Callable[[bytes], np.ndarray], Callable[[np.ndarray], bytes]]] = {
    "audio/pcm": (pcm_from_bytes, _pcm16_bytes), "audio/pcmu": (mulaw_decode, mulaw_encode),
    "audio/pcma": (alaw_decode, alaw_encode),
}


@dataclass(frozen=True)
class AudioFormat:
    """An audio format on the wire: 16-bit PCM (``audio/pcm``, 24 kHz in the protocol), or G.711 mu-law
    (``audio/pcmu``) or A-law (``audio/pcma``) at 8 kHz."""

    kind: str  # a key of _CODECS
    rate: int

    def decode(self, data: bytes) -> np.ndarray:
        try:
            return _CODECS[self.kind][0](data)
        except AudioFormatError as err:
            raise ClientEventError(str(err), code="invalid_audio", param="audio") from None

    def encode(self, pcm: np.ndarray) -> bytes:
        return _CODECS[self.kind][1](pcm)

    def to_json(self) -> dict[str, Any]:
        return {"type": self.kind, "rate": self.rate}


PCM16_24K = AudioFormat("audio/pcm", 24000)
PCMU_8K = AudioFormat("audio/pcmu", 8000)
PCMA_8K = AudioFormat("audio/pcma", 8000)
_BETA_FORMATS = {"pcm16": PCM16_24K, "g711_ulaw": PCMU_8K, "g711_alaw": PCMA_8K}
_GA_FORMATS = {fmt.kind: fmt for fmt in _BETA_FORMATS.values()}


def parse_audio_format(value: Any, param: str) -> AudioFormat:
    """A GA ``{"type": "audio/pcm", "rate": 24000}`` object or a beta name (``"pcm16"``, ``"g711_ulaw"``,
    ``"g711_alaw"``)."""
    if isinstance(value, str):
        if value in _BETA_FORMATS:
            return _BETA_FORMATS[value]
        raise ClientEventError(f"unsupported audio format {value!r}; use 'pcm16', 'g711_ulaw' or 'g711_alaw'",
                               code="invalid_audio_format", param=param)
    if not isinstance(value, dict):
        raise ClientEventError("audio format must be an object like {'type': 'audio/pcm', 'rate': 24000}",
                               code="invalid_audio_format", param=param)
    check_fields(value, AUDIO_FORMAT_FIELDS, param)  # {"rate": 24000, "channels": 2} had been read as mono
    fmt = _GA_FORMATS.get(value.get("type"))
    if fmt is not None and value.get("rate") in (None, fmt.rate):
        return fmt
    raise ClientEventError(
        f"unsupported audio format {value!r}; use audio/pcm at 24000 Hz, or audio/pcmu or audio/pcma at 8000 Hz",
        code="invalid_audio_format", param=param)


# ---------------------------------------------------------------------------------------------- session

@dataclass(frozen=True)
class SessionConfig:
    """What a client may set with ``session.update``; everything else in the session is fixed."""

    id: str
    input_format: AudioFormat = PCM16_24K
    output_format: AudioFormat = PCM16_24K
    instructions: str = ""
    voice: str = "joe"
    turn_detection: dict[str, Any] | None = field(default_factory=lambda: {"type": "server_vad"})
    """None: push to talk, the client commits each turn and asks for its response."""
    max_output_tokens: int | None = None  # a cap on each reply's tokens; None: "inf", the server's own cap

    def to_json(self) -> dict[str, Any]:
        """The GA session object sent in ``session.created`` / ``session.updated``."""
        return {
            "type": "realtime", "object": "realtime.session", "id": self.id, "model": MODEL_NAME,
            "output_modalities": ["audio"], "instructions": self.instructions,
            "max_output_tokens": "inf" if self.max_output_tokens is None else self.max_output_tokens,
            "audio": {
                "input": {"format": self.input_format.to_json(), "turn_detection": self.turn_detection,
                          "transcription": {"model": "whisper-tiny.en"}},
                "output": {"format": self.output_format.to_json(), "voice": self.voice},
            },
        }


@dataclass(frozen=True)
class Fixed:
    """A setting this server does not change: accepted only when it asks for what happens anyway, so that no
    request is acknowledged and then ignored."""

    accepts: Callable[[Any], bool]
    supported: str  # what a client asking for something else is told to use


APPLIED = None
"""A field's rule when the code beside the table applies it (or validates it further itself)."""
Rules = Mapping[str, Fixed | None]

SPOKEN = Fixed(lambda v: isinstance(v, list) and all(isinstance(m, str) for m in v) and "audio" in v
               and set(v) <= {"audio", "text"},
               "['audio']: every reply is spoken, its transcript comes with it (text-only replies are not supported)")
NO_TOOLS = Fixed(lambda v: v == [], "[]: client function tools are not supported")
TOOL_CHOICE = Fixed(lambda v: v in ("auto", "none"), "'auto' or 'none' (no client tools)")
SPEED = Fixed(lambda v: v == 1 and not isinstance(v, bool), "1.0, the bundled Piper voice's only speed")
NO_NOISE_REDUCTION = Fixed(lambda v: v is None, "null: no noise reduction is applied")
TRANSCRIPTION = Fixed(lambda v: isinstance(v, dict) and set(v) <= {"model", "language", "prompt"}
                      and v.get("language") in (None, "en") and not v.get("prompt"),
                      "an object without prompt, language 'en': caller speech is always transcribed by "
                      "whisper-tiny.en (any model name selects it)")

SESSION_FIELDS: Rules = {
    "type": Fixed(lambda v: v == "realtime", "'realtime'"),
    "model": Fixed(lambda v: isinstance(v, str), f"a model name: any selects {MODEL_NAME!r}, the one model this "
                                                 "server runs, as the URL's ?model= does (OpenAI's examples send "
                                                 "'gpt-realtime')"),
    "instructions": APPLIED, "voice": APPLIED, "audio": APPLIED, "turn_detection": APPLIED,
    "input_audio_format": APPLIED, "output_audio_format": APPLIED,
    "output_modalities": SPOKEN, "modalities": SPOKEN, "input_audio_transcription": TRANSCRIPTION,
    "input_audio_noise_reduction": NO_NOISE_REDUCTION, "tools": NO_TOOLS, "tool_choice": TOOL_CHOICE,
    "max_output_tokens": APPLIED, "max_response_output_tokens": APPLIED, "speed": SPEED,
}
AUDIO_FIELDS: Rules = {"input": APPLIED, "output": APPLIED}
AUDIO_INPUT_FIELDS: Rules = {"format": APPLIED, "turn_detection": APPLIED, "transcription": TRANSCRIPTION,
                             "noise_reduction": NO_NOISE_REDUCTION}
AUDIO_OUTPUT_FIELDS: Rules = {"format": APPLIED, "voice": APPLIED, "speed": SPEED}
AUDIO_FORMAT_FIELDS: Rules = {"type": APPLIED, "rate": APPLIED}
VAD_TUNING = {"threshold": (0.0, 1.0), "prefix_padding_ms": (0, 2000), "silence_duration_ms": (100, 10_000)}
"""The server_vad settings a session may tune, and their ranges: OpenAI's names for the VAD's aggressiveness,
pre-roll and hangover (`vad_settings`)."""
TURN_DETECTION_FIELDS: Rules = {
    "type": APPLIED, **dict.fromkeys(VAD_TUNING, APPLIED),
    "create_response": Fixed(lambda v: v is True, "true: every turn the server detects is answered"),
    "interrupt_response": Fixed(lambda v: v is True, "true: the caller's speech interrupts a reply"),
    "eagerness": Fixed(lambda v: v == "auto", "'auto'"),
    "idle_timeout_ms": Fixed(lambda v: v is None, "null: a silent caller is waited for, never prompted"),
}


def check_fields(obj: dict[str, Any], rules: Rules, param: str) -> None:
    """Refuse fields this server does not know and fixed ones asking for something else, naming the field."""
    for key, value in obj.items():
        if key not in rules:
            raise ClientEventError(f"unknown or unsupported parameter '{param}.{key}'", code="unknown_parameter",
                                   param=f"{param}.{key}")
        rule = rules[key]
        if rule is not None and not rule.accepts(value):
            raise ClientEventError(f"{param}.{key} can only be {rule.supported}", code="unsupported_value",
                                   param=f"{param}.{key}")


def _sub_object(parent: dict[str, Any], key: str, rules: Rules, param: str) -> dict[str, Any]:
    """``parent[key]`` (empty when absent or null) with its fields checked against ``rules``."""
    value = parent.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ClientEventError(f"{param}.{key} must be an object", param=f"{param}.{key}")
    check_fields(value, rules, f"{param}.{key}")
    return value


def _turn_detection(turn: Any, param: str) -> dict[str, Any] | None:
    """The turn_detection the session applies: null for push to talk (input_audio_buffer.commit ends each turn,
    response.create answers it), else the server's VAD with its settings in OpenAI's names (`VAD_TUNING`)."""
    if turn is None:
        return None
    if not (isinstance(turn, dict) and turn.get("type") in ("server_vad", "semantic_vad")):
        raise ClientEventError("turn_detection must be null (push to talk) or {'type': 'server_vad'} "
                               "(or 'semantic_vad')", code="unsupported_value", param=param)
    check_fields(turn, TURN_DETECTION_FIELDS, param)
    applied: dict[str, Any] = {"type": "server_vad"}
    for key, (low, high) in VAD_TUNING.items():
        value = turn.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
            raise ClientEventError(f"{param}.{key} must be a number from {low:g} to {high:g}", param=f"{param}.{key}")
        applied[key] = value
    return applied


MAX_OUTPUT_TOKENS = 4096
"""The largest reply cap a session may set, as OpenAI's; the server's own (LmConfig.max_new_tokens) is lower,
and a reply never runs past the smaller of the two."""


def _token_cap(value: Any, param: str) -> int | None:
    """A session's max_output_tokens: 'inf' (None) or a whole number of tokens."""
    if value == "inf":
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_OUTPUT_TOKENS:
        raise ClientEventError(f"{param} must be 'inf' or an integer from 1 to {MAX_OUTPUT_TOKENS}", param=param)
    return value


def vad_settings(turn_detection: dict[str, Any] | None) -> dict[str, int]:
    """A session's turn_detection as VAD settings (:class:`voice.vad.VadConfig` fields). The threshold (0 to 1,
    higher: louder sound needed to count as speech) picks webrtcvad's aggressiveness in four bands, so
    OpenAI's default 0.5 is the VAD's default mode 2. None (push to talk): silence ends no turn."""
    if turn_detection is None:
        return {"ends_turns": False}
    names = {"prefix_padding_ms": "preroll_ms", "silence_duration_ms": "hangover_ms"}
    settings = {names[key]: int(turn_detection[key]) for key in names if key in turn_detection}
    if "threshold" in turn_detection:
        settings["aggressiveness"] = min(3, int(turn_detection["threshold"] * 4))
    return settings


_ABSENT = object()


def _either_spelling(places: list[tuple[dict[str, Any], str, str]], parse: Callable[[Any, str], Any]) -> Any:
    """A setting the GA protocol and the beta one name differently (``audio.input.format`` and
    ``input_audio_format``): every spelling given is checked, and two that disagree are refused rather than one
    silently winning. `_ABSENT` when none is given, or `parse` reads every one given as no change."""
    given = [(param, value) for obj, key, param in places
             if key in obj and (value := parse(obj[key], param)) is not _ABSENT]
    if len(given) > 1 and given[0][1] != given[1][1]:
        raise ClientEventError(f"{given[0][0]} and {given[1][0]} are one setting, given two values",
                               param=given[1][0])
    return given[0][1] if given else _ABSENT


def _text(value: Any, param: str) -> Any:
    """A string setting; null leaves it as it is (`_ABSENT`)."""
    if value is None:
        return _ABSENT
    if not isinstance(value, str):
        raise ClientEventError(f"{param} must be a string", param=param)
    return value


def apply_session_update(config: SessionConfig, session: Any) -> SessionConfig:
    """Merge a ``session.update`` body into ``config``, refusing what this server cannot do."""
    if not isinstance(session, dict):
        raise ClientEventError("session.update needs a 'session' object", param="session")
    check_fields(session, SESSION_FIELDS, "session")
    audio = _sub_object(session, "audio", AUDIO_FIELDS, "session")
    audio_in = _sub_object(audio, "input", AUDIO_INPUT_FIELDS, "session.audio")
    audio_out = _sub_object(audio, "output", AUDIO_OUTPUT_FIELDS, "session.audio")
    settings = {
        "input_format": ([(audio_in, "format", "session.audio.input.format"),
                          (session, "input_audio_format", "session.input_audio_format")], parse_audio_format),
        "output_format": ([(audio_out, "format", "session.audio.output.format"),
                           (session, "output_audio_format", "session.output_audio_format")], parse_audio_format),
        "instructions": ([(session, "instructions", "session.instructions")], _text),
        "voice": ([(audio_out, "voice", "session.audio.output.voice"), (session, "voice", "session.voice")], _text),
        "max_output_tokens": ([(session, "max_output_tokens", "session.max_output_tokens"),
                               (session, "max_response_output_tokens", "session.max_response_output_tokens")],
                              _token_cap),
        "turn_detection": ([(audio_in, "turn_detection", "session.audio.input.turn_detection"),
                            (session, "turn_detection", "session.turn_detection")], _turn_detection),
    }
    changes = {name: value for name, (places, parse) in settings.items()
               if (value := _either_spelling(places, parse)) is not _ABSENT}
    return replace(config, **changes)


RESPONSE_FIELDS: Rules = {
    "instructions": APPLIED, "output_modalities": SPOKEN, "modalities": SPOKEN,
    "conversation": Fixed(lambda v: v == "auto", "'auto': a response joins the conversation (out-of-band "
                                                  "responses are not supported)"),
    "tools": NO_TOOLS, "tool_choice": TOOL_CHOICE, "max_output_tokens": APPLIED,
    "max_response_output_tokens": APPLIED,
}


def response_options(response: Any) -> ResponseOptions:
    """What a ``response.create``'s ``response`` asks for this response alone: its instructions, and its token
    cap ('inf': MAX_OUTPUT_TOKENS, the server's own cap being lower); what the session will not do is refused."""
    if response is None:
        return SESSION_DEFAULTS
    if not isinstance(response, dict):
        raise ClientEventError("response.create's 'response' must be an object", param="response")
    check_fields(response, RESPONSE_FIELDS, "response")
    cap = _either_spelling([(response, "max_output_tokens", "response.max_output_tokens"),
                            (response, "max_response_output_tokens", "response.max_response_output_tokens")],
                           _token_cap)
    instructions = _text(response.get("instructions"), "response.instructions")
    return ResponseOptions(max_tokens=None if cap is _ABSENT else MAX_OUTPUT_TOKENS if cap is None else cap,
                           instructions=None if instructions is _ABSENT else instructions)


# ---------------------------------------------------------------------------------------------- parsing

def parse_client_event(data: str | bytes, max_bytes: int) -> dict[str, Any]:
    """Decode one client event, checking size, JSON, shape and that its type is one we know."""
    if len(data) > max_bytes:
        raise ClientEventError(f"event of {len(data)} bytes is over the limit of {max_bytes}",
                               code="message_too_large")
    try:
        event = loads_client_json(data)
    except JsonTextError as err:
        raise ClientEventError(f"event is not valid JSON: {err}", code="invalid_json") from None
    if not isinstance(event, dict) or not isinstance(event.get("type"), str):
        raise ClientEventError("an event must be a JSON object with a string 'type'", code="invalid_event")
    event_id = event.get("event_id") if isinstance(event.get("event_id"), str) else None
    if event["type"] not in CLIENT_EVENTS:
        raise ClientEventError(f"unknown event type {event['type']!r}", code="unknown_event",
                               param="type", event_id=event_id)
    return event


def decode_audio_append(event: dict[str, Any], fmt: AudioFormat) -> np.ndarray:
    """The PCM of an ``input_audio_buffer.append`` (base64 ``audio`` in the session's input format)."""
    audio = event.get("audio")
    if not isinstance(audio, str):
        raise ClientEventError("input_audio_buffer.append needs base64 'audio'", param="audio")
    try:
        raw = base64.b64decode(audio, validate=True)
    except (binascii.Error, ValueError):
        raise ClientEventError("'audio' is not valid base64", code="invalid_audio", param="audio") from None
    return fmt.decode(raw)


def user_text(event: dict[str, Any]) -> str:
    """The text of a ``conversation.item.create`` user message (``input_text`` parts joined)."""
    item = event.get("item")
    if not isinstance(item, dict) or item.get("type", "message") != "message" or item.get("role") != "user":
        raise ClientEventError("only user message items can be created", param="item")
    parts = item.get("content")
    if not isinstance(parts, list):
        raise ClientEventError("item.content must be a list", param="item.content")
    texts = [p.get("text") for p in parts if isinstance(p, dict) and p.get("type") in ("input_text", "text")]
    if not texts or not all(isinstance(t, str) for t in texts):
        raise ClientEventError("a user message needs at least one input_text part", param="item.content")
    return " ".join(texts)


def client_item_id(event: dict[str, Any]) -> str | None:
    """The id a client gave the item it creates (kept, as OpenAI keeps it), or None to have one made."""
    item_id = event["item"].get("id")
    if item_id is not None and not (isinstance(item_id, str) and 0 < len(item_id) <= 64):
        raise ClientEventError("item.id must be a string of 1 to 64 characters", param="item.id")
    return item_id


# ---------------------------------------------------------------------------------------------- encoding

def error_event(event_id: str, message: str, code: str, error_type: str = "invalid_request_error",
                param: str | None = None, client_event_id: str | None = None) -> dict[str, Any]:
    return {"type": "error", "event_id": event_id,
            "error": {"type": error_type, "code": code, "message": message, "param": param,
                      "event_id": client_event_id}}


def _error_type(error: PipelineError) -> str:
    return "invalid_request_error" if error.caller_at_fault else "server_error"


def _usage(usage: TokenUsage | None) -> dict[str, Any] | None:
    """Realtime's usage object: the LM reads and writes text only (speech goes through Whisper and Piper)."""
    if usage is None:
        return None
    return {"total_tokens": usage.input_tokens + usage.output_tokens, "input_tokens": usage.input_tokens,
            "output_tokens": usage.output_tokens,
            "input_token_details": {"text_tokens": usage.input_tokens, "audio_tokens": 0},
            "output_token_details": {"text_tokens": usage.output_tokens, "audio_tokens": 0}}


class RealtimeEncoder:
    """Turns one session's pipeline events into Realtime server events.

    It keeps what the protocol needs across events: ids for the caller's items and the assistant's
    responses, the conversation's item order (``previous_item_id``), how much of the transcript was already sent
    as deltas, and a stateful resampler for the audio deltas. ``audio_in_events`` is False for WebRTC, where
    audio travels on the media track and the server owns the playback buffer (so it reports
    ``output_audio_buffer.cleared`` instead). ``t0`` is the audio time of the session's first input sample: the
    origin of ``audio_start_ms``/``audio_end_ms``.
    """

    def __init__(self, config: SessionConfig, audio_in_events: bool, t0: float) -> None:
        self.config = config
        self.audio_in_events = audio_in_events
        self._t0 = t0
        self._ids = itertools.count(1)
        self._speech_items = itertools.count(1)
        self._typed_items = itertools.count(1)
        self._turn_items: dict[int, str] = {}  # a turn's caller item, announced when its speech started
        self._previous: dict[str, str | None] = {}  # each item's predecessor in the conversation
        self._last_item: str | None = None
        self._sent_confirmed: dict[int, str] = {}
        self._open_responses: set[int] = set()
        self._response_asked = False  # a response.create was accepted and its response.created not sent yet
        self._responded: set[int] = set()  # turns with a response (whose output item a client may truncate)
        self._resampler: Resampler | None = None

    def event_id(self) -> str:
        return f"event_{next(self._ids)}"

    def event(self, type_: str, **fields: Any) -> dict[str, Any]:
        return {"type": type_, "event_id": self.event_id(), **fields}

    def error(self, err: ClientEventError) -> dict[str, Any]:
        return error_event(self.event_id(), err.message, err.code, param=err.param, client_event_id=err.event_id)

    @staticmethod
    def response_id(turn_id: int) -> str:
        return f"resp_{turn_id}"

    @staticmethod
    def output_item_id(turn_id: int) -> str:
        return f"item_out_{turn_id}"

    def input_item_id(self, turn_id: int) -> str:
        """The caller item of a turn: the one its speech_started announced (one of its own for a turn that never
        had one)."""
        return self._turn_items.get(turn_id, f"item_in_turn_{turn_id}")

    def ask_response(self) -> None:
        """A response.create was accepted: its response is active before the pipeline's first event announces it."""
        self._response_asked = True

    @property
    def responding(self) -> bool:
        """From response.create (or a turn's response.created) to response.done: the Realtime API allows one
        response at a time."""
        return self._response_asked or bool(self._open_responses)

    @property
    def push_to_talk(self) -> bool:
        return self.config.turn_detection is None

    def turn_of_output_item(self, item_id: str) -> int | None:
        """The pipeline turn whose assistant item this is (for ``conversation.item.truncate``)."""
        return next((turn for turn in self._responded if item_id == self.output_item_id(turn)), None)

    def typed_item(self, text: str, item_id: str | None, previous_item_id: Any = None) -> list[dict[str, Any]]:
        """conversation.item.added and .done for a typed user message (the client's own id kept), appended at
        the end of the conversation: the only place this server inserts items."""
        if previous_item_id is not None and previous_item_id != self._last_item:
            raise ClientEventError(f"previous_item_id must be null or {self._last_item!r}, the last item: items "
                                   "can only be appended", param="previous_item_id")
        if item_id is not None and item_id in self._previous:
            raise ClientEventError(f"item id {item_id!r} is already in the conversation", param="item.id")
        item = {"id": item_id or f"item_text_{next(self._typed_items)}", "type": "message", "role": "user",
                "status": "completed", "content": [{"type": "input_text", "text": text}]}
        return [self._item_added(item), self._item_event("done", item)]

    def _item_added(self, item: dict[str, Any]) -> dict[str, Any]:
        """conversation.item.added: the item joins the end of the conversation."""
        self._previous[item["id"]] = self._last_item
        self._last_item = item["id"]
        return self._item_event("added", item)

    def _item_event(self, kind: str, item: dict[str, Any]) -> dict[str, Any]:
        return self.event(f"conversation.item.{kind}", previous_item_id=self._previous[item["id"]], item=item)

    def _ms(self, audio_at: float) -> int:
        """An audio time as ms into the audio the session was sent."""
        return max(0, round(1000 * (audio_at - self._t0)))

    def encode(self, ev: PipelineEvent) -> list[dict[str, Any]]:
        """The server events for one pipeline event (possibly none)."""
        if isinstance(ev, SpeechStarted):
            return self._speech_started(ev)
        if isinstance(ev, SpeechStopped):
            return self._committed(ev)
        if isinstance(ev, TranscriptDelta):
            return [self._transcript_delta(ev)]
        if isinstance(ev, TranscriptCompleted):
            return [self.event("conversation.item.input_audio_transcription.completed",
                               item_id=self.input_item_id(ev.turn_id), content_index=0, transcript=ev.text)]
        if isinstance(ev, ReplyTextDelta):
            return [*self._open(ev.turn_id),
                    self.event("response.output_audio_transcript.delta", **self._where(ev.turn_id), delta=ev.text)]
        if isinstance(ev, AudioOut):
            return [*self._open(ev.turn_id), *self._audio_delta(ev)]
        if isinstance(ev, AudioCleared):
            self._resampler = None
            if self.audio_in_events:
                return []
            return [self.event("output_audio_buffer.cleared", response_id=self.response_id(ev.turn_id))]
        if isinstance(ev, ResponseDone):
            return self._done(ev)
        if isinstance(ev, PipelineError):
            return [error_event(self.event_id(), ev.message, ev.code, error_type=_error_type(ev))]
        return []

    def _speech_started(self, ev: SpeechStarted) -> list[dict[str, Any]]:
        """The turn's item is named now, and every later event about the turn's words names it (push to talk
        announces no speech, only the commit)."""
        item = self._turn_items[ev.turn_id] = f"item_in_{next(self._speech_items)}"
        if self.push_to_talk:
            return []
        return [self.event("input_audio_buffer.speech_started", audio_start_ms=self._ms(ev.audio_at), item_id=item)]

    def _committed(self, ev: SpeechStopped) -> list[dict[str, Any]]:
        """The turn's audio becomes a user item (its transcript follows in the transcription events)."""
        item_id = self.input_item_id(ev.turn_id)
        stopped = [] if self.push_to_talk else [
            self.event("input_audio_buffer.speech_stopped", audio_end_ms=self._ms(ev.audio_at), item_id=item_id)]
        item = {"id": item_id, "type": "message", "role": "user", "status": "completed",
                "content": [{"type": "input_audio", "transcript": None}]}
        committed = self.event("input_audio_buffer.committed", item_id=item_id, previous_item_id=self._last_item)
        return [*stopped, committed, self._item_added(item), self._item_event("done", item)]

    def _transcript_delta(self, ev: TranscriptDelta) -> dict[str, Any]:
        # Realtime deltas only ever append: send the newly confirmed words, and the unstable tail apart.
        sent = self._sent_confirmed.get(ev.turn_id, "")
        if ev.confirmed.startswith(sent):
            delta = ev.confirmed[len(sent):]
            self._sent_confirmed[ev.turn_id] = ev.confirmed
        else:
            delta = ""
        return self.event("conversation.item.input_audio_transcription.delta",
                          item_id=self.input_item_id(ev.turn_id), content_index=0, delta=delta,
                          tentative=ev.tentative)

    def _where(self, turn_id: int) -> dict[str, Any]:
        return {"response_id": self.response_id(turn_id), "item_id": self.output_item_id(turn_id),
                "output_index": 0, "content_index": 0}

    def _output_item(self, turn_id: int, status: str, text: str | None) -> dict[str, Any]:
        """The assistant's item of a response; no content while it is in progress."""
        content = [] if text is None else [{"type": "output_audio", "transcript": text}]
        return {"id": self.output_item_id(turn_id), "type": "message", "role": "assistant", "status": status,
                "content": content}

    def _response(self, turn_id: int, status: str, text: str = "", usage: TokenUsage | None = None) -> dict[str, Any]:
        item = self._output_item(turn_id, status, None if status == "in_progress" else text)
        return {"object": "realtime.response", "id": self.response_id(turn_id), "status": status, "output": [item],
                "conversation_id": self.config.id, "output_modalities": ["audio"], "usage": _usage(usage)}

    def _open(self, turn_id: int) -> list[dict[str, Any]]:
        """response.created and its item and content part, once per response: a finished reply that a noise
        barge-in paused while it still played out (WebRTC) resumes after its response.done, and its audio reopens
        nothing."""
        if turn_id in self._responded:
            return []
        self._open_responses.add(turn_id)
        self._response_asked = False
        self._responded.add(turn_id)
        item = self._output_item(turn_id, "in_progress", None)
        where = self._where(turn_id)
        return [self.event("response.created", response=self._response(turn_id, "in_progress")),
                self.event("response.output_item.added", response_id=where["response_id"], output_index=0, item=item),
                self._item_added(item),
                self.event("response.content_part.added", **where, part={"type": "output_audio", "transcript": ""})]

    def _audio_delta(self, ev: AudioOut) -> list[dict[str, Any]]:
        if not self.audio_in_events or ev.turn_id not in self._open_responses:
            return []
        fmt = self.config.output_format
        if self._resampler is None or self._resampler.out_rate != fmt.rate:
            self._resampler = Resampler(ev.sample_rate, fmt.rate)
        pcm = self._resampler.process(ev.pcm)
        if len(pcm) == 0:
            return []
        return [self.event("response.output_audio.delta", **self._where(ev.turn_id),
                           delta=base64.b64encode(fmt.encode(pcm)).decode("ascii"))]

    def _done(self, ev: ResponseDone) -> list[dict[str, Any]]:
        """The audio's tail, then the content part, item and response closed in the GA protocol's order."""
        events = self._open(ev.turn_id)
        if self.audio_in_events and self._resampler is not None and not ev.cancelled:
            tail = self._resampler.flush()
            if len(tail):
                events.append(self.event("response.output_audio.delta", **self._where(ev.turn_id),
                                         delta=base64.b64encode(self.config.output_format.encode(tail)).decode()))
        self._resampler = None
        self._open_responses.discard(ev.turn_id)
        status = ("cancelled" if ev.cancelled else "failed" if ev.failed else "incomplete" if ev.reason
                  else "completed")
        response = self._response(ev.turn_id, status, ev.text, ev.usage)
        if ev.error is not None:
            response["status_details"] = {"type": "failed", "error": {"type": _error_type(ev.error), "code": ev.error.code}}
        elif ev.reason:
            response["status_details"] = {"type": status, "reason": ev.reason}
        where, item = self._where(ev.turn_id), response["output"][0]
        return [*events,
                self.event("response.output_audio.done", **where),
                self.event("response.output_audio_transcript.done", **where, transcript=ev.text),
                self.event("response.content_part.done", **where, part=item["content"][0]),
                self.event("response.output_item.done", response_id=where["response_id"], output_index=0, item=item),
                self._item_event("done", item),
                self.event("response.done", response=response, trace=ev.trace)]
