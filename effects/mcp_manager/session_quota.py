"""``SessionQuota``: each thread's share of the MCP sessions, and its sessions its own.

The SDK's session manager caps the sessions of the whole server (``max_sessions``) and
closes one after ``session_idle_timeout`` without a request in flight, but it does not know
threads. Without a share per thread, one agent opening sessions in a loop (a model's
choice, or a per-turn CLI that opens one per turn and never ends it) would fill the
server's cap and lock every other thread's agent out until its sessions idled away (30
minutes). And a session is bound to nothing but its id: the SDK checks who uses it only for
callers of its own OAuth, which Spindle's bearer tokens are not.

This middleware sits behind ``BearerGuard`` (which names the caller's thread in the scope)
and in front of the SDK's app. It keeps, per thread, the sessions the thread opened (their
ids from the answer that opened them), each with its requests in flight and when its last
one ended: the SDK's own rule for idleness, so a session the SDK closed for idleness is
forgotten here too.

- **A thread's own.** A request naming a session another thread opened is answered 404
  "Session not found", as the SDK answers an unknown id: it learns nothing.
- **A share each.** A thread that holds ``limit`` sessions and opens one more ends its own
  least recently used idle session first (a ``DELETE`` for it, through the SDK: the way a
  client ends one), so a per-turn CLI's abandoned sessions never lock it out. Only when all
  ``limit`` of them have a request in flight is the new one refused (503, "too many open
  sessions for this thread"). Other threads are never touched.
- A session is forgotten when its ``DELETE`` succeeds, when the SDK answers 404 for it
  (ended on its side), or when it has been idle ``idle_s`` (the SDK's figure) and a grace
  beyond it.

The tables hold at most ``limit`` sessions a thread, and threads with none are dropped.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .auth import CALLER_SCOPE_KEY, OPERATOR

__all__ = ["CALLER_SCOPE_KEY", "SessionQuota"]

log = logging.getLogger(__name__)

_SESSION_HEADER = b"mcp-session-id"


@dataclass
class _Session:
    thread: str
    in_flight: int = 0
    last: float = 0.0  # when its last request ended (or it was opened)


class SessionQuota:
    """ASGI middleware; see the module docstring."""

    def __init__(
        self,
        app: Any,
        *,
        limit: int,
        idle_s: float,
        grace_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.app = app
        self.limit = limit
        self.idle_s = idle_s
        # Forgotten here a while after the SDK closed it, never before: a session the SDK
        # still holds is always counted and its thread's alone (a request in between gets
        # the SDK's 404, and is forgotten then).
        self.grace_s = grace_s
        self._clock = clock
        self._sessions: dict[str, _Session] = {}
        self._by_thread: dict[str, dict[str, _Session]] = {}
        self._opening: dict[str, int] = {}
        self.evicted = 0  # idle sessions ended to make room for a new one of their thread
        self.refused = 0  # new sessions refused: every one of the thread's was busy
        self.foreign = 0  # requests naming another thread's session (answered 404)

    def sessions_of(self, thread_id: str) -> int:
        return len(self._by_thread.get(thread_id, ()))

    def busy_of(self, thread_id: str) -> int:
        """How many of the thread's sessions have a request in flight."""
        return sum(1 for s in self._by_thread.get(thread_id, {}).values() if s.in_flight)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        thread = scope.get(CALLER_SCOPE_KEY, OPERATOR)
        session_id = _header(scope, _SESSION_HEADER)
        if session_id is None:
            await self._open(thread, scope, receive, send)
        else:
            await self._use(thread, session_id, scope, receive, send)

    async def _use(self, thread: str, session_id: str, scope: Any, receive: Any, send: Any) -> None:
        session = self._sessions.get(session_id)
        if session is None:  # not one we saw opened: the SDK answers it (404 if unknown)
            await self.app(scope, receive, send)
            return
        if session.thread != thread:
            self.foreign += 1
            await _json_error(send, 404, "Session not found")
            return
        status: list[int] = []
        session.in_flight += 1
        try:
            await self.app(scope, receive, _watching(send, status))
        finally:
            session.in_flight -= 1
            session.last = self._clock()
            ended = status and (
                status[0] == 404 or (scope.get("method") == "DELETE" and status[0] < 300)
            )
            if ended:
                self._forget(session_id)

    async def _open(self, thread: str, scope: Any, receive: Any, send: Any) -> None:
        self._expire()
        mine = self._by_thread.get(thread, {})
        if len(mine) + self._opening.get(thread, 0) >= self.limit:
            idle = [(s.last, sid) for sid, s in mine.items() if s.in_flight == 0]
            if not idle:
                self.refused += 1
                await _json_error(send, 503, "too many open sessions for this thread")
                return
            _, victim = min(idle)
            self._forget(victim)
            self.evicted += 1
        else:
            victim = None
        # Counted from here until its answer says whether it opened one: openings at once
        # (and one waiting for its victim's end) cannot pass the share together.
        self._opening[thread] = self._opening.get(thread, 0) + 1
        opening = [True]
        opened: list[str] = []

        def settle() -> None:
            if opening[0]:
                opening[0] = False
                left = self._opening.get(thread, 0) - 1
                if left > 0:
                    self._opening[thread] = left
                else:
                    self._opening.pop(thread, None)

        async def watch(message: Any) -> None:
            if message["type"] == "http.response.start" and opening[0]:
                new_id = _header({"headers": message.get("headers") or ()}, _SESSION_HEADER)
                if message["status"] < 400 and new_id is not None and new_id not in self._sessions:
                    session = _Session(thread, in_flight=1, last=self._clock())
                    self._sessions[new_id] = session
                    self._by_thread.setdefault(thread, {})[new_id] = session
                    opened.append(new_id)
                settle()  # a session now, or none: no longer opening
            await send(message)

        try:
            if victim is not None:
                try:
                    await self._end_session(victim, scope)
                except Exception:  # the new session matters more; the SDK idles the old out
                    log.exception("ending MCP session %s for a new one failed", victim[:16])
            await self.app(scope, receive, watch)
        finally:
            settle()
            for new_id in opened:
                session = self._sessions.get(new_id)
                if session is not None:
                    session.in_flight -= 1
                    session.last = self._clock()

    async def _end_session(self, session_id: str, scope: Any) -> None:
        """A client's ``DELETE`` for ``session_id``, made to the SDK's app from here (the
        opening request's own scope: its path, host and client, which the SDK checks)."""
        headers = [(k, v) for k, v in scope.get("headers", ()) if k.lower() == b"host"]
        headers.append((_SESSION_HEADER, session_id.encode("latin-1")))
        request = dict(scope, method="DELETE", headers=headers, query_string=b"")
        asked = False

        async def receive() -> dict[str, Any]:
            nonlocal asked
            if not asked:
                asked = True
                return {"type": "http.request", "body": b"", "more_body": False}
            return {"type": "http.disconnect"}

        async def discard(message: Any) -> None:
            pass

        await self.app(request, receive, discard)

    def _expire(self) -> None:
        now = self._clock()
        stale = [
            sid
            for sid, s in self._sessions.items()
            if s.in_flight == 0 and now - s.last >= self.idle_s + self.grace_s
        ]
        for sid in stale:
            self._forget(sid)

    def _forget(self, session_id: str) -> None:
        session = self._sessions.pop(session_id, None)
        if session is None:
            return
        mine = self._by_thread.get(session.thread)
        if mine is not None:
            mine.pop(session_id, None)
            if not mine:
                del self._by_thread[session.thread]


def _header(scope: Any, name: bytes) -> str | None:
    for key, value in scope.get("headers") or ():
        if key.lower() == name:
            return bytes(value).decode("latin-1")
    return None


def _watching(send: Any, status: list[int]) -> Callable[[Any], Any]:
    async def watch(message: Any) -> None:
        if message["type"] == "http.response.start":
            status.append(message["status"])
        await send(message)

    return watch


async def _json_error(send: Any, status: int, message: str) -> None:
    """A JSON-RPC error without a request id, as the SDK's session manager answers."""
    code = -32600 if status == 404 else -32603
    body = json.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message}})
    data = body.encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(data)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": data})
