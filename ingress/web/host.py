"""Serving the web chat: hypercorn's trio worker on the trio thread, as the MCP process
manager is served (``effects.mcp_manager.server``).

``serve_web(chat)`` binds the socket first (a port that cannot be had is one clean
``PortUnavailable``), builds the app for the port really bound, hands hypercorn the socket
by its descriptor (``fd://``) and starts with a ``WebServer``: the address and the start
URL that carries the token. It serves until cancelled.

hypercorn's ``read_timeout`` (``READ_TIMEOUT_S``) drops a connection that sends nothing for
that long (by default it is None: a client that sends half a request and stalls is held for
ever). A live stream's client sends nothing while it listens, so the stream ends itself
before that (``app.STREAM_LIFETIME_S``) and the browser's ``EventSource`` reconnects.
"""

from __future__ import annotations

import errno
import logging
import os
import socket
from dataclasses import dataclass

import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.trio import serve as hypercorn_serve

from threadspindle.effects.connection_cap import cap_connections
from threadspindle.ingress.web.app import STREAM_LIFETIME_S, WebChat, build_app
from threadspindle.ingress.web.commands import WebIds
from threadspindle.ingress.web.security import own_name
from threadspindle.runtime.live.ports import ThreadOpener

__all__ = ["PortUnavailable", "WebServer", "serve_web", "web_thread_opener"]

_log = logging.getLogger(__name__)

READ_TIMEOUT_S = 60
assert STREAM_LIFETIME_S < READ_TIMEOUT_S  # else hypercorn cuts every live stream
# Connections held open at once: a browser holds a few per tab (6 at most per host, and a
# live stream each); any local process can open more, and past this each is closed at once
# (``effects/connection_cap.py``) instead of taking the process's descriptors.
MAX_CONNECTIONS = 256


def web_thread_opener(ids: WebIds) -> ThreadOpener:
    """The runtime's ``thread_opener`` in the web chat (``/fork``, ``/btw``): a new web
    thread (the runtime seeds it; the thread list shows it), named by a link to its page."""

    async def opener(source: str, title: str) -> tuple[str, str]:
        thread_id = ids.thread_id()
        name = (title or "fork").replace("[", "(").replace("]", ")")
        return thread_id, f"[{name}](/t/{thread_id})"

    return opener


class PortUnavailable(Exception):
    """The configured port cannot be listened on (taken, or not allowed)."""

    def __init__(self, host: str, port: int, error: OSError) -> None:
        self.host, self.port, self.error = host, port, error
        if error.errno == errno.EADDRINUSE:
            super().__init__(f"{host}:{port} is already in use (another Spindle?)")
        else:
            super().__init__(f"cannot listen on {host}:{port}: {error.strerror or error}")


@dataclass(frozen=True)
class WebServer:
    url: str  # http://127.0.0.1:PORT
    port: int
    token: str

    @property
    def start_url(self) -> str:
        """The URL to open: it carries the token once, the cookie does from then on."""
        return f"{self.url}/?token={self.token}"

    @property
    def named_start_url(self) -> str | None:
        """The same under the start's own name (``security.own_name``), for a server on
        loopback: browsers scope a cookie by host name, not port, so under ``127.0.0.1``
        its cookie also goes to every other server opened there (an agent's dev server);
        under a name no agent can know it does not. None when served on another address."""
        if self.url.startswith(("http://127.0.0.1:", "http://localhost:")):
            return f"http://{own_name(self.token)}:{self.port}/?token={self.token}"
        return None


def _listening_socket(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # not SO_REUSEPORT
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise PortUnavailable(host, port, exc) from None
    return sock


async def serve_web(
    chat: WebChat, *, task_status: trio.TaskStatus[WebServer] = trio.TASK_STATUS_IGNORED
) -> None:
    settings = chat.settings
    sock = _listening_socket(settings.host, settings.port)
    port = sock.getsockname()[1]
    fd = sock.detach()
    handed_over = False
    try:
        config = HypercornConfig()
        config.bind = [f"fd://{fd}"]
        config.accesslog = None
        config.errorlog = logging.getLogger("hypercorn.error")
        config.graceful_timeout = 1.0
        config.read_timeout = READ_TIMEOUT_S
        cap_connections(config, MAX_CONNECTIONS, "the web chat")
        app = build_app(chat, port=port)
        async with trio.open_nursery() as nursery:
            handed_over = True
            await nursery.start(hypercorn_serve, app, config)
            host = f"[{settings.host}]" if ":" in settings.host else settings.host
            server = WebServer(f"http://{host}:{port}", port, settings.token)
            _log.info("web chat on %s", server.url)
            task_status.started(server)
            await trio.sleep_forever()
    finally:
        if not handed_over:
            os.close(fd)
