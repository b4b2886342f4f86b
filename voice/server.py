"""The one server: ``python -m voice serve`` puts every transport and the OpenAI API on one aiohttp app.

Routes: ``/`` the browser client (``web/``), ``POST /v1/realtime/calls`` WebRTC, ``/v1/realtime`` the
Realtime websocket, ``/phone/twilio`` Twilio Media Streams, the OpenAI HTTP API (``/v1/chat/...``,
``/v1/audio/...``) when present, ``/metrics`` (Prometheus) and ``/healthz``.

It binds 127.0.0.1 by default. Any other address needs a bearer token (``--token`` or ``VOICE_TOKEN``,
never defaulted): everything but the page and the health check then requires it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hmac
import logging
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from dlm.api.errors import APIError, error_middleware
from dlm.api.limits import is_loopback
from dlm.cli_args import at_least_one, cannot_listen, port
from voice.transports import phone, realtime_ws, twilio, webrtc
from voice.transports.sessions import SESSIONS, ConversationFactory, SessionRegistry

if TYPE_CHECKING:
    from voice.config import PipelineConfig
    from voice.resources import Resources

log = logging.getLogger(__name__)

WEB_DIR = Path(__file__).resolve().parents[1] / "web"
TOKEN_ENV = "VOICE_TOKEN"
PROTECTED_PREFIXES = ("/v1/", "/phone/", "/metrics")
METRICS = web.AppKey("metrics", CollectorRegistry)


@dataclass(frozen=True)
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = 8080
    token: str | None = None
    max_sessions: int = 4
    web_dir: Path = WEB_DIR
    webrtc: webrtc.WebRtcConfig = field(default_factory=webrtc.WebRtcConfig)


class InsecureBindError(SystemExit):
    """Refusal to serve a network address with no token."""


def check_bind(config: ServerConfig) -> None:
    """Binding beyond loopback opens the assistant to the network: only with a token."""
    if not is_loopback(config.host) and not config.token:
        raise InsecureBindError(
            f"refusing to bind {config.host} (not loopback) without a bearer token: "
            f"pass --token or set {TOKEN_ENV}")


def _presented_token(request: web.Request) -> str:
    """The token from the header, a browser websocket's subprotocol (as OpenAI's), or ``?token=``."""
    scheme, _, value = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() == "bearer":
        return value.strip()
    for proto in request.headers.get("Sec-WebSocket-Protocol", "").split(","):
        if proto.strip().startswith("openai-insecure-api-key."):
            return proto.strip().removeprefix("openai-insecure-api-key.")
    return request.query.get("token", "")  # phone bridges (Twilio) can only put it in the URL


def token_middleware(token: str) -> Callable[..., Awaitable[web.StreamResponse]]:
    @web.middleware
    async def middleware(request: web.Request, handler) -> web.StreamResponse:
        if request.path.startswith(PROTECTED_PREFIXES) and not hmac.compare_digest(
                _presented_token(request).encode(), token.encode()):
            return APIError(401, "missing or wrong token: send 'Authorization: Bearer <token>'",
                            code="invalid_api_key").response()
        return await handler(request)

    return middleware


def _mount_openai_api(app: web.Application, resources: Resources) -> None:
    """/v1/models, /v1/chat/completions and /v1/audio/* on the models the voice pipeline already loaded."""
    from dlm.api.server import add_openai_routes
    from voice.audio_api import AudioModels, add_audio_routes

    add_openai_routes(app, resources.engine, resources.config.lm.checkpoint_path().name,
                      copy_bias=resources.config.lm.copy_bias)
    add_audio_routes(app, AudioModels(asr=resources.asr, tts=resources.tts))


def create_app(new_conversation: ConversationFactory, config: ServerConfig | None = None,
               metrics: CollectorRegistry | None = None, resources: Resources | None = None) -> web.Application:
    """The aiohttp app; ``new_conversation`` makes one :class:`~voice.events.Conversation` per caller.

    With ``resources`` the OpenAI HTTP API is mounted too, sharing the pipeline's engine, ASR and TTS.
    """
    config = config or ServerConfig()
    check_bind(config)
    app = web.Application(middlewares=[error_middleware], client_max_size=1 << 20)
    if config.token:
        app.middlewares.append(token_middleware(config.token))
    metrics = metrics or CollectorRegistry()
    app[METRICS] = metrics
    app[SESSIONS] = SessionRegistry(new_conversation, config.max_sessions, metrics)
    webrtc.add_routes(app, config.webrtc)
    realtime_ws.add_routes(app)
    app.router.add_get("/phone/twilio", phone.handler(twilio.TwilioSerializer))
    if resources is not None:
        _mount_openai_api(app, resources)
    app.router.add_get("/healthz", _health)
    app.router.add_get("/metrics", _metrics)
    app.router.add_get("/", _index(config.web_dir))
    app.router.add_static("/static/", config.web_dir)
    app.on_shutdown.append(_close_sessions)
    return app


def _index(web_dir: Path) -> Callable[[web.Request], Awaitable[web.FileResponse]]:
    async def index(request: web.Request) -> web.FileResponse:
        return web.FileResponse(web_dir / "index.html")

    return index


async def _health(request: web.Request) -> web.Response:
    registry = request.app[SESSIONS]
    return web.json_response({"status": "ok", "sessions": len(registry), "max_sessions": registry.max_sessions})


async def _metrics(request: web.Request) -> web.Response:
    body = generate_latest(request.app[METRICS])
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


async def _close_sessions(app: web.Application) -> None:
    await app[SESSIONS].close_all()


# ---------------------------------------------------------------------------------------------- CLI

def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``serve`` options (the CLI calls this to build its subcommand)."""
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=port, default=8080, help="port (default 8080)")
    parser.add_argument("--token", default=None,
                        help=f"bearer token clients must send (or set {TOKEN_ENV}); required off loopback")
    parser.add_argument("--max-sessions", type=at_least_one, default=4, help="concurrent calls before refusing")
    parser.add_argument("--stun", action="append", default=[], metavar="URL",
                        help="ICE server for WebRTC (e.g. stun:stun.example.org:3478); none by default")


def server_config(args: argparse.Namespace) -> ServerConfig:
    host = getattr(args, "host", "127.0.0.1")
    return ServerConfig(
        host=host,
        port=getattr(args, "port", 8080),
        token=(getattr(args, "token", None) or os.environ.get(TOKEN_ENV) or "").strip() or None,  # blank: none
        max_sessions=getattr(args, "max_sessions", 4),
        webrtc=webrtc.WebRtcConfig(ice_servers=tuple(getattr(args, "stun", ()) or ()),
                                   loopback_only=is_loopback(host)),
    )


def main(args: argparse.Namespace) -> int:
    """``python -m voice serve``: load the models once, then serve until interrupted."""
    from voice.config import load_config

    config = server_config(args)
    check_bind(config)  # before spending seconds on loading models
    pipeline_config = load_config(getattr(args, "config", "default"))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(config, pipeline_config))
    return 0


async def _serve(config: ServerConfig, pipeline_config: PipelineConfig) -> None:
    from voice.pipeline import VoicePipeline
    from voice.resources import Resources

    resources = await Resources.load(pipeline_config)
    app = create_app(lambda: VoicePipeline(resources), config, resources.metrics.registry, resources)
    runner = web.AppRunner(app, handler_cancellation=True)
    await runner.setup()
    try:
        try:
            await web.TCPSite(runner, config.host, config.port).start()
        except OSError as err:  # the port is taken, or the address is not this machine's
            raise cannot_listen(config.host, config.port, err) from None
        print(f"voice server on http://{config.host}:{config.port}/ (Ctrl-C stops it)", flush=True)
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()
        resources.close()
