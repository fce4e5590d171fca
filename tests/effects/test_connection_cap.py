"""The cap on a hypercorn server's open connections (``effects/connection_cap.py``), with a
real hypercorn on 127.0.0.1: past the cap a new connection is closed at once and holds no
descriptor; below it again, connections are served; a server without a cap is unaffected;
and a hypercorn release that moved the name the cap hooks into is an error, not a cap
that silently does nothing."""

from __future__ import annotations

import logging
import os
import resource
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import hypercorn.trio.run as hypercorn_run
import pytest
import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.trio import serve as hypercorn_serve
from hypercorn.trio.tcp_server import TCPServer

from threadspindle.effects.connection_cap import ConnectionCap, cap_connections

LIMIT = 5


async def _app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    await send(
        {"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]}
    )
    await send({"type": "http.response.body", "body": b"ok"})


@asynccontextmanager
async def _server(limit: int | None) -> AsyncIterator[tuple[int, ConnectionCap | None]]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = HypercornConfig()
    config.bind = [f"fd://{sock.detach()}"]
    config.accesslog = None
    config.errorlog = logging.getLogger("hypercorn.error")
    config.graceful_timeout = 0.5
    cap = cap_connections(config, limit, "the test server") if limit is not None else None
    async with trio.open_nursery() as nursery:
        await nursery.start(hypercorn_serve, _app, config)
        yield port, cap
        nursery.cancel_scope.cancel()


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


async def _get(port: int) -> bytes:
    """One whole request on a new connection; what came back before the server closed it."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        received = b""
        with trio.fail_after(5):
            while chunk := await stream.receive_some():
                received += chunk
    return received


async def _closed_at_once(stream: trio.SocketStream) -> bool:
    with trio.fail_after(2):  # the server's keep-alive time (5 s) is far longer
        try:
            return await stream.receive_some() == b""
        except trio.BrokenResourceError:
            return True  # (reset: closed too)


async def test_past_the_cap_a_connection_is_closed_at_once_and_below_it_served() -> None:
    async with _server(LIMIT) as (port, cap):
        assert cap is not None
        before = _open_fds()
        held = [await trio.open_tcp_stream("127.0.0.1", port) for _ in range(LIMIT)]
        with trio.fail_after(5):
            while cap.open < LIMIT:
                await trio.sleep(0.01)
        extra = [await trio.open_tcp_stream("127.0.0.1", port) for _ in range(20)]
        for stream in extra:
            assert await _closed_at_once(stream)
        # The process holds our 25 ends and the server's LIMIT, not 20 more.
        assert _open_fds() - before == len(held) + len(extra) + LIMIT
        assert (cap.open, cap.peak, cap.refused) == (LIMIT, LIMIT, 20)
        for stream in extra:
            await stream.aclose()
        # A held connection still gets its answer; once one is gone, a new one is served.
        await held[0].send_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        with trio.fail_after(5):
            answer = b""
            while chunk := await held[0].receive_some():
                answer += chunk
        assert answer.startswith(b"HTTP/1.1 200") and answer.endswith(b"ok")
        await held[0].aclose()
        with trio.fail_after(5):
            while cap.open >= LIMIT:
                await trio.sleep(0.01)
        assert (await _get(port)).endswith(b"ok")
        for stream in held[1:]:
            await stream.aclose()
        with trio.fail_after(5):
            while cap.open:
                await trio.sleep(0.01)
        assert cap.peak == LIMIT


async def test_a_server_without_a_cap_serves_as_before() -> None:
    async with _server(LIMIT) as (_, cap), _server(None) as (port, none):
        assert cap is not None and none is None
        held = [await trio.open_tcp_stream("127.0.0.1", port) for _ in range(LIMIT * 3)]
        assert (await _get(port)).endswith(b"ok")
        for stream in held:
            await stream.aclose()
        assert cap.refused == 0


def test_a_limit_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        cap_connections(HypercornConfig(), 0, "the test server")


def test_a_moved_hook_is_an_error_not_a_silent_no_op(monkeypatch: pytest.MonkeyPatch) -> None:
    # The cap works by the name hypercorn's trio worker makes each connection with.
    assert issubclass(hypercorn_run.TCPServer, TCPServer)

    class Someone(TCPServer):
        pass

    monkeypatch.setattr(hypercorn_run, "TCPServer", Someone)
    with pytest.raises(RuntimeError, match="not hypercorn's"):
        cap_connections(HypercornConfig(), LIMIT, "the test server")


def test_a_low_open_file_limit_lowers_every_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    # Where the limit stays at 1,024 (a container that refuses to raise it), 4,096
    # connections would take every descriptor before the cap did anything.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    monkeypatch.setattr(resource, "getrlimit", lambda which: (1024, hard))
    assert cap_connections(HypercornConfig(), 4096, "the test server").limit == 128
    assert cap_connections(HypercornConfig(), 64, "the test server").limit == 64
    monkeypatch.setattr(resource, "getrlimit", lambda which: (40, hard))
    assert cap_connections(HypercornConfig(), 4096, "the test server").limit == 16
    monkeypatch.setattr(resource, "getrlimit", lambda which: (resource.RLIM_INFINITY, hard))
    assert cap_connections(HypercornConfig(), 4096, "the test server").limit == 4096
