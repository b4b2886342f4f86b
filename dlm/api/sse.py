"""Server-sent events as OpenAI streams them: `data: <json>` lines, ending with `data: [DONE]`."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web


async def open_stream(request: web.Request) -> web.StreamResponse:
    resp = web.StreamResponse(headers={
        "Content-Type": "text/event-stream; charset=utf-8",
        "Cache-Control": "no-cache",
        "X-Accel-Buffering": "no",  # a reverse proxy must not hold chunks back
    })
    await resp.prepare(request)
    return resp


async def send_event(resp: web.StreamResponse, payload: dict[str, Any]) -> None:
    await resp.write(b"data: " + json.dumps(payload, ensure_ascii=False).encode() + b"\n\n")


async def send_done(resp: web.StreamResponse) -> None:
    await resp.write(b"data: [DONE]\n\n")
    await resp.write_eof()
