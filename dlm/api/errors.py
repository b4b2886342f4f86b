"""OpenAI-shaped error bodies, so client libraries raise their usual typed exceptions with our message."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from aiohttp import web

log = logging.getLogger(__name__)

# HTTP status -> the `type` OpenAI puts in its error object for that status.
_TYPES = {
    400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
    404: "invalid_request_error", 405: "invalid_request_error", 413: "invalid_request_error",
    415: "invalid_request_error", 429: "rate_limit_error", 500: "server_error", 503: "server_error",
}
_CODES = {404: "not_found", 405: "method_not_allowed", 413: "request_too_large"}


@dataclass
class APIError(Exception):
    """A request the server refuses; `param` names the offending field the way OpenAI does."""

    status: int
    message: str
    param: str | None = None
    code: str | None = None
    retry_after: int | None = None  # seconds, sent as Retry-After: when a refused request may be tried again

    def __str__(self) -> str:
        return self.message

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": _TYPES.get(self.status, "invalid_request_error"),
                          "param": self.param, "code": self.code}}

    def response(self) -> web.Response:
        headers = {"Retry-After": str(self.retry_after)} if self.retry_after is not None else None
        return web.json_response(self.body(), status=self.status, headers=headers)


def bad_request(message: str, param: str | None = None, code: str | None = None) -> APIError:
    return APIError(400, message, param, code)


@web.middleware
async def error_middleware(request: web.Request, handler) -> web.StreamResponse:
    """Turn every refusal under /v1/, aiohttp's own (404, 405) and crashes included, into an OpenAI error.

    Other paths (a voice server's pages that mount these routes) keep their own error handling.
    """
    if not request.path.startswith("/v1/"):
        return await handler(request)
    try:
        return await handler(request)
    except APIError as err:
        return err.response()
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        default_text = f"{exc.status}: {exc.reason}"
        message = exc.text if exc.text and exc.text != default_text else f"{exc.reason}: {request.path}"
        return APIError(exc.status, message, code=_CODES.get(exc.status)).response()
    except Exception:
        log.exception("unhandled error in %s %s", request.method, request.path)
        return APIError(500, "internal server error; see the server log").response()
