"""The browser page in headless Chromium: a fake microphone asks a question over WebRTC, the page shows
the transcript and the reply, and the audio that reached the browser is speech (checked by Whisper)."""

from __future__ import annotations

import base64
import io

import av
import numpy as np
import pytest
from browser import chromium_page, have_chromium
from live_server import CAPITAL, QUESTION, drained, url

from tests.conftest import demo_answers_correctly, spoken_words_recovered

pytestmark = pytest.mark.skipif(not have_chromium(), reason="needs Debian's chromium at /usr/bin/chromium")

PAGE_TIMEOUT_MS = 45000


def decode_recording(recording: dict) -> np.ndarray:
    """MediaRecorder's webm/ogg Opus to 16 kHz mono int16."""
    container = av.open(io.BytesIO(base64.b64decode(recording["base64"])))
    resampler = av.AudioResampler(format="s16", layout="mono", rate=16000)
    pcm = [f.to_ndarray().reshape(-1) for frame in container.decode(audio=0) for f in resampler.resample(frame)]
    return np.concatenate(pcm).astype(np.int16)


async def test_browser_call_shows_transcript_and_reply_and_hears_speech(serve, new_pipeline, resources,
                                                                       question_wav) -> None:
    server = await serve(new_pipeline)
    async with chromium_page(question_wav) as page:
        await page.goto(url(server, "/?raw=1&record=1&autoconnect=1"))
        await page.wait_for_function("voice.events.includes('response.done')", timeout=PAGE_TIMEOUT_MS)
        # Let the reply play out: a little after the last audible assistant audio.
        await page.wait_for_function("voice.lastLoudAt !== null && performance.now() - voice.lastLoudAt > 700",
                                     timeout=PAGE_TIMEOUT_MS)
        state = await page.evaluate(
            "({errors: voice.errors, traces: voice.traces, onsets: voice.audioOnsets.length,"
            " v2v: voice.audioOnsets.map(t => t - Math.max(...voice.micSpeechEnds.filter(e => e < t))),"
            " user: voice.turns.filter(t => t.role === 'user').map(t => t.text),"
            " assistant: voice.turns.filter(t => t.role === 'assistant').map(t => t.text),"
            " shown: document.getElementById('turns').innerText,"
            " rows: document.querySelectorAll('#latency tbody tr').length})")
        recording = await page.evaluate("voice.stopRecording()")
        playout_ms = await page.evaluate("voice.playoutDelayMs()")
    # The browser went away without hanging up (like a closed tab): the server notices and frees the call.
    assert await drained(server, timeout=15)

    assert state["errors"] == []
    # Whisper tiny hears the question through Chromium's Opus encoder and aiortc's jitter buffer; one misheard
    # word in six is within its error rate ("capital of friends" was seen in CI runs), two are not.
    user = " ".join(state["user"])
    assert spoken_words_recovered(QUESTION, user) >= 0.8, (QUESTION, user)
    assert state["assistant"] and state["assistant"][0].strip()
    def collapsed(text: str) -> str:  # the page renders text as HTML does: runs of whitespace become one space
        return " ".join(text.split())

    assert collapsed(state["assistant"][0])[:20] in collapsed(state["shown"])
    # the reply's pieces carry their own spaces ("twel", "ve times"): shown as the words that were said
    assert collapsed(state["assistant"][0]) == collapsed(state["traces"][0]["reply"])
    assert state["rows"] >= 1 and state["traces"][0]["voice_to_voice_ms"] is not None
    assert state["onsets"] >= 1
    print(f"browser voice-to-voice (mic silent -> reply audible in the page): {state['v2v'][0]:.0f} ms; "
          f"pipeline trace {state['traces'][0]['voice_to_voice_ms']} ms; browser jitter buffer {playout_ms:.0f} ms")

    audio = decode_recording(recording)
    assert np.abs(audio).max() > 1000
    heard = resources.asr.transcribe(audio)
    assert heard.text.strip(), f"Whisper found no speech in the audio the browser received ({heard.rejected})"
    reply = state["traces"][0]["reply"]
    assert spoken_words_recovered(reply, heard.text) >= 0.6, (reply, heard.text)
    if demo_answers_correctly():
        assert CAPITAL in heard.text.lower()


async def test_hanging_up_while_connecting_leaves_no_call_behind(serve, new_pipeline, question_wav) -> None:
    """The button says "Hang up" while connecting, but a click then had started a second call: the first one's
    microphone and peer connection stayed open, holding a session on the server until the tab closed."""
    server = await serve(new_pipeline)
    async with chromium_page(question_wav) as page:
        await page.goto(url(server, "/"))
        await page.click("#call")
        await page.click("#call")  # at once: the browser is still asking for the microphone
        state = await page.evaluate("voice.state")
        # a call hung up just as the server set it up: the page ends it there too
        await page.evaluate("voice.connect(); new Promise((done) => setTimeout(done, 300)).then(voice.hangUp)")
        await page.wait_for_timeout(3000)  # long enough for any call still being set up to connect
        after = await page.evaluate("({state: voice.state, errors: voice.errors})")
        assert await drained(server, timeout=15)
    assert state == "idle"
    assert after == {"state": "idle", "errors": []}
