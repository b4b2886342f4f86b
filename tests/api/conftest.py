"""A live API server on the SDAR fixture checkpoint (tiny random weights, char-level tokenizer), driven
with the official `openai` client over real HTTP on 127.0.0.1."""

from __future__ import annotations

import json
import re

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


def fixture_tokens(text: str) -> list[str]:
    """The fixture's tokens in its text: single characters and `<|tokN|>` fillers (its vocabulary has nothing
    else), so a test can count a reply's tokens from its text."""
    return re.findall(r"<\|tok\d+\|>|.", text, re.DOTALL)


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
    return _client(server)


def _client(server: LiveServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused-on-loopback", max_retries=0, timeout=60)


# The random fixture model emits these filler ids all the time; as tags they make it call tools on its own.
TAG_FILLERS = {"<|tok115|>": "<tool_call>", "<|tok101|>": "</tool_call>"}


@pytest.fixture(scope="session")
def tagged_client(fixtures_dir, tmp_path_factory):
    """The fixture checkpoint with `<tool_call>` / `</tool_call>` as single special tokens, as in the demo
    tokenizer, so tool calls open constrained spans in the middle of free text."""
    from dlm.engine import Engine

    src, dst = fixtures_dir / "sdar" / "checkpoint", tmp_path_factory.mktemp("tagged")
    for name in ("config.json", "generation_config.json", "model.safetensors"):
        (dst / name).symlink_to(src / name)
    tok = json.loads((src / "tokenizer.json").read_text())
    conf = json.loads((src / "tokenizer_config.json").read_text())
    for filler, tag in TAG_FILLERS.items():
        token_id = tok["model"]["vocab"].pop(filler)
        tok["model"]["vocab"][tag] = token_id
        entry = {"content": tag, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False,
                 "special": True}
        tok["added_tokens"].append({"id": token_id, **entry})
        conf["added_tokens_decoder"][str(token_id)] = entry
    (dst / "tokenizer.json").write_text(json.dumps(tok))
    (dst / "tokenizer_config.json").write_text(json.dumps(conf))
    with LiveServer(create_app(Engine.from_dir(dst, "float32"), MODEL_NAME, LIMITS)) as live:
        yield _client(live)
