"""The MCP face of the supervisor: five tools over streamable HTTP on loopback, hosted in the
trio program by hypercorn's trio worker.

``serve_process_manager(config, task_status)`` runs it inside ``spindle run`` (it hands a
``ProcessManager`` to ``task_status.started``: the URL with the port really bound, the
tokens, and the thread-level calls the runtime needs); ``serve_until_signalled`` runs it
alone (``spindle mcp``, configured by ``app/process_manager.py``), ``main(argv)`` the same
from command-line flags (``python -m threadspindle.effects.mcp_manager``). The port is
bound before anything else starts: one that cannot be had raises ``PortUnavailable`` (one
line for the user), and no managed process is touched.
The official SDK's ``MCPServer`` serves the tools; its ASGI app sits behind
``BearerGuard`` (401 without a valid token). A tool turns a ``ProcessError`` into an MCP
tool error (``isError``) with a message for the agent; the server never goes down because
of one call.
"""

from __future__ import annotations

import argparse
import errno
import logging
import os
import signal
import socket
import sys
from pathlib import Path
from typing import Annotated, Any

import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.trio import serve as hypercorn_serve
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings
from pydantic import Field

from threadspindle.effects.connection_cap import cap_connections

from .auth import BearerGuard, Caller, TokenAuthority, load_or_create_secret
from .models import (
    DEFAULT_PORT,
    OutputResult,
    ProcessInfo,
    ProcessList,
    ProcessManagerConfig,
    StopResult,
)
from .session_quota import SessionQuota
from .supervisor import ProcessError, ProcessSupervisor
from .wakeups import MAX_WAKEUP_MINUTES, WakeupResult, Wakeups, WakeupsUnavailable

__all__ = [
    "SERVER_NAME",
    "PortUnavailable",
    "ProcessManager",
    "build_mcp_server",
    "serve_until_signalled",
    "main",
    "serve_process_manager",
]

SERVER_NAME = "process-manager"
# Every thread's sessions together (the SDK's cap; a thread has its share of them:
# ``ProcessManagerConfig.max_sessions_per_thread``).
MAX_SESSIONS = 10_000
EXIT_USAGE = 2  # bad usage or configuration, as every spindle command (app/exit_codes.py)
log = logging.getLogger(__name__)


class PortUnavailable(Exception):
    """The configured port cannot be listened on (taken, or not allowed)."""

    def __init__(self, host: str, port: int, error: OSError) -> None:
        self.host, self.port, self.error = host, port, error
        if error.errno == errno.EADDRINUSE:
            super().__init__(f"{host}:{port} is already in use (another Spindle?)")
        else:
            super().__init__(f"cannot listen on {host}:{port}: {error.strerror or error}")


