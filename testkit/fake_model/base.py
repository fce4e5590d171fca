"""HTTP plumbing for the fake model servers: a threaded loopback server with routes, SSE
streaming, and a log of every request (so tests can assert what the CLI sent).

It runs in a background thread so it serves subprocess CLIs whatever the test's own event
loop is doing. ``down()`` makes every request fail at the socket (server unreachable).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from threadspindle.testkit.http_thread import serving

__all__ = ["FakeModelServer", "JSONResponse", "RecordedRequest", "SSEResponse", "SSEEvent"]


@dataclass
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: Any  # parsed JSON, or the raw text


@dataclass
class JSONResponse:
    body: Any
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class SSEEvent:
    data: Any  # JSON-encoded unless a str
    event: str | None = None
    delay: float = 0.0  # seconds to wait before sending this event


@dataclass
class SSEResponse:
    events: Iterable[SSEEvent]
    status: int = 200


Route = Callable[[RecordedRequest], "JSONResponse | SSEResponse"]


class FakeModelServer:
    def __init__(self) -> None:
        self.requests: list[RecordedRequest] = []
        self._routes: list[tuple[str, str, Route]] = []
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.port: int | None = None

    # routes ------------------------------------------------------------------------------
    def route(self, method: str, path_prefix: str, fn: Route) -> None:
        """Longest matching prefix wins (path without the query string)."""
        self._routes.append((method.upper(), path_prefix, fn))
        self._routes.sort(key=lambda r: -len(r[1]))

    def _find(self, method: str, path: str) -> Route | None:
        bare = path.split("?", 1)[0]
        for m, prefix, fn in self._routes:
            if (m == method or m == "*") and bare.startswith(prefix):
                return fn
        return None

    # lifecycle ---------------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        assert self.port is not None, "server not started"
        return f"http://127.0.0.1:{self.port}"

    def start(self, port: int = 0) -> str:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:  # quiet
                pass

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body: Any = json.loads(raw) if raw else None
                except ValueError:
                    body = raw.decode("utf-8", "replace")
                req = RecordedRequest(self.command, self.path, dict(self.headers.items()), body)
                with server._lock:
                    server.requests.append(req)
                fn = server._find(self.command, self.path)
                if fn is None:
                    resp: JSONResponse | SSEResponse = JSONResponse(
                        {"error": {"message": f"no route for {self.command} {self.path}"}}, 404
                    )
                else:
                    try:
                        resp = fn(req)
                    except Exception as exc:  # a scripting bug shows up as a 500, not a hang
                        resp = JSONResponse({"error": {"message": repr(exc)}}, 500)
                if isinstance(resp, JSONResponse):
                    data = json.dumps(resp.body).encode()
                    self.send_response(resp.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for k, v in resp.headers.items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(data)
                    return
                self.send_response(resp.status)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Connection", "close")
                self.end_headers()
                self.close_connection = True
                try:
                    for ev in resp.events:
                        if ev.delay:
                            time.sleep(ev.delay)
                        payload = ev.data if isinstance(ev.data, str) else json.dumps(ev.data)
                        head = f"event: {ev.event}\n" if ev.event else ""
                        chunk = f"{head}data: {payload}\n\n"
                        self.wfile.write(chunk.encode())
                        self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the CLI hung up (an interrupt): fine

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _handle

            def do_HEAD(self) -> None:
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self._httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self._httpd.daemon_threads = True
        self.port = self._httpd.server_address[1]
        self._thread = serving(self._httpd)
        self._thread.start()
        return self.base_url

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def down(self) -> int:
        """Stop serving but remember the port: the CLI then finds nothing listening."""
        port = self.port
        self.stop()
        assert port is not None
        return port

    def __enter__(self) -> FakeModelServer:
        if self._httpd is None:
            self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def scenario_of(text: str) -> str:
    """Which scripted scenario a user text asks for."""
    for word in ("TOOLTEST", "TOUCHTEST", "SLOWTEST", "CRASHTEST", "MCPTEST", "PWDTEST"):
        if word in text:
            return word
    return "TEXT"
