"""The one server: bind safety, bearer tokens on every transport, health, metrics and the page."""

from __future__ import annotations

import argparse

import aiohttp
import pytest
from live_server import url

from voice.server import InsecureBindError, ServerConfig, check_bind, main

TOKEN = "s3cret-token"


def test_non_loopback_bind_needs_a_token() -> None:
    with pytest.raises(InsecureBindError, match="without a bearer token"):
        check_bind(ServerConfig(host="0.0.0.0"))
    check_bind(ServerConfig(host="0.0.0.0", token=TOKEN))
    check_bind(ServerConfig(host="127.0.0.1"))


def test_serve_refuses_before_loading_models(monkeypatch) -> None:
    monkeypatch.delenv("VOICE_TOKEN", raising=False)
    with pytest.raises(InsecureBindError):
        main(argparse.Namespace(host="192.0.2.1", port=8080, token=None, max_sessions=4, stun=[]))


async def test_token_guards_every_transport(serve, new_pipeline) -> None:
    server = await serve(new_pipeline, token=TOKEN)
    async with aiohttp.ClientSession() as http:
        for path in ("/v1/realtime", "/phone/twilio", "/metrics"):
            async with http.get(url(server, path)) as res:
                assert res.status == 401 and (await res.json())["error"]["code"] == "invalid_api_key"
        async with http.post(url(server, "/v1/realtime/calls"), data="v=0",
                             headers={"Authorization": "Bearer wrong"}) as res:
            assert res.status == 401
        for path in ("/", "/static/app.js", "/healthz"):
            async with http.get(url(server, path)) as res:
                assert res.status == 200

        bearer = {"Authorization": f"Bearer {TOKEN}"}
        async with http.ws_connect(url(server, "/v1/realtime", "ws"), headers=bearer) as ws:
            assert (await ws.receive_json())["type"] == "session.created"
        # Browsers cannot set headers on a websocket: the token rides in a subprotocol, as with OpenAI.
        async with http.ws_connect(url(server, "/v1/realtime", "ws"),
                                   protocols=("realtime", f"openai-insecure-api-key.{TOKEN}")) as ws:
            assert (await ws.receive_json())["type"] == "session.created"
        # Twilio can only put it in the stream URL.
        async with http.ws_connect(url(server, f"/phone/twilio?token={TOKEN}", "ws")) as ws:
            await ws.send_json({"event": "connected"})
        async with http.get(url(server, "/metrics"), headers=bearer) as res:
            assert res.status == 200 and "voice_sessions_active" in await res.text()


async def test_page_health_and_metrics(serve, new_pipeline) -> None:
    server = await serve(new_pipeline, max_sessions=3)
    async with aiohttp.ClientSession() as http:
        async with http.get(url(server, "/")) as res:
            page = await res.text()
            assert "/static/app.js" in page and "<canvas" in page
        for asset in ("app.js", "style.css"):
            async with http.get(url(server, f"/static/{asset}")) as res:
                assert res.status == 200
        async with http.get(url(server, "/healthz")) as res:
            assert await res.json() == {"status": "ok", "sessions": 0, "max_sessions": 3}
        async with http.ws_connect(url(server, "/v1/realtime", "ws")) as ws:
            await ws.receive_json()
            async with http.get(url(server, "/metrics")) as res:
                assert 'voice_sessions_active{transport="realtime"} 1.0' in await res.text()
        async with http.get(url(server, "/no/such/page")) as res:
            assert res.status == 404
