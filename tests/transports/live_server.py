"""A live server on an ephemeral loopback port, shared by the transport and the page tests."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from aiohttp.test_utils import TestServer

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
