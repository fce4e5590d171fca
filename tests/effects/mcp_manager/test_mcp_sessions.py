"""Each thread's share of the MCP sessions, and its sessions its own (``session_quota``):
against the live server and the SDK's session manager, over raw HTTP."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx2
import trio
from mcp_kit import ACCEPT, INIT, call, make_config, open_client, wait_for

from threadspindle.effects.mcp_manager import ProcessManager, serve_process_manager
from threadspindle.effects.mcp_manager.auth import CALLER_SCOPE_KEY
from threadspindle.effects.mcp_manager.session_quota import SessionQuota

PING = {"jsonrpc": "2.0", "id": 2, "method": "ping"}


def _quota(manager: ProcessManager) -> SessionQuota:
    quota = manager.guard.app
    assert isinstance(quota, SessionQuota)
    return quota


async def _start(nursery: trio.Nursery, tmp_path: Path, share: int) -> ProcessManager:
    config = make_config(tmp_path, max_sessions_per_thread=share)
    return await nursery.start(serve_process_manager, config)


class Agent:
    """Raw HTTP as one thread's agent: opens sessions and pings in them."""

    def __init__(self, http: httpx2.AsyncClient, manager: ProcessManager, thread: str) -> None:
        self.http = http
        self.url = manager.url
        self.auth = {"Authorization": f"Bearer {manager.token_for_thread(thread)}"}

    async def open(self) -> httpx2.Response:
        return await self.http.post(self.url, json=INIT, headers={**ACCEPT, **self.auth})

    async def session(self) -> str:
        response = await self.open()
        assert response.status_code == 200, response.text
        return response.headers["mcp-session-id"]

    def headers(self, session: str) -> dict[str, str]:
        return {
            **ACCEPT,
            **self.auth,
            "mcp-session-id": session,
            "mcp-protocol-version": "2025-06-18",
        }

    async def ping(self, session: str) -> int:
        response = await self.http.post(self.url, json=PING, headers=self.headers(session))
        return response.status_code


