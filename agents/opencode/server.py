"""``opencode serve`` processes, one per project directory, shared by that directory's threads.

An ``OpencodeServer`` is one ``opencode serve --hostname 127.0.0.1 --port 0`` process with a
random basic-auth password (``OPENCODE_SERVER_PASSWORD``; user ``opencode``), an httpx client
for its REST API and one reader of its ``GET /event`` SSE bus. **This is how opencode's
threads are demultiplexed**: every event on the bus carries ``properties.sessionID``, and the
reader routes it through the shared ``SessionRouter`` (``agents/base/session_router.py``) to
the subscriber of that session (one thread adapter each, which parses its own session's
events); the rest (plugin/catalog/heartbeat noise) is counted as unrouted.

The pool (``acquire_server`` / ``release_server``) keys servers by their launch spec (binary,
directory, environment, private config) and their *tenant* (the thread's MCP registrations),
with a reference count: the first thread of a directory (and tenant) starts the server, the
last one to leave stops it (SIGINT, SIGTERM to the group,
SIGKILL; psutil-confirmed through ``ManagedProcess.stop``). The server runs in a trio system
task so it outlives whichever thread happened to start it; the pool lives in a ``RunVar``, so
each ``trio.run`` has its own. When the process dies every subscriber's channel is closed:
their adapters end, and the listener's restart acquires a fresh server.

Invariants: ``run`` never raises (a system task must not crash the run); a dead server is
never handed out; a subscriber's channel is closed exactly once.
"""

from __future__ import annotations

import dataclasses
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import httpx
import trio

from threadspindle.agents.base.fields import decode_json
from threadspindle.agents.base.launch import LaunchSpec, PrivateDir
from threadspindle.agents.base.parsing import MAX_KIND_CHARS, MAX_SKIP_KINDS
from threadspindle.agents.base.process import spawn_agent
from threadspindle.agents.base.session_router import SessionRouter, Subscription
from threadspindle.agents.opencode.parser import session_of
from threadspindle.effects.process import ManagedProcess

__all__ = [
    "RESYNC",
    "OpencodeServer",
    "ServerSpec",
    "ServerStartError",
    "ServerStatistics",
    "acquire_server",
    "live_servers",
    "release_server",
]

USERNAME = "opencode"
RESYNC = "spindle.resync"  # a synthetic event: the bus reconnected, events may be missing
SUBSCRIBER_BUFFER = 4096  # events a slow thread may lag behind before some are dropped
HTTP_TIMEOUT = httpx.Timeout(30.0, connect=5.0)


class ServerStartError(RuntimeError):
    """The server could not be started (the message carries its last output lines)."""


@dataclass(frozen=True, slots=True)
class ServerSpec:
    """How to launch one server (pure data; the pool key)."""

    launch: LaunchSpec
    config: str = ""  # the private config file's JSON content (written by the server)
    # Whose MCP registrations the server may hold (their names, which tag url and token):
    # an agent can reach its server's whole API (the password is in its environment), so
    # threads with different MCP tokens never share one.
    tenant: tuple[str, ...] = ()

    @property
    def key(self) -> tuple[Any, ...]:
        launch = self.launch
        env = tuple(sorted(launch.env.items()))
        where = (launch.argv, env, launch.cwd, launch.sandbox, launch.home)
        return (*where, self.config, self.tenant)


@dataclass(frozen=True, slots=True)
class ServerStatistics:
    """A frozen snapshot of one server's counters."""

    events: int = 0
    routed: int = 0
    unrouted: int = 0  # events of no session, or of a session nobody listens to
    dropped: int = 0  # a subscriber's buffer was full
    malformed: int = 0
    sse_connects: int = 0
    subscribers: int = 0
    refs: int = 0
    pid: int | None = None
    types: Mapping[str, int] = dataclasses.field(default_factory=lambda: MappingProxyType({}))


