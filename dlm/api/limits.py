"""What one server accepts: body size, concurrent requests, and who may call it at all.

Each limit answers with an OpenAI error object, so a client sees *which* limit it hit.
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from dlm.api.errors import APIError, bad_request
from dlm.api.json_text import JsonTextError, loads_client_json


@dataclass(frozen=True)
class ApiLimits:
    max_body_bytes: int = 1 << 20
    max_prompt_tokens: int = 4096
    max_completion_tokens: int = 1024
    max_concurrent: int = 16
    max_n: int = 4
    max_audio_bytes: int = 25 << 20  # OpenAI's own upload limit for transcriptions
    max_speech_chars: int = 4096


class ConcurrencyGate:
    """Counts requests in flight; the one over the limit gets 429 at once rather than queueing unseen."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.active = 0

    @contextmanager
    def slot(self) -> Iterator[None]:
        if self.active >= self.limit:
            raise APIError(429, f"too many concurrent requests (limit {self.limit}); retry shortly",
                           code="rate_limit_exceeded", retry_after=1)
        self.active += 1
        try:
            yield
        finally:
            self.active -= 1


async def read_body(request: web.Request, max_bytes: int) -> bytes:
    """The raw body, refused with 413 as soon as it passes `max_bytes` (never buffered beyond that)."""
    if request.content_length is not None and request.content_length > max_bytes:
        raise _too_large(max_bytes)
    data = bytearray()
    try:
        async for chunk in request.content.iter_chunked(1 << 16):
            data += chunk
            if len(data) > max_bytes:
                raise _too_large(max_bytes)
    except web.RequestPayloadError as exc:  # a body its Content-Encoding does not decode, a broken chunked framing
        reason = str(exc).split("message:", 1)[-1].strip()  # aiohttp words it "400, message: <reason>"
        raise bad_request(f"the request body cannot be read: {reason}", code="invalid_body") from None
    return bytes(data)


async def read_json(request: web.Request, max_bytes: int) -> dict[str, Any]:
    raw = await read_body(request, max_bytes)
    try:
        body = loads_client_json(raw)
    except JsonTextError as exc:
        raise bad_request(f"request body is not valid JSON: {exc}", code="invalid_json") from None
    if not isinstance(body, dict):
        raise bad_request("request body must be a JSON object", code="invalid_json")
    return body


def _too_large(max_bytes: int) -> APIError:
    return APIError(413, f"request body too large (limit {max_bytes} bytes)", code="request_too_large")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_bind(host: str, api_key: str | None) -> None:
    """Refuse to serve a non-loopback address without a key: the model would be open to the network."""
    if not is_loopback(host) and not api_key:
        raise SystemExit(f"binding {host} (not loopback) requires an API key: pass --api-key or set DLM_API_KEY")


def bearer_auth_middleware(api_key: str, prefix: str = "/v1/"):
    """Require `Authorization: Bearer <api_key>` on every path under `prefix`."""

    @web.middleware
    async def middleware(request: web.Request, handler) -> web.StreamResponse:
        if request.path.startswith(prefix):
            header = request.headers.get("Authorization", "")
            scheme, _, token = header.partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), api_key.encode()):
                raise APIError(401, "missing or wrong API key: send 'Authorization: Bearer <key>'",
                               code="invalid_api_key")
        return await handler(request)

    return middleware
