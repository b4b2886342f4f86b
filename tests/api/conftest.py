"""A live API server on the SDAR fixture checkpoint (tiny random weights, char-level tokenizer), driven
with the official `openai` client over real HTTP on 127.0.0.1."""

from __future__ import annotations

import openai
import pytest
import torch

from dlm.api.limits import ApiLimits
from dlm.api.live_server import LiveServer
from dlm.api.server import create_app
from dlm.api.state import STATE

MODEL_NAME = "sdar-fixture"
LIMITS = ApiLimits(max_body_bytes=64 * 1024, max_prompt_tokens=400, max_completion_tokens=200, max_n=3,
                   max_concurrent=8)


@pytest.fixture(scope="session")
def engine(fixtures_dir):
    from dlm.engine import Engine

    torch.set_num_threads(1)
    return Engine.from_dir(fixtures_dir / "sdar" / "checkpoint", "float32")


@pytest.fixture(scope="session")
def app(engine):
    return create_app(engine, MODEL_NAME, LIMITS)


@pytest.fixture(scope="session")
def state(app):
    return app[STATE]


@pytest.fixture(scope="session")
def server(app):
    with LiveServer(app) as live:
        yield live


@pytest.fixture(scope="session")
def client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused-on-loopback", max_retries=0, timeout=60)