class OpencodeServer:
    def __init__(self, spec: ServerSpec, *, start_timeout: float = 60.0, grace: float = 3.0):
        self.spec = spec
        self.password = secrets.token_urlsafe(24)
        self.start_timeout = start_timeout
        self.grace = grace
        self.base_url: str | None = None
        self.client: httpx.AsyncClient | None = None
        self.process: ManagedProcess | None = None
        self.refs = 0
        self.ready = trio.Event()
        self.stopped = trio.Event()
        self.start_error: str | None = None
        self.exit_code: int | None = None
        self.stdout_tail: list[str] = []
        self._router: SessionRouter[dict[str, Any]] = SessionRouter(SUBSCRIBER_BUFFER)
        self._cancel = trio.CancelScope()
        self._config_dir: PrivateDir | None = None
        self.mcp_refs: dict[str, int] = {}  # MCP registrations (by name) -> threads using them
        self._events = 0
        self._malformed = 0
        self._sse_connects = 0
        self._types: dict[str, int] = {}

    # public --------------------------------------------------------------------------------
    @property
    def alive(self) -> bool:
        return not self.stopped.is_set() and self.start_error is None

    def stderr_tail(self, lines: int = 10) -> str:
        if self.process is None:
            return ""
        return "\n".join(list(self.process.stderr_tail)[-lines:])

    def subscribe(self, session_id: str) -> Subscription[dict[str, Any]]:
        """Events of ``session_id`` from now on, on the subscription's receive channel; it
        closes when the server dies."""
        return self._router.subscribe(session_id)

    def unsubscribe(self, subscription: Subscription[dict[str, Any]]) -> None:
        self._router.unsubscribe(subscription)

    async def request(
        self,
        method: str,
        path: str,
        *,
        json_body: Any = None,
        params: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> httpx.Response:
        if self.client is None:
            raise ServerStartError("opencode server is not running")
        return await self.client.request(
            method,
            path,
            json=json_body,
            params=params,
            timeout=HTTP_TIMEOUT if timeout is None else timeout,
        )

    def statistics(self) -> ServerStatistics:
        routing = self._router.statistics()
        return ServerStatistics(
            events=self._events,
            routed=routing.routed,
            unrouted=routing.unrouted,
            dropped=routing.dropped,
            malformed=self._malformed,
            sse_connects=self._sse_connects,
            subscribers=routing.subscribers,
            refs=self.refs,
            pid=self.process.pid if self.process is not None else None,
            types=MappingProxyType(dict(self._types)),
        )

    def shutdown(self) -> None:
        self._cancel.cancel()

    # lifecycle -----------------------------------------------------------------------------
    async def run(self) -> None:
        """Start, serve, and stop; never raises (this runs as a system task)."""
        try:
            with self._cancel:
                await self._run()
        except BaseException as exc:  # noqa: BLE001 - a system task must not crash the run
            if self.start_error is None and not self.ready.is_set():
                self.start_error = f"opencode serve failed: {exc!r}"
            if not isinstance(exc, Exception | trio.Cancelled):
                raise
        finally:
            with trio.CancelScope(shield=True):
                await self._cleanup()

    async def _run(self) -> None:
        launch = self.spec.launch
        env = dict(launch.env)
        env["OPENCODE_SERVER_PASSWORD"] = self.password
        env.setdefault("OPENCODE_SERVER_USERNAME", USERNAME)
        expose = launch.expose
        if self.spec.config:
            self._config_dir = PrivateDir("spindle-opencode-")
            env["OPENCODE_CONFIG"] = self._config_dir.write("opencode.json", self.spec.config)
            expose += (env["OPENCODE_CONFIG"],)
        try:
            self.process = await spawn_agent(
                dataclasses.replace(launch, env=env, expose=expose), stdin=False
            )
        except OSError as exc:
            self.start_error = f"cannot start {launch.argv[0]}: {exc}"
            self.ready.set()
            return
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.process.pump_stderr)
            listening = trio.Event()
            nursery.start_soon(self._read_stdout, listening)
            with trio.move_on_after(self.start_timeout) as timer:
                await self._wait_listening(listening)
            if timer.cancelled_caught or self.base_url is None:
                self.start_error = self.start_error or (
                    f"opencode serve did not start in {self.start_timeout:.0f} s"
                )
            if self.start_error is None and self.base_url is not None:
                self.client = httpx.AsyncClient(
                    base_url=self.base_url,
                    auth=httpx.BasicAuth(USERNAME, self.password),
                    timeout=HTTP_TIMEOUT,
                )
                connected = trio.Event()
                nursery.start_soon(self._read_events, connected)
                with trio.move_on_after(self.start_timeout):
                    await connected.wait()
                if not connected.is_set():
                    self.start_error = "opencode serve: the /event stream did not connect"
            if self.start_error is not None:
                self.ready.set()
                nursery.cancel_scope.cancel()
                return
            self.ready.set()
            self.exit_code = await self.process.wait()
            nursery.cancel_scope.cancel()

    async def _wait_listening(self, listening: trio.Event) -> None:
        assert self.process is not None
        async with trio.open_nursery() as race:

            async def exited() -> None:
                assert self.process is not None
                code = await self.process.wait()
                self.exit_code = code
                await trio.sleep(0.2)  # let the last stderr lines arrive
                self.start_error = f"opencode serve exited with {code} before listening: " + (
                    self.stderr_tail() or " | ".join(self.stdout_tail[-5:])
                )
                race.cancel_scope.cancel()

            async def heard() -> None:
                await listening.wait()
                race.cancel_scope.cancel()

            race.start_soon(exited)
            race.start_soon(heard)

    async def _read_stdout(self, listening: trio.Event) -> None:
        assert self.process is not None
        async for line in self.process.stdout_lines():
            self.stdout_tail = (self.stdout_tail + [line])[-20:]
            marker = "listening on "
            if marker in line and self.base_url is None:
                self.base_url = line.split(marker, 1)[1].strip().rstrip("/")
                listening.set()

    async def _read_events(self, connected: trio.Event) -> None:
        """Follow ``/event`` for the life of the process, reconnecting when it drops."""
        assert self.client is not None
        while True:
            try:
                async with self.client.stream(
                    "GET", "/event", timeout=httpx.Timeout(10.0, read=None)
                ) as response:
                    if response.status_code != 200:
                        raise httpx.HTTPStatusError(
                            f"/event answered {response.status_code}",
                            request=response.request,
                            response=response,
                        )
                    self._sse_connects += 1
                    if self._sse_connects > 1:
                        self._resync()
                    data: list[str] = []
                    async for line in response.aiter_lines():
                        if line.startswith("data:"):
                            data.append(line[5:].lstrip())
                        elif not line.strip() and data:
                            self._route("\n".join(data), connected)
                            data = []
            except (httpx.HTTPError, trio.BrokenResourceError, OSError):
                pass
            await trio.sleep(0.2)  # the process watcher cancels us when the server is gone

    def _resync(self) -> None:
        """The event stream was re-established: events may have been lost meanwhile. Every
        subscriber gets a ``RESYNC`` event so it can check its session's state."""
        self._router.broadcast(lambda sid: {"type": RESYNC, "properties": {"sessionID": sid}})

    def _route(self, payload: str, connected: trio.Event) -> None:
        self._events += 1
        try:
            event = decode_json(payload)
        except (ValueError, RecursionError):
            self._malformed += 1
            return
        if not isinstance(event, dict):
            self._malformed += 1
            return
        kind = event.get("type")
        if isinstance(kind, str):
            self._count_type(kind)
            if kind == "server.connected":
                connected.set()
        self._router.route(session_of(event), event)

    def _count_type(self, kind: str) -> None:
        # A type comes from the wire: bounded like a parser's skip counts.
        if kind not in self._types:
            kind = kind[:MAX_KIND_CHARS]
            if kind not in self._types and len(self._types) >= MAX_SKIP_KINDS:
                kind = "(other)"
        self._types[kind] = self._types.get(kind, 0) + 1

    async def _cleanup(self) -> None:
        self._router.close()
        if self.client is not None:
            await self.client.aclose()
            self.client = None
        if self.process is not None:
            await self.process.stop(grace=self.grace)
            if self.exit_code is None:
                self.exit_code = self.process.returncode
        if self._config_dir is not None:
            self._config_dir.remove()
            self._config_dir = None
        self.ready.set()
        self.stopped.set()


