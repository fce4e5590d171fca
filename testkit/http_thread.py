"""``serving``: a test's ``http.server`` served from a thread of its own, stopped quickly.

``shutdown()`` waits until ``serve_forever`` looks at its flag again, every 0.5 s by
default: at every test's end, for every fake on ``http.server`` (about a minute of a
``make test`` run). Here it looks every 50 ms.
"""

from __future__ import annotations

import functools
import threading
from socketserver import BaseServer

__all__ = ["SHUTDOWN_POLL_S", "serving"]

SHUTDOWN_POLL_S = 0.05


def serving(server: BaseServer, name: str | None = None) -> threading.Thread:
    """A daemon thread (not started) that serves ``server`` until its ``shutdown()``."""
    serve = functools.partial(server.serve_forever, poll_interval=SHUTDOWN_POLL_S)
    return threading.Thread(target=serve, name=name, daemon=True)