async def test_a_thread_past_its_share_ends_its_own_least_recently_used_session(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    manager = await _start(nursery, tmp_path, share=3)
    async with httpx2.AsyncClient(timeout=30) as http:
        a = Agent(http, manager, "discord:111")
        b = Agent(http, manager, "discord:222")
        a1, a2, a3 = [await a.session() for _ in range(3)]
        b1 = await b.session()
        assert await a.ping(a1) == 200  # a1 used last: a2 is now the least recently used
        a4 = await a.session()
        assert await a.ping(a2) == 404  # ended to make room: the SDK no longer knows it
        assert [await a.ping(s) for s in (a1, a3, a4)] == [200, 200, 200]
        assert await b.ping(b1) == 200  # the other thread is not touched
        quota = _quota(manager)
        assert quota.evicted == 1
        assert (quota.sessions_of("discord:111"), quota.sessions_of("discord:222")) == (3, 1)
        # An agent opening sessions in a loop keeps only its share, and the other
        # thread still opens new ones.
        for _ in range(20):
            await a.session()
        assert quota.sessions_of("discord:111") == 3
        assert await b.ping(await b.session()) == 200
        assert await b.ping(b1) == 200


async def test_a_session_answers_only_the_thread_that_opened_it(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    manager = await _start(nursery, tmp_path, share=4)
    async with httpx2.AsyncClient(timeout=30) as http:
        a = Agent(http, manager, "discord:111")
        b = Agent(http, manager, "discord:222")
        mine = await a.session()
        # B with A's session id: the same answer as for an id nobody knows.
        stolen = await http.post(manager.url, json=PING, headers=b.headers(mine))
        unknown = await http.post(manager.url, json=PING, headers=b.headers("0" * 32))
        assert (stolen.status_code, unknown.status_code) == (404, 404)
        assert stolen.json()["error"]["message"] == unknown.json()["error"]["message"]
        # Nor can B end it.
        gone = await http.delete(manager.url, headers=b.headers(mine))
        assert gone.status_code == 404
        assert await a.ping(mine) == 200
        assert _quota(manager).foreign == 2
        # A ends it itself: forgotten here as in the SDK.
        assert (await http.delete(manager.url, headers=a.headers(mine))).status_code == 200
        assert await a.ping(mine) == 404
        assert _quota(manager).sessions_of("discord:111") == 0


async def test_a_new_session_is_refused_only_while_all_of_the_threads_are_busy(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    manager = await _start(nursery, tmp_path, share=2)
    async with httpx2.AsyncClient(timeout=30) as http:
        a = Agent(http, manager, "discord:111")
        s1, s2 = await a.session(), await a.session()
        await wait_for(lambda: _quota(manager).busy_of("discord:111") == 0)
        # A standalone event stream (GET) keeps a request in flight in each session.
        async with http.stream("GET", manager.url, headers=a.headers(s1)) as stream1:
            assert stream1.status_code == 200
            async with http.stream("GET", manager.url, headers=a.headers(s2)) as stream2:
                assert stream2.status_code == 200
                refused = await a.open()
                assert refused.status_code == 503
                assert "too many open sessions for this thread" in refused.text
                # Another thread is not held up by it.
                assert await Agent(http, manager, "discord:222").session()
            # s2's stream ended (once the server has seen it go): s2 is idle, and ends for
            # the new session.
            await wait_for(lambda: _quota(manager).busy_of("discord:111") == 1)
            s3 = await a.session()
            assert await a.ping(s2) == 404
            assert await a.ping(s3) == 200
        assert _quota(manager).refused == 1


async def test_the_sdk_client_works_through_its_share(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    """The official client, once more than the share in a row (a per-turn CLI: a new
    session each turn): every one of them works."""
    manager = await _start(nursery, tmp_path, share=2)
    token = manager.token_for_thread("discord:111")
    for _ in range(4):
        async with open_client(manager.url, token) as client:
            assert (await call(client, "list_processes"))["processes"] == []
    assert _quota(manager).sessions_of("discord:111") <= 2


# --- idleness, with a clock of the test's own -----------------------------------------------


class _Sessions:
    """Stands in for the SDK's app here: opens a session per request without an id, and
    answers 200 to a request in a session it opened (404 after its DELETE)."""

    def __init__(self) -> None:
        self.open: set[str] = set()
        self.n = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        headers = dict(scope["headers"])
        session = headers.get(b"mcp-session-id")
        reply: list[tuple[bytes, bytes]] = []
        if session is None:
            self.n += 1
            new = f"s{self.n}"
            self.open.add(new)
            reply.append((b"mcp-session-id", new.encode()))
            status = 200
        elif session.decode() in self.open:
            status = 200
            if scope["method"] == "DELETE":
                self.open.discard(session.decode())
        else:
            status = 404
        await send({"type": "http.response.start", "status": status, "headers": reply})
        await send({"type": "http.response.body", "body": b""})


async def _ask(quota: SessionQuota, thread: str, session: str | None = None) -> tuple[int, str]:
    headers = [(b"host", b"127.0.0.1:1")]
    if session is not None:
        headers.append((b"mcp-session-id", session.encode()))
    scope = {"type": "http", "method": "POST", "headers": headers, CALLER_SCOPE_KEY: thread}
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await quota(scope, receive, send)
    start = sent[0]
    new = dict(start.get("headers") or []).get(b"mcp-session-id", b"").decode()
    return start["status"], new


async def test_a_session_idle_past_the_sdks_timeout_is_forgotten() -> None:
    now = [0.0]
    inner = _Sessions()
    quota = SessionQuota(inner, limit=2, idle_s=60.0, grace_s=10.0, clock=lambda: now[0])
    _, s1 = await _ask(quota, "t")
    now[0] = 30.0
    _, s2 = await _ask(quota, "t")
    assert quota.sessions_of("t") == 2
    now[0] = 65.0  # s1 idle past the SDK's timeout, but not past the grace: still counted
    status, s3 = await _ask(quota, "t")
    assert status == 200 and quota.evicted == 1 and s1 not in inner.open
    now[0] = 106.0  # s2 idle past both (the SDK closed it), s3 not
    status, s4 = await _ask(quota, "t")
    assert status == 200 and quota.evicted == 1  # room without ending anything
    assert quota.sessions_of("t") == 2 and inner.open == {s2, s3, s4}
    now[0] = 107.0
    await _ask(quota, "t")  # full: s3, the least recently used, is ended by a DELETE
    assert quota.evicted == 2 and s3 not in inner.open
    now[0] = 1000.0
    await _ask(quota, "u")  # any new session tidies every thread's idle ones
    assert quota.sessions_of("t") == 0 and quota.sessions_of("u") == 1
