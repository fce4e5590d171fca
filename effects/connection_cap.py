"""A cap on the connections one hypercorn server holds open at once.

Every connection a server holds is a descriptor of Spindle's process, which its agents'
pipes and the database share (65,536 at most, ``effects/open_files.py``). hypercorn has no
limit of its own: a connection that brings no complete request is dropped after its
keep-alive time (5 s; its descriptor is held that long even when the client has closed
it), but a process that keeps opening connections faster than that holds as many as it
likes, and any agent can reach the MCP process manager and the web chat on 127.0.0.1 (the
WhatsApp webhook listens for the internet). At the cap a new connection is closed as soon
as it is accepted, so such a flood costs that one server its service for as long as it
lasts, and nothing else: every other descriptor stays free for the threads. No server's
cap is more than an eighth of the process's open-file limit (``open_file_share``): where
that limit stays low, a server's own figure could be more than the process has.

hypercorn's trio worker makes one ``TCPServer`` per accepted connection, by the name
``hypercorn.trio.run.TCPServer``, and offers no hook there. ``cap_connections`` puts a
subclass under that name (once per process) that counts the connections of every server
whose ``Config`` carries a ``ConnectionCap``; a server without one is served as before.
``tests/effects/test_connection_cap.py`` fails if a hypercorn release moves that name.
"""

from __future__ import annotations

import logging
import math
import resource

import hypercorn.trio.run as hypercorn_run
import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.trio.tcp_server import TCPServer

__all__ = ["ConnectionCap", "cap_connections", "open_file_share"]

_log = logging.getLogger(__name__)

_ATTRIBUTE = "spindle_connection_cap"
_HOOK = "TCPServer"  # the name in ``hypercorn.trio.run`` each connection is made by
REFUSAL_WARNING_S = 60.0  # refusals are logged at most this often (a flood is many)
# One server holds at most this share of the process's open files (three servers: under
# half of them), and never fewer than MIN_SHARE connections.
SHARE_DIVISOR = 8
MIN_SHARE = 16


class ConnectionCap:
    """How many connections a server holds (``open``, ``peak``) against its ``limit``, and
    how many it closed at once for being past it (``refused``)."""

    def __init__(self, limit: int, name: str) -> None:
        if limit < 1:
            raise ValueError(f"{name}: the connection limit must be at least 1, not {limit}")
        self.limit = limit
        self.name = name
        self.open = 0
        self.peak = 0
        self.refused = 0
        self._warned_at = -math.inf
        self._refused_since_warning = 0

    def take(self) -> bool:
        if self.open >= self.limit:
            self.refused += 1
            self._refused_since_warning += 1
            now = trio.current_time()
            if now - self._warned_at >= REFUSAL_WARNING_S:
                _log.warning(
                    "%s holds %d connections, its limit: new ones are closed at once "
                    "(%d since the last warning; a local process opening them in a loop?)",
                    self.name,
                    self.open,
                    self._refused_since_warning,
                )
                self._warned_at, self._refused_since_warning = now, 0
            return False
        self.open += 1
        self.peak = max(self.peak, self.open)
        return True

    def give_back(self) -> None:
        self.open -= 1


class _CappedTCPServer(TCPServer):
    """hypercorn's connection, counted against its server's cap when it has one."""

    async def run(self) -> None:
        cap: ConnectionCap | None = getattr(self.config, _ATTRIBUTE, None)
        if cap is None:
            await super().run()
            return
        if not cap.take():
            await trio.aclose_forcefully(self.stream)
            return
        try:
            await super().run()
        finally:
            cap.give_back()


def open_file_share() -> int | None:
    """The most connections one server may hold: an eighth of the process's limit on open
    files (None: no limit). ``spindle run`` raises that limit to 65,536 where it can; where
    it cannot (a container or service manager that holds it at 1,024), a server's own
    figure could be more than the process has, and the cap would protect nothing."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft == resource.RLIM_INFINITY:
        return None
    return max(MIN_SHARE, soft // SHARE_DIVISOR)


def cap_connections(config: HypercornConfig, limit: int, name: str) -> ConnectionCap:
    """Serve at most ``limit`` connections at once under ``config`` (fewer when the
    process's open-file limit is low: ``open_file_share``); its counters."""
    current = getattr(hypercorn_run, _HOOK)
    if current is not _CappedTCPServer:
        if current is not TCPServer:  # someone else's: refuse to stack on it unknowingly
            raise RuntimeError(f"hypercorn.trio.run.TCPServer is {current!r}, not hypercorn's")
        setattr(hypercorn_run, _HOOK, _CappedTCPServer)
    share = open_file_share()
    if share is not None and share < limit:
        _log.info("%s: at most %d connections (an eighth of the open files)", name, share)
        limit = share
    cap = ConnectionCap(limit, name)
    setattr(config, _ATTRIBUTE, cap)
    return cap
