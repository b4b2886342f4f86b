"""Run an aiohttp app on 127.0.0.1 in a background thread: for tests and benchmarks that drive it with a
blocking client (the official `openai` package) from the main thread."""

from __future__ import annotations

import asyncio
import threading

from aiohttp import web


class LiveServer:
    def __init__(self, app: web.Application, host: str = "127.0.0.1", port: int = 0) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="live-server", daemon=True)
        self._thread.start()
        # Cancelling the handler when the client disconnects is what frees a stream's engine session at once.
        self._runner = web.AppRunner(app, handler_cancellation=True)
        self.host = host
        self.port: int = self.call(self._start(port))

    async def _start(self, port: int) -> int:
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, port)
        await site.start()
        return self._runner.addresses[0][1]

    def call(self, coro, timeout: float = 60.0):
        """Run a coroutine on the server's loop and wait for its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def close(self) -> None:
        self.call(self._runner.cleanup())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()

    def __enter__(self) -> LiveServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