def _listening_socket(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port`` (port 0: any free one), or ``PortUnavailable``."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # not SO_REUSEPORT
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise PortUnavailable(host, port, exc) from None
    return sock


class ProcessManager:
    """What ``serve_process_manager`` hands to the runtime once it is listening."""

    def __init__(
        self,
        url: str,
        authority: TokenAuthority,
        supervisor: ProcessSupervisor,
        guard: BearerGuard,
        wakeups: Wakeups | None = None,
    ) -> None:
        self.url = url
        self.authority = authority
        self.supervisor = supervisor
        self.guard = guard
        # The schedule_wakeup tool's way into the runtime (``wakeups.attach(runtime.post)``).
        self.wakeups = wakeups or Wakeups()

    @property
    def operator_token(self) -> str:
        return self.authority.secret

    def token_for_thread(self, thread_id: str) -> str:
        return self.authority.thread_token(thread_id)

    def bind_thread(self, thread_id: str, workdir: str | None, home: str | None = None) -> None:
        """The thread's workdir (or None to forget it): the default ``cwd`` of its
        ``start_process`` calls and the base of a relative one; ``home``: its agent's
        private home, which its sandboxed processes see as the agent does."""
        self.supervisor.bind_thread(thread_id, workdir, home)

    def processes_for_thread(self, thread_id: str) -> list[ProcessInfo]:
        """For ``/status`` (``ProcessInfo.summary(now)`` gives one line each)."""
        return self.supervisor.processes_for_thread(thread_id)

    async def stop_thread_processes(self, thread_id: str) -> list[StopResult]:
        return await self.supervisor.stop_thread_processes(thread_id)


def _caller(authority: TokenAuthority, ctx: Context) -> Caller:
    # The guard already refused requests without a valid token; this reads who it was.
    caller = authority.identify(ctx.headers or {})
    if caller is None:
        raise ToolError("not authorized")
    return caller


def _mcp_server() -> MCPServer:
    # MCPServer() calls logging.basicConfig (a Rich handler on the root logger) when the
    # root has no handler yet; Spindle configures its own logging, so keep it out.
    root = logging.getLogger()
    placeholder = logging.NullHandler()
    root.addHandler(placeholder)
    try:
        return MCPServer(
            SERVER_NAME,
            version="1",
            instructions=(
                "Start, stop, restart and watch long-running processes (dev servers, "
                "watchers) that outlive a single tool call. Processes belong to this chat "
                "thread. schedule_wakeup queues a prompt for you in this thread later."
            ),
            log_level="WARNING",
        )
    finally:
        root.removeHandler(placeholder)


def build_mcp_server(
    supervisor: ProcessSupervisor, authority: TokenAuthority, wakeups: Wakeups | None = None
) -> MCPServer:
    server = _mcp_server()
    wake = wakeups or Wakeups()

    @server.tool()
    async def schedule_wakeup(
        in_minutes: Annotated[
            float,
            Field(
                ge=1,
                le=MAX_WAKEUP_MINUTES,
                description="how long from now, in minutes (1 at least)",
            ),
        ],
        prompt: Annotated[
            str,
            Field(min_length=1, description="what you will be told then, e.g. 'check the CI'"),
        ],
        ctx: Context,
    ) -> WakeupResult:
        """Wake yourself up later in this chat thread: the prompt is queued for you then
        (e.g. "check the CI run again" in 20 minutes). A message from a person in the thread
        before then cancels it. After 50 wake-ups in a row with nobody writing in the
        thread, the next is refused until someone does."""
        caller = _caller(authority, ctx)
        if caller.sees_all:
            raise ToolError("a wake-up belongs to a chat thread: call it from one")
        try:
            return await wake.request(caller.thread_id, in_minutes, prompt)
        except WakeupsUnavailable as exc:
            raise ToolError(str(exc)) from None

    @server.tool()
    async def start_process(
        name: Annotated[str, Field(description="a name for the process, unique in this thread")],
        command: Annotated[str, Field(description="the executable, on PATH or a path")],
        ctx: Context,
        args: Annotated[list[str] | None, Field(description="its arguments")] = None,
        cwd: Annotated[
            str | None, Field(description="working directory; default: the thread's workdir")
        ] = None,
        env: Annotated[
            dict[str, str] | None, Field(description="variables added to Spindle's environment")
        ] = None,
    ) -> ProcessInfo:
        """Start a named long-running process. Idempotent: when a process of that name is
        already running it is returned as it is (already_running=true), not restarted."""
        try:
            return await supervisor.start(
                _caller(authority, ctx), name, command, args or [], cwd, env
            )
        except ProcessError as exc:
            raise ToolError(str(exc)) from None

    @server.tool()
    async def stop_process(
        name: str,
        ctx: Context,
        force: Annotated[
            bool, Field(description="SIGKILL at once instead of SIGTERM first")
        ] = False,
    ) -> StopResult:
        """Stop a process and its whole tree: SIGTERM to its group, wait, then SIGKILL."""
        try:
            return await supervisor.stop(_caller(authority, ctx), name, force)
        except ProcessError as exc:
            raise ToolError(str(exc)) from None

    @server.tool()
    async def restart_process(name: str, ctx: Context) -> ProcessInfo:
        """Stop a process (if running) and start it again with the same command."""
        try:
            return await supervisor.restart(_caller(authority, ctx), name)
        except ProcessError as exc:
            raise ToolError(str(exc)) from None

    @server.tool()
    async def list_processes(ctx: Context) -> ProcessList:
        """List this thread's processes with their status, pid and exit code."""
        caller = _caller(authority, ctx)
        return ProcessList(processes=supervisor.list_processes(caller))

    @server.tool()
    async def get_output(
        name: str,
        ctx: Context,
        tail: Annotated[
            int, Field(ge=0, description="at most this many characters per stream")
        ] = 2000,
        since_seq: Annotated[
            int | None, Field(description="only output newer than this last_seq")
        ] = None,
    ) -> OutputResult:
        """Buffered stdout and stderr of a process. Pass the returned last_seq as since_seq
        next time to read only what is new."""
        try:
            return supervisor.get_output(_caller(authority, ctx), name, tail, since_seq)
        except ProcessError as exc:
            raise ToolError(str(exc)) from None

    return server


def build_app(
    supervisor: ProcessSupervisor,
    authority: TokenAuthority,
    config: ProcessManagerConfig,
    wakeups: Wakeups | None = None,
) -> BearerGuard:
    mcp = build_mcp_server(supervisor, authority, wakeups)
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*"],
        allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"],
    )
    app = mcp.streamable_http_app(
        streamable_http_path=config.path,
        transport_security=security,
        host=config.host,
        session_idle_timeout=config.session_idle_s,
        max_sessions=MAX_SESSIONS,
    )
    quota = SessionQuota(app, limit=config.max_sessions_per_thread, idle_s=config.session_idle_s)
    return BearerGuard(quota, authority)


