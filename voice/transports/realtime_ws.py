"""``/v1/realtime``: the OpenAI Realtime websocket, so existing Realtime clients and SDKs can talk to us.

Audio arrives in ``input_audio_buffer.append`` events and leaves in ``response.output_audio.delta`` events
(base64 PCM16 at 24 kHz unless ``session.update`` chose mu-law). Over-long frames beyond the websocket
limit close the socket with 1009; everything else a client gets wrong is an ``error`` event.
"""

from __future__ import annotations

import logging

from aiohttp import WSCloseCode, WSMsgType, web

from voice.transports.realtime_events import error_event
from voice.transports.realtime_session import MAX_EVENT_BYTES, RealtimeSession
from voice.transports.sessions import SESSIONS, SessionLimitError

log = logging.getLogger(__name__)

WS_MAX_MESSAGE = 4 * MAX_EVENT_BYTES
"""Frames up to this size are read and refused politely; beyond it aiohttp closes with 1009."""


async def realtime_websocket(request: web.Request) -> web.WebSocketResponse:
    ws = web.WebSocketResponse(protocols=("realtime",), max_msg_size=WS_MAX_MESSAGE, heartbeat=30)
    await ws.prepare(request)
    try:
        session = await request.app[SESSIONS].open("realtime")
    except SessionLimitError as err:
        await ws.send_json(error_event("event_0", str(err), "session_limit_reached", error_type="server_error"))
        await ws.close(code=WSCloseCode.TRY_AGAIN_LATER, message=b"session limit reached")
        return ws
    realtime = RealtimeSession(session, ws.send_json)
    try:
        await realtime.start()
        async for msg in ws:
            if msg.type in (WSMsgType.TEXT, WSMsgType.BINARY):
                await realtime.handle(msg.data)
            elif msg.type == WSMsgType.ERROR:
                log.info("%s: websocket error: %s", session.id, ws.exception())
                break
    finally:
        await realtime.stop()
        await session.close()
    return ws


def add_routes(app: web.Application) -> None:
    app.router.add_get("/v1/realtime", realtime_websocket)
