"""Live sessions of one server: a hard cap on how many, and one place that frees each exactly once.

Every transport opens its conversation here, so the limit covers browsers, phones and Realtime clients
together, a refusal is the same clear message everywhere, and an abrupt disconnect on any of them ends
in :meth:`Session.close`, which releases the pipeline's LM session, buffers and tasks.
"""

from __future__ import annotations

import inspect
import itertools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge

from voice.events import Conversation

log = logging.getLogger(__name__)

ConversationFactory = Callable[[], Conversation | Awaitable[Conversation]]


class SessionLimitError(RuntimeError):
    """The server already holds its maximum number of sessions."""


@dataclass(eq=False)
class Session:
    """One caller's conversation plus the clean-ups its transport registered."""

    id: str
    kind: str
    conversation: Conversation
    registry: SessionRegistry
    _cleanups: list[Callable[[], Awaitable[None]]] = field(default_factory=list)
    closed: bool = False

    def on_close(self, cleanup: Callable[[], Awaitable[None]]) -> None:
        """Run ``cleanup`` (e.g. close a peer connection) when the session closes, before the conversation."""
        self._cleanups.append(cleanup)

    async def close(self) -> None:
        """Free everything the session holds; safe to call any number of times from any path."""
        if self.closed:
            return
        self.closed = True
        for cleanup in reversed(self._cleanups):
            try:
                await cleanup()
            except Exception:  # one failing clean-up must not keep the others from running
                log.exception("session %s: clean-up failed", self.id)
        try:
            await self.conversation.close()
        finally:
            self.registry._forget(self)


class SessionRegistry:
    """Opens conversations up to ``max_sessions`` and keeps count (exported to Prometheus)."""

    def __init__(self, new_conversation: ConversationFactory, max_sessions: int,
                 metrics: CollectorRegistry | None = None) -> None:
        if max_sessions < 1:
            raise ValueError(f"max_sessions must be at least 1, got {max_sessions}")
        self._new_conversation = new_conversation
        self.max_sessions = max_sessions
        self._sessions: dict[str, Session] = {}
        self._opening = 0
        self._ids = itertools.count(1)
        metrics = metrics or CollectorRegistry()
        self._active = Gauge("voice_sessions_active", "Sessions open now, by transport", ["transport"],
                             registry=metrics)
        self._refused = Counter("voice_sessions_refused", "Sessions refused at the limit", ["transport"],
                                registry=metrics)

    def __len__(self) -> int:
        return len(self._sessions)

    def sessions(self) -> list[Session]:
        return list(self._sessions.values())

    def get(self, session_id: str) -> Session | None:
        return self._sessions.get(session_id)

    async def open(self, kind: str) -> Session:
        """A new session, or :class:`SessionLimitError` with a message a caller can act on."""
        if len(self._sessions) + self._opening >= self.max_sessions:
            self._refused.labels(kind).inc()
            raise SessionLimitError(
                f"server is at its limit of {self.max_sessions} concurrent sessions; try again later")
        self._opening += 1  # counts against the limit while the factory awaits
        try:
            made = self._new_conversation()
            conversation = await made if inspect.isawaitable(made) else made
        finally:
            self._opening -= 1
        session = Session(f"sess_{next(self._ids)}", kind, conversation, self)
        self._sessions[session.id] = session
        self._active.labels(kind).inc()
        return session

    async def close_all(self) -> None:
        for session in self.sessions():
            await session.close()

    def _forget(self, session: Session) -> None:
        if self._sessions.pop(session.id, None) is not None:
            self._active.labels(session.kind).dec()


SESSIONS = web.AppKey("sessions", SessionRegistry)
"""Where every transport finds the server's registry on the aiohttp app."""
