"""The OpenAI-compatible HTTP server: `create_app` for a standalone app, `add_openai_routes` to mount the
same routes on an existing aiohttp app (the voice server does), and `main` for `python -m dlm serve`.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

from aiohttp import web

from dlm.api.chat import chat_completions
from dlm.api.errors import APIError, error_middleware
from dlm.api.limits import ApiLimits, bearer_auth_middleware, check_bind
from dlm.api.state import STATE, ApiState
from dlm.cli import DEMO_CHECKPOINT
from dlm.cli_args import (
    ArgumentParser,
    add_placement,
    at_least_one,
    cannot_listen,
    finite_float,
    host,
    port,
    refusal,
)
from dlm.decoding.logit_bias import COPY_FOLLOW

_CREATED = int(time.time())


def add_openai_routes(app: web.Application, engine: Any, model_name: str, limits: ApiLimits | None = None,
                      api_key: str | None = None, decode_opts: dict[str, Any] | None = None,
                      copy_bias: float = COPY_FOLLOW) -> ApiState:
    """Mount /v1/models and /v1/chat/completions on `app` (before it starts); returns the shared state.

    `decode_opts` are raw engine knobs applied to every free-text generation (the benchmark's
    autoregressive baseline serves the same engine with 1-token blocks this way). `copy_bias` is the logit a
    reply's copied phrase gets (`dlm.decoding.logit_bias`; 0 turns it off).
    """
    state = ApiState(engine, model_name, limits or ApiLimits(), dict(decode_opts or {}), copy_bias)
    app[STATE] = state
    if error_middleware not in app.middlewares:
        app.middlewares.append(error_middleware)
    if api_key:
        app.middlewares.append(bearer_auth_middleware(api_key))
    app.router.add_get("/v1/models", list_models)
    app.router.add_get("/v1/models/{model}", get_model)
    app.router.add_post("/v1/chat/completions", chat_completions)
    return state


def create_app(engine: Any, model_name: str, limits: ApiLimits | None = None,
               api_key: str | None = None, copy_bias: float = COPY_FOLLOW) -> web.Application:
    app = web.Application()
    add_openai_routes(app, engine, model_name, limits, api_key, copy_bias=copy_bias)
    return app


def _model_object(name: str) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": _CREATED, "owned_by": "dlm"}


async def list_models(request: web.Request) -> web.Response:
    return web.json_response({"object": "list", "data": [_model_object(request.app[STATE].model_name)]})


async def get_model(request: web.Request) -> web.Response:
    name = request.match_info["model"]
    if name != request.app[STATE].model_name:
        raise APIError(404, f"The model {name!r} does not exist", "model", "model_not_found")
    return web.json_response(_model_object(name))


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(prog="python -m dlm serve", description="OpenAI-compatible API on a diffusion LM")
    demo = DEMO_CHECKPOINT if (DEMO_CHECKPOINT / "config.json").exists() else None
    p.add_argument("--model", default=demo, required=demo is None,
                   help="checkpoint directory (default: the embedded demo checkpoint)")
    p.add_argument("--host", type=host, default="127.0.0.1",
                   help="address to listen on (default %(default)s, this machine only; another needs --api-key)")
    p.add_argument("--port", type=port, default=8000, help="TCP port to listen on (default %(default)s)")
    add_placement(p)
    p.add_argument("--model-name", help="the id clients send as 'model' (default: the directory name)")
    p.add_argument("--api-key", default=os.environ.get("DLM_API_KEY"),
                   help="bearer token clients must send (required off loopback; default $DLM_API_KEY)")
    p.add_argument("--max-concurrent", type=at_least_one, default=ApiLimits.max_concurrent,
                   help="requests served at once; one more is answered 429 at once, not queued (default %(default)s)")
    p.add_argument("--max-prompt-tokens", type=at_least_one, default=ApiLimits.max_prompt_tokens,
                   help="longest prompt, in tokens, with the chat template applied; a longer one is answered 400 "
                        "(default %(default)s)")
    p.add_argument("--copy-bias", type=finite_float, default=COPY_FOLLOW,
                   help="logit added to the next token of a phrase a reply is copying from the caller's last "
                        "message, twice that after a tool's result (default %(default)s; 0 turns it off)")
    return p


def main(argv: list[str] | None = None) -> int:
    """A bad value, checkpoint or address is one line on stderr and exit status 2 (`dlm.cli_args.refusal`)."""
    args = build_parser().parse_args(argv)
    try:
        check_bind(args.host, args.api_key)
    except SystemExit as exc:  # its message: no API key off loopback
        raise refusal(str(exc.code)) from None
    from dlm.config import CheckpointError
    from dlm.engine import Engine  # the engine pulls in torch: only when actually serving

    try:
        engine = Engine.from_dir(args.model, args.dtype, args.device)
    except (CheckpointError, ValueError) as exc:  # ValueError: a GPU that is not there
        raise refusal(str(exc)) from None
    name = args.model_name or os.path.basename(os.path.normpath(args.model))
    limits = ApiLimits(max_concurrent=args.max_concurrent, max_prompt_tokens=args.max_prompt_tokens)
    app = create_app(engine, name, limits, args.api_key, args.copy_bias)
    banner = f"serving {name!r} on http://{args.host}:{args.port}/v1"
    # handler_cancellation: a client that disconnects cancels its handler, which frees its engine session;
    # run_app calls `print` once its socket is bound, so a taken port is the one line of cannot_listen alone
    try:
        web.run_app(app, host=args.host, port=args.port, handler_cancellation=True,
                    print=lambda _running_on: print(banner, flush=True))
    except OSError as exc:  # the port is taken, or the address is not this machine's
        raise cannot_listen(args.host, args.port, exc) from None
    return 0
