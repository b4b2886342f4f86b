"""A live server on an ephemeral loopback port and the real pipeline behind it, for transport and page tests."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import numpy as np
import pytest
from aiohttp.test_utils import TestServer

from tests.conftest import NOISE_FREE_VOICE
from voice.audio import write_wav
from voice.config import load_config
from voice.pipeline import VoicePipeline
from voice.resources import Resources
from voice.server import ServerConfig, create_app
from voice.transports.sessions import SESSIONS, SessionRegistry

StartServer = Callable[..., Awaitable[TestServer]]


@pytest.fixture
async def serve() -> AsyncIterator[StartServer]:
    """``await serve(factory, **config)`` starts a server; it is closed (sessions freed) after the test."""
    servers: list[TestServer] = []

    async def start(factory, **config) -> TestServer:
        server = TestServer(create_app(factory, ServerConfig(**config)),
                            host="127.0.0.1", port=0)
        await server.start_server()
        servers.append(server)
        return server

    yield start
    for server in servers:
        await server.close()


def registry(server: TestServer) -> SessionRegistry:
    return server.app[SESSIONS]


def url(server: TestServer, path: str, scheme: str = "http") -> str:
    return f"{scheme}://127.0.0.1:{server.port}{path}"


async def drained(server: TestServer, timeout: float = 10.0) -> bool:
    """True once the server holds no session (freeing is asynchronous after a disconnect)."""
    async with asyncio.timeout(timeout):
        while len(registry(server)):
            await asyncio.sleep(0.05)
    return True


# ---------------------------------------------------------------------------------------------- the real pipeline

# Whisper tiny.en hears Piper's noise-free "France" as "friends" in some renderings (the reply is then, rightly,
# "sorry, i don't know the capital of friends"); it hears "Japan" every way these tests deliver it.
QUESTION, COUNTRY, CAPITAL = "What is the capital of Japan?", "japan", "tokyo"
_loaded: dict[str, Resources] = {}


def pipeline_resources() -> Resources:
    """Whisper, Piper and the LM, loaded once per test process (both test folders share them)."""
    if "resources" not in _loaded:
        config = load_config("default").replace(tts=NOISE_FREE_VOICE)  # the demo checkpoint
        _loaded["resources"] = asyncio.run(Resources.load(config))
    return _loaded["resources"]


@pytest.fixture(scope="session")
def resources() -> Resources:
    return pipeline_resources()


@pytest.fixture
def new_pipeline(resources: Resources) -> Callable[[], VoicePipeline]:
    return lambda: VoicePipeline(resources)


@pytest.fixture(scope="session")
def question(resources: Resources) -> tuple[np.ndarray, int]:
    """The spoken question at 48 kHz with a second of silence before it and three after (turn end)."""
    speech = resources.tts.synthesize(QUESTION, 48000)
    silence = np.zeros(48000, dtype=np.int16)
    return np.concatenate([silence, speech, silence, silence, silence]), 48000


@pytest.fixture(scope="session")
def question_wav(question: tuple[np.ndarray, int], tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("mic") / "question.wav"
    write_wav(path, *question)
    return path