# --- the pool --------------------------------------------------------------------------------

_POOL: trio.lowlevel.RunVar[dict[tuple[Any, ...], OpencodeServer]] = trio.lowlevel.RunVar(
    "spindle_opencode_servers"
)


def _pool() -> dict[tuple[Any, ...], OpencodeServer]:
    try:
        return _POOL.get()
    except LookupError:
        pool: dict[tuple[Any, ...], OpencodeServer] = {}
        _POOL.set(pool)
        return pool


def live_servers() -> Sequence[OpencodeServer]:
    """The servers of this trio run (for statistics and tests)."""
    return list(_pool().values())


async def acquire_server(
    spec: ServerSpec, *, start_timeout: float = 60.0, grace: float = 3.0
) -> OpencodeServer:
    """A running server for ``spec`` (started if needed), with one more reference taken.
    Raises ``ServerStartError`` when it cannot start."""
    pool = _pool()
    server = pool.get(spec.key)
    if server is None or not server.alive:
        server = OpencodeServer(spec, start_timeout=start_timeout, grace=grace)
        pool[spec.key] = server
        trio.lowlevel.spawn_system_task(server.run, name=f"opencode serve {spec.launch.cwd}")
    server.refs += 1
    try:
        await server.ready.wait()
    except BaseException:
        # Cancelled while the server was starting (a start timeout): give the reference
        # back, so a server nobody holds does not live on.
        with trio.CancelScope(shield=True):
            await release_server(server)
        raise
    if server.start_error is not None or server.stopped.is_set():
        server.refs -= 1
        if pool.get(spec.key) is server:
            pool.pop(spec.key)
        raise ServerStartError(server.start_error or "opencode server stopped")
    return server


async def release_server(server: OpencodeServer) -> None:
    """Drop one reference; the last one stops the server and waits until it is gone."""
    server.refs = max(0, server.refs - 1)
    if server.refs > 0:
        return
    pool = _pool()
    if pool.get(server.spec.key) is server:
        pool.pop(server.spec.key)
    server.shutdown()
    with trio.CancelScope(shield=True):
        await server.stopped.wait()