async def serve_process_manager(
    config: ProcessManagerConfig,
    task_status: trio.TaskStatus[ProcessManager] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve until cancelled; on the way out stop every managed process (unless
    ``keep_on_shutdown``) and save the list. ``PortUnavailable`` when the port cannot be
    had (before anything else is done)."""
    sock = _listening_socket(config.host, config.port)
    # hypercorn takes the bound socket by its descriptor (its documented ``fd://`` bind)
    # and owns it from then on; binding here first means a busy port is one clean error,
    # not a traceback from inside the server's task group.
    fd = sock.detach()
    handed_over = False
    try:
        secret = config.token or load_or_create_secret(config.data_dir)
        authority = TokenAuthority(secret)
        async with ProcessSupervisor.open(config) as supervisor:
            wakeups = Wakeups()
            guard = build_app(supervisor, authority, config, wakeups)
            hconfig = HypercornConfig()
            hconfig.bind = [f"fd://{fd}"]
            hconfig.accesslog = None
            hconfig.errorlog = logging.getLogger("hypercorn.error")
            hconfig.graceful_timeout = 1.0
            cap_connections(hconfig, config.max_connections, "the MCP process manager")
            async with trio.open_nursery() as nursery:
                handed_over = True
                binds = await nursery.start(hypercorn_serve, guard, hconfig)
                url = binds[0].rstrip("/") + config.path
                task_status.started(ProcessManager(url, authority, supervisor, guard, wakeups))
                await trio.sleep_forever()
    finally:
        if not handed_over:
            os.close(fd)


def _parse_args(argv: list[str] | None) -> ProcessManagerConfig:
    p = argparse.ArgumentParser(prog="spindle mcp", description="Serve the MCP process manager.")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help="default 0: any free port")
    p.add_argument("--data-dir", type=Path, default=None)
    p.add_argument(
        "--allowed-root", type=Path, action="append", default=None, help="repeatable; default ~"
    )
    p.add_argument("--ring-buffer-chars", type=int, default=None)
    p.add_argument("--ring-buffer-lines", type=int, default=None)
    p.add_argument("--max-processes-per-thread", type=int, default=None)
    p.add_argument("--stop-grace", type=float, default=None, help="seconds SIGTERM -> SIGKILL")
    p.add_argument("--keep-on-shutdown", action="store_true")
    ns = p.parse_args(argv)
    fields: dict[str, Any] = {"host": ns.host, "port": ns.port}
    # The token comes from the environment, never argv (argv is visible to every user).
    if token := os.environ.get("SPINDLE_MCP_TOKEN"):
        fields["token"] = token
    optional = {
        "data_dir": ns.data_dir,
        "allowed_roots": tuple(ns.allowed_root) if ns.allowed_root else None,
        "ring_buffer_chars": ns.ring_buffer_chars,
        "ring_buffer_lines": ns.ring_buffer_lines,
        "max_processes_per_thread": ns.max_processes_per_thread,
        "stop_grace_s": ns.stop_grace,
    }
    fields.update({k: v for k, v in optional.items() if v is not None})
    fields["keep_on_shutdown"] = ns.keep_on_shutdown
    return ProcessManagerConfig(**fields)


async def _serve_until_signalled(config: ProcessManagerConfig, port_key: str) -> int:
    # It holds the operator token: not readable by the processes it runs (as spindle run).
    from threadspindle.effects.self_protection import make_non_dumpable

    make_non_dumpable()
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            try:
                manager: ProcessManager = await nursery.start(serve_process_manager, config)
            except PortUnavailable as exc:
                say = f"spindle mcp: {exc}. Set {port_key} to another port, or 0 for any free one."
                print(say, file=sys.stderr)
                return EXIT_USAGE
            token_note = (
                "the configured token"
                if config.token
                else f"the token in {config.data_dir / 'mcp-token'}"
            )
            print(f"process manager on {manager.url} (bearer: {token_note})", flush=True)
            async for _ in signals:
                nursery.cancel_scope.cancel()
                break
    return 0


def serve_until_signalled(config: ProcessManagerConfig, port_key: str) -> int:
    """Serve the manager alone until SIGINT/SIGTERM (``spindle mcp``; its configuration is
    built by ``app/process_manager.py``). ``port_key`` names the setting a taken port
    came from, for the message."""
    return trio.run(_serve_until_signalled, config, port_key)


def main(argv: list[str] | None = None) -> int:
    """``spindle mcp``: serve the process manager alone until SIGINT/SIGTERM."""
    try:
        config = _parse_args(argv)
    except ValueError as exc:
        print(f"spindle mcp: {exc}", file=sys.stderr)
        return EXIT_USAGE
    logging.basicConfig(level=logging.WARNING)
    return serve_until_signalled(config, "--port")
