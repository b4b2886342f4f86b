"""Free-text chat completions through the official client: JSON and SSE agree, and the OpenAI knobs
(max_tokens, stop, seed, n, include_usage, reasoning_effort) do what they say."""

from __future__ import annotations

import time

import pytest

from tests.api.conftest import MODEL_NAME, fixture_tokens

ASK = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Tell me a story."}]


def _text(client, **kwargs) -> str:
    return client.chat.completions.create(model=MODEL_NAME, messages=ASK, **kwargs).choices[0].message.content


def test_non_streaming_shape_and_usage(client):
    resp = client.chat.completions.create(model=MODEL_NAME, messages=ASK, max_tokens=12)
    assert resp.object == "chat.completion" and resp.model == MODEL_NAME and resp.id.startswith("chatcmpl-")
    (choice,) = resp.choices
    assert choice.message.role == "assistant" and choice.message.content
    assert choice.finish_reason == "length"  # random weights never say stop
    assert resp.usage.completion_tokens == 12
    assert resp.usage.total_tokens == resp.usage.prompt_tokens + 12


def test_stream_matches_non_streaming(client):
    whole = _text(client, max_tokens=20, max_completion_tokens=None)
    chunks = list(client.chat.completions.create(model=MODEL_NAME, messages=ASK, max_completion_tokens=20,
                                                 stream=True, stream_options={"include_usage": True}))
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert len({c.id for c in chunks}) == 1
    pieces = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert len(pieces) > 1, "text should stream block by block"
    assert "".join(pieces) == whole
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    usage_chunk = chunks[-1]
    assert usage_chunk.choices == [] and usage_chunk.usage.completion_tokens == 20
    assert all(c.usage is None for c in chunks[:-1])


def test_stop_string_cuts_the_text(client):
    whole = _text(client, max_tokens=40)
    stop = whole[10:13]
    resp = client.chat.completions.create(model=MODEL_NAME, messages=ASK, max_tokens=40, stop=[stop, "@@@"])
    assert resp.choices[0].message.content == whole[: whole.index(stop)]
    assert resp.choices[0].finish_reason == "stop"


def test_seed_makes_sampling_reproducible(client):
    a = _text(client, max_tokens=16, temperature=1.0, seed=11)
    assert a == _text(client, max_tokens=16, temperature=1.0, seed=11)
    assert a != _text(client, max_tokens=16, temperature=1.0, seed=12)


def test_n_choices_stream_and_complete(client):
    resp = client.chat.completions.create(model=MODEL_NAME, messages=ASK, max_tokens=8, n=2, temperature=1.0,
                                          seed=3)
    assert [c.index for c in resp.choices] == [0, 1]
    stream = client.chat.completions.create(model=MODEL_NAME, messages=ASK, max_tokens=8, n=2, temperature=1.0,
                                            seed=3, stream=True)
    texts = {0: "", 1: ""}
    for chunk in stream:
        for c in chunk.choices:
            texts[c.index] += c.delta.content or ""
    assert [texts[0], texts[1]] == [c.message.content for c in resp.choices]


@pytest.mark.parametrize("effort", ["minimal", "low", "medium", "high"])
def test_reasoning_effort_is_accepted(client, effort):
    assert _text(client, max_tokens=8, reasoning_effort=effort)


def test_disconnect_mid_stream_frees_the_session(client, state):
    stream = client.chat.completions.create(model=MODEL_NAME, messages=ASK, max_tokens=200, stream=True,
                                            reasoning_effort="high")
    chunks = iter(stream)
    next(chunks), next(chunks)
    (session,) = state.sessions
    assert session.nbytes > 0
    stream.close()
    deadline = time.monotonic() + 30  # waiting for the server to notice, not measuring it
    while (state.sessions or session.nbytes) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not state.sessions
    assert session.nbytes == 0
    assert session.last_result is not None and len(session.last_result.token_ids) < 200


def _usage_of(client, stream: bool, **kwargs) -> tuple[str, int]:
    """The reply's content and usage.completion_tokens, from a response or the stream's usage chunk."""
    if not stream:
        resp = client.chat.completions.create(model=MODEL_NAME, messages=ASK, **kwargs)
        return resp.choices[0].message.content, resp.usage.completion_tokens
    chunks = list(client.chat.completions.create(model=MODEL_NAME, messages=ASK, stream=True,
                                                 stream_options={"include_usage": True}, **kwargs))
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices), chunks[-1].usage.completion_tokens


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("straddle", [False, True])
def test_a_stop_string_leaves_its_tokens_out_of_usage(client, stream, straddle):
    """completion_tokens counts the tokens of the text returned, not the rest of the block the stop string
    cut: here the stop is the reply's first filler token (or its tail, so that the filler is partly returned
    and counts), which random weights write mid-block."""
    whole, total = _usage_of(client, False, max_tokens=40)
    tokens = fixture_tokens(whole)
    assert len(tokens) == total  # the reading above is how the engine tokenized it
    first = next(i for i, t in enumerate(tokens) if len(t) > 1)
    stop = tokens[first][2:] if straddle else tokens[first]
    content, used = _usage_of(client, stream, max_tokens=40, stop=[stop])
    assert content == whole[: whole.index(stop)]
    assert used == first + int(straddle)


def test_samples_asked_for_without_a_temperature_are_drawn_at_openais_default(client):
    """With no temperature decoding is greedy, so n > 1 had given n identical choices and top_p had changed
    nothing; asked for samples, the temperature is OpenAI's default 1.0."""
    resp = client.chat.completions.create(model=MODEL_NAME, messages=ASK, max_tokens=16, n=3, seed=5)
    assert len({c.message.content for c in resp.choices}) == 3
    at_one = client.chat.completions.create(model=MODEL_NAME, messages=ASK, max_tokens=16, n=3, seed=5,
                                            temperature=1.0)
    assert [c.message.content for c in resp.choices] == [c.message.content for c in at_one.choices]
    tops = {_text(client, max_tokens=16, top_p=0.9, seed=seed) for seed in range(3)}
    assert len(tops) == 3
    assert _text(client, max_tokens=16, top_p=0.9, seed=1) == _text(client, max_tokens=16, top_p=0.9, seed=1,
                                                                   temperature=1.0)


def test_text_parts_are_joined_by_line_breaks(client):
    """Two text parts had been glued together ("france?Also"); the fixture's tokens are characters, so the
    prompt is the same length as the one string with a line break between the parts."""
    parts = [{"type": "text", "text": "what is the capital of france?"}, {"type": "text", "text": "Also the time?"}]
    joined = "what is the capital of france?\nAlso the time?"
    usage = [client.chat.completions.create(model=MODEL_NAME, messages=[{"role": "user", "content": content}],
                                            max_tokens=1).usage.prompt_tokens for content in (parts, joined)]
    assert usage[0] == usage[1]
