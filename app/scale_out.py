"""``spindle runner``, ``spindle gateway`` and ``spindle cluster dev``: Spindle over NATS
JetStream (docs/scale-out.md).

- ``runner``: serves its workdir roots (``effects.jetstream.runner.serve_runner``) with the
  configured agents and, as ``spindle run``, the MCP process manager for its threads; when
  another runner takes a root over, it stands by and serves again when it can take the
  root back.
- ``gateway``: holds the configured chat connections (``ingress.cluster_gateway``: Discord
  shards ``--shards`` of ``--shard-count``, Telegram, Slack; ``--platforms`` picks some);
  with none (or ``--console``), a console gateway for trying it out: lines typed are sent
  as actions (``/start THREAD [WORKDIR] [AGENT]`` starts a conversation, ``THREAD: text``
  sends a prompt) and every effect the runners publish is printed.
- ``log export THREAD --nats URLS``: the thread's log read from the start of its JetStream
  subject, written as the same JSONL as from SQLite (docs/log-format.md).
- ``cluster dev``: a 3-node JetStream cluster on 127.0.0.1 (``sync_interval: always``), two
  runners of one root (one serves, one stands by: kill the first and watch the second take
  over), a chat gateway when a Discord, Telegram or Slack token is configured, and the
  console gateway, until end of input or Ctrl-C.

Each command makes its process non-dumpable first, as ``spindle run`` does (``_protect``):
the runner's agents run as the same user, and the environment holds the cluster password
and the bot tokens.
"""

from __future__ import annotations

import argparse
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import trio
from nats.errors import Error as NatsError

from threadspindle.app.agent_factory import AgentFactory
from threadspindle.app.config import Settings
from threadspindle.app.exit_codes import EXIT_DATABASE, EXIT_FAILURE, EXIT_OK, EXIT_USAGE
from threadspindle.app.logs import configure_logging, redact
from threadspindle.app.output_files import output_refused, write_failure_code, write_private
from threadspindle.effects.jetstream.connection import (
    ClusterNotReady,
    SignInRefused,
    StoreUnusable,
    open_jetstream,
)
from threadspindle.effects.jetstream.gateway import Gateway
from threadspindle.effects.jetstream.log import export_rows
from threadspindle.effects.jetstream.runner import RootLost, serve_runner
from threadspindle.effects.jetstream.servers import NatsCluster, die_with_parent
from threadspindle.effects.jetstream.transport import DEFAULT_HOME, open_transport
from threadspindle.effects.open_files import raise_open_file_limit
from threadspindle.effects.self_protection import make_non_dumpable
from threadspindle.effects.workspace_port import workspace_factory
from threadspindle.ingress.input_checks import MAX_PROMPT_CHARS
from threadspindle.runtime.core.actions import ConversationStarted, UserMessage
from threadspindle.runtime.core.effect_types import Effect
from threadspindle.runtime.live.ports import OnPosted, Posted

__all__ = ["cmd_cluster", "cmd_gateway", "cmd_log_export", "cmd_runner"]


def _servers(args: argparse.Namespace) -> list[str]:
    return [url for url in args.nats.split(",") if url]


def _password_in(url: str) -> bool:
    try:
        return bool(urlsplit(url).password)
    except ValueError:  # not a URL: the connection says what is wrong with it
        return False


def _credentials(settings: Settings, args: argparse.Namespace | None = None) -> dict[str, Any]:
    """How this node signs in to NATS (``[cluster]``); a warning on stderr when it does not:
    a server anyone may use lets an agent on these machines read and write every thread."""
    credentials = settings.nats_credentials()
    signed = args is not None and any("@" in url for url in _servers(args))
    if args is not None and any(_password_in(url) for url in _servers(args)):
        print(
            "warning: a password in a --nats URL is shown to every local user and process "
            "(ps, /proc/<pid>/cmdline), agents included: give it in "
            "SPINDLE_CLUSTER__PASSWORD or [cluster] password instead",
            file=sys.stderr,
            flush=True,
        )
    if credentials["password"] is None and not signed:
        print(
            "warning: no NATS password (SPINDLE_CLUSTER__PASSWORD or [cluster] password): "
            "if these servers let anyone in, any process that reaches them, an agent "
            "included, can read and write every thread (docs/scale-out.md)",
            file=sys.stderr,
            flush=True,
        )
    return credentials


def _protect() -> None:
    """First thing in every command here, as in ``spindle run``: this process unreadable
    to same-user processes, the agents a runner starts above all (``/proc/<pid>/environ``
    and its memory hold the cluster password and the bot tokens)."""
    make_non_dumpable()
    raise_open_file_limit()  # (a runner holds its agents' pipes, as ``spindle run`` does)


# The longest line the console gateway reads (a prompt's 100,000 characters, in UTF-8 at
# most 4 bytes each): a JetStream message holds 1 MiB by default.
_CONSOLE_LINE_BYTES = 4 * MAX_PROMPT_CHARS

# What stops a node at its start with a sentence for the operator, not a traceback.
_REFUSALS = (SignInRefused, ClusterNotReady, StoreUnusable)


def _refused_at_start(run: Callable[[], object]) -> str | None:
    """Run ``run()``; the reason when NATS refused the node's sign-in, its cluster was not
    ready, or a stream or bucket has settings Spindle cannot use (alone, or in the
    exception groups of the nurseries it passed through), else None."""
    try:
        run()
    except _REFUSALS as exc:
        return str(exc)
    except BaseExceptionGroup as group:
        refused, rest = group.split(_REFUSALS)
        if refused is None or rest is not None:
            raise
        found: BaseException = refused
        while isinstance(found, BaseExceptionGroup):
            found = found.exceptions[0]
        return str(found)
    return None


def cmd_runner(args: argparse.Namespace, settings: Settings) -> int:
    _protect()
    refused = _refused_at_start(lambda: trio.run(_runner, args, settings))
    if refused is not None:
        print(f"Cannot start the runner: {refused}", file=sys.stderr)
        return EXIT_USAGE
    return EXIT_OK


async def _runner(args: argparse.Namespace, settings: Settings) -> None:
    roots = [os.path.realpath(root) for root in args.root]
    name = args.name or f"runner-{os.getpid()}"
    servers = _servers(args)
    async with trio.open_nursery() as nursery:
        # The MCP process manager, as ``spindle run`` hosts it, for the threads this runner
        # owns: their agents get it with a token of their thread, in the runner's roots.
        mcp = await _process_manager(settings, name, roots, nursery)
        factory = AgentFactory(settings, mcp)
        # The thread policy, workspaces and per-channel defaults of ``spindle run``, over
        # this runner's roots.
        policy = settings.runtime.policy().replace(
            allowed_roots=tuple(roots), workspace=settings.workspaces.policy()
        )
        runtime_kwargs: dict[str, Any] = {
            "idle_timeout_s": settings.runtime.idle_actor_timeout_s,
            "workspace_factory": workspace_factory(
                settings.workspaces.options(sandbox=settings.workspace_sandbox())
            ),
            "channel_policies": {
                channel_id: policy.replace(verbosity=channel.verbosity)
                for channel_id, channel in settings.discord.project_channels.items()
                if channel.verbosity is not None
            },
        }
        if mcp is not None:
            from threadspindle.app.app import _with_processes

            print(f"{name}: MCP process manager on {mcp.url}", flush=True)
            runtime_kwargs["enrich"] = partial(_with_processes, mcp)
            runtime_kwargs["on_dispose"] = mcp.stop_thread_processes
            runtime_kwargs["on_start"] = lambda runtime: mcp.wakeups.attach(runtime.post)
        async with open_jetstream(
            servers,
            replicas=args.replicas or len(servers),
            lease_ttl_s=args.lease_ttl,
            **_credentials(settings, args),
        ) as conn:
            while True:
                print(f"{name}: waiting to serve {', '.join(roots)}", flush=True)
                try:
                    await serve_runner(
                        conn,
                        name=name,
                        roots=roots,
                        adapter_factory=factory,
                        policy=policy,
                        ready=lambda rt: print(f"{name}: serving {', '.join(roots)}", flush=True),
                        **runtime_kwargs,
                    )
                except RootLost as exc:
                    print(f"{exc}; standing by", flush=True)


async def _process_manager(
    settings: Settings, name: str, roots: list[str], nursery: trio.Nursery
) -> Any:
    """The runner's MCP process manager (None when ``[mcp] enabled = false``): its roots are
    the runner's, its state under ``<data_dir>/runners/<name>`` (two runners of one machine
    keep theirs apart), its operator token in memory only."""
    if not settings.mcp.enabled:
        return None
    from threadspindle.app.app import _process_sandbox
    from threadspindle.app.process_manager import config_from_settings
    from threadspindle.effects.mcp_manager.server import serve_process_manager

    data = settings.data_path / "runners" / name
    data.mkdir(parents=True, exist_ok=True, mode=0o700)
    config = config_from_settings(settings).model_copy(
        update={
            "token": settings.mcp.token.get_secret_value()
            if settings.mcp.token is not None
            else secrets.token_urlsafe(32),
            "sandbox": _process_sandbox(settings),
            "allowed_roots": tuple(Path(root) for root in roots),
            "data_dir": data,
        }
    )
    return await nursery.start(serve_process_manager, config)


class PrintRenderer:
    """A thread's renderer that prints each effect as a line (the console gateway)."""

    def __init__(self, thread_id: str) -> None:
        self.thread_id = thread_id
        self.on_posted: OnPosted | None = None
        self.posted: dict[str, tuple[str, ...]] = {}
        self._count = 0

    def known(self, key: str, message_ids: tuple[str, ...]) -> None:
        self.posted[key] = self.posted.get(key, ()) + message_ids

    async def apply(self, effect: Effect) -> list[Posted]:
        key = getattr(effect, "key", None)
        text = getattr(effect, "text", None)
        if text:
            print(f"[{self.thread_id}] {effect.type}: {text}", flush=True)
        if not isinstance(key, str) or key in self.posted:
            return []
        self._count += 1
        ids = (f"{self.thread_id}-{self._count}",)
        self.posted[key] = ids
        return [(key, ids)]

    async def aclose(self) -> list[Posted]:
        return []


def cmd_gateway(args: argparse.Namespace, settings: Settings) -> int:
    _protect()
    roots = args.root or ["."]
    platforms = _chat_platforms(args, settings)
    if isinstance(platforms, str):
        print(f"Cannot start the gateway: {platforms}", file=sys.stderr)
        return EXIT_USAGE
    credentials = _credentials(settings, args)
    if args.console or not platforms:
        servers = _servers(args)
        refused = _refused_at_start(
            lambda: trio.run(_gateway, servers, roots[0], args.agent, args.lease_ttl, credentials)
        )
        if refused is not None:
            print(f"Cannot start the gateway: {refused}", file=sys.stderr)
            return EXIT_USAGE
        return EXIT_OK
    configure_logging(settings.log_level, settings.log_path, terminal=True)
    for secret in (
        settings.token(),
        settings.telegram_bot_token(),
        *settings.slack_tokens(),
        credentials["password"],
    ):
        redact(secret)
    refused = _refused_at_start(
        lambda: trio.run(
            _chat_gateway,
            _servers(args),
            roots,
            platforms,
            args.lease_ttl,
            args.ack_wait,
            credentials,
        )
    )
    if refused is not None:
        print(f"Cannot start the gateway: {refused}", file=sys.stderr)
        return EXIT_USAGE
    return EXIT_OK


def _chat_platforms(args: argparse.Namespace, settings: Settings) -> dict[str, Any] | str:
    """The chat platforms this gateway holds (name -> settings), or why it cannot."""
    wanted = set(args.platforms.split(",")) if getattr(args, "platforms", None) else None
    found: dict[str, Any] = {}
    try:
        if settings.token() is not None and (wanted is None or "discord" in wanted):
            from threadspindle.ingress.discord.settings import settings_from_config

            discord = settings_from_config(settings)
            shards, shard_count = getattr(args, "shards", None), getattr(args, "shard_count", None)
            count = shard_count or 1
            ids = tuple(int(i) for i in shards.split(",")) if shards else ()
            if any(not 0 <= i < count for i in ids):
                return f"--shards {shards}: each must be below --shard-count {count}"
            if shard_count or ids:
                discord = discord.model_copy(
                    update={"shard_ids": ids or tuple(range(count)), "shard_count": count}
                )
            found["discord"] = discord
        if settings.telegram_bot_token() is not None and (wanted is None or "telegram" in wanted):
            from threadspindle.ingress.telegram.settings import telegram_settings_from_config

            found["telegram"] = telegram_settings_from_config(settings)
        if any(settings.slack_tokens()) and (wanted is None or "slack" in wanted):
            from threadspindle.ingress.slack.settings import slack_settings_from_config

            found["slack"] = slack_settings_from_config(settings)
    except ValueError as exc:
        return str(exc)
    return found


async def _chat_gateway(
    servers: list[str],
    roots: list[str],
    platforms: dict[str, Any],
    lease_ttl: float,
    ack_wait: float,
    credentials: dict[str, Any],
) -> None:
    from threadspindle.ingress.cluster_gateway import run_chat_gateway

    async with open_jetstream(
        servers, replicas=len(servers), lease_ttl_s=lease_ttl, **credentials
    ) as conn:
        async with trio.open_nursery() as nursery:
            app = await nursery.start(
                lambda task_status: run_chat_gateway(
                    conn,
                    roots=roots,
                    discord=platforms.get("discord"),
                    telegram=platforms.get("telegram"),
                    slack=platforms.get("slack"),
                    ack_wait_s=ack_wait,
                    task_status=task_status,
                )
            )
            print(f"gateway: serving {', '.join(app.homes)}", flush=True)
            with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                async for _ in signals:
                    app.stop()
                    break


async def _gateway(
    servers: list[str], root: str, agent: str, lease_ttl: float, credentials: dict[str, Any]
) -> None:
    root = os.path.realpath(root)
    async with open_jetstream(
        servers, replicas=len(servers), lease_ttl_s=lease_ttl, **credentials
    ) as conn:
        gateway = Gateway(conn, await open_transport(conn), PrintRenderer)
        async with trio.open_nursery() as nursery:
            # Only the console's threads: those of a chat platform are its gateway's.
            await nursery.start(
                lambda task_status: gateway.serve_effects(
                    homes=[DEFAULT_HOME], task_status=task_status
                )
            )
            print(
                "gateway: '/start THREAD [WORKDIR] [AGENT]' starts a conversation, "
                "'THREAD: text' sends a prompt",
                flush=True,
            )
            stdin = trio.lowlevel.FdStream(os.dup(0))
            buf = b""
            n = 0
            skipping = False  # the rest of a line over the limit
            while True:
                chunk = await stdin.receive_some(4096)
                if not chunk:
                    break
                buf += chunk
                if b"\n" not in buf and len(buf) > _CONSOLE_LINE_BYTES:
                    buf, skipping = b"", True  # held no longer: memory stays bounded
                while b"\n" in buf:
                    raw, buf = buf.split(b"\n", 1)
                    if skipping or len(raw) > _CONSOLE_LINE_BYTES:
                        skipping = False
                        print(
                            f"? a line may hold at most {_CONSOLE_LINE_BYTES:,} bytes: not sent",
                            flush=True,
                        )
                        continue
                    line = raw.decode(errors="replace").strip()
                    n += 1
                    action_id = f"gw-{os.getpid()}-{n}-{int(time.time() * 1000)}"
                    try:
                        if line.startswith("/start "):
                            parts = line.split()
                            thread_id = parts[1]
                            workdir = os.path.realpath(parts[2]) if len(parts) > 2 else root
                            await gateway.start(
                                root,
                                ConversationStarted(
                                    thread_id=thread_id,
                                    action_id=action_id,
                                    at=time.time(),
                                    agent=parts[3] if len(parts) > 3 else agent,
                                    requested_workdir=workdir,
                                    resolved_workdir=workdir,
                                ),
                            )
                        elif ":" in line:
                            thread_id, text = (part.strip() for part in line.split(":", 1))
                            await gateway.send(
                                UserMessage(
                                    thread_id=thread_id,
                                    action_id=action_id,
                                    at=time.time(),
                                    author_id="console",
                                    text=text,
                                )
                            )
                        elif line:
                            print("? '/start THREAD' or 'THREAD: text'", flush=True)
                            continue
                        else:
                            continue
                    except (LookupError, ValueError, NatsError) as exc:
                        # No such thread, a field the action refuses (ValueError covers
                        # pydantic's), or a message JetStream would not take: said, not fatal.
                        print(f"? not sent: {exc}", flush=True)
                        continue
                    print(f"(sent {action_id})", flush=True)
            nursery.cancel_scope.cancel()


def cmd_cluster(args: argparse.Namespace, settings: Settings) -> int:
    _protect()
    if getattr(args, "cluster_command", None) != "dev":
        print("usage: spindle cluster dev [--root DIR] [--dir DIR]", file=sys.stderr)
        return EXIT_USAGE
    directory = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="spindle-cluster-"))
    root = os.path.realpath(args.root)
    runners: list[subprocess.Popen[bytes]] = []
    # The servers let in only Spindle's nodes: the configured password, else a fresh one.
    # The nodes get it through the environment (a command line is readable by anyone on
    # the machine), which no agent inherits (agents/base/launch.py drops SPINDLE_*).
    credentials = settings.nats_credentials()
    password = credentials["password"] or secrets.token_urlsafe(24)
    credentials["password"] = password
    child_env = {
        **os.environ,
        "SPINDLE_CLUSTER__USER": str(credentials["user"]),
        "SPINDLE_CLUSTER__PASSWORD": password,
        # The servers' stores and configs: hidden from the runners' agents.
        "SPINDLE_CLUSTER__SERVER_DIR": str((directory / "nats").resolve()),
    }
    cluster = NatsCluster(
        directory / "nats",
        size=3,
        die_with_parent=True,
        user=str(credentials["user"]),
        password=password,
    )
    with cluster:
        urls = ",".join(cluster.plain_urls)
        print(f"NATS JetStream cluster (3 nodes, sync_interval: always): {urls}", flush=True)
        print(
            f"data under {directory}; the servers want user {credentials['user']!r} and a "
            "password (SPINDLE_CLUSTER__PASSWORD, or [cluster] password): "
            f"{_password_file(directory, password)} holds this one",
            flush=True,
        )
        try:
            for name in ("runner-a", "runner-b"):
                command = [sys.executable, "-m", "threadspindle.app.cli", "runner", "--nats"]
                command += [urls, "--root", root, "--name", name]
                command += ["--lease-ttl", str(args.lease_ttl)]
                if getattr(args, "config", None):
                    command += ["--config", str(args.config)]
                runners.append(subprocess.Popen(command, preexec_fn=die_with_parent, env=child_env))
                print(f"{name}: pid {runners[-1].pid}", flush=True)
                time.sleep(1.0)  # runner-a takes the root, runner-b stands by
            platforms = _chat_platforms(args, settings)
            if isinstance(platforms, str):
                print(f"no chat gateway: {platforms}", flush=True)
            elif platforms:
                # A token is configured: a gateway holds those chat connections too (every
                # Discord shard in one process here; docs/scale-out.md splits them).
                command = [sys.executable, "-m", "threadspindle.app.cli"]
                if getattr(args, "config", None):
                    command += ["--config", str(args.config)]
                command += ["gateway", "--nats", urls, "--root", root]
                command += ["--lease-ttl", str(args.lease_ttl)]
                runners.append(subprocess.Popen(command, preexec_fn=die_with_parent, env=child_env))
                print(f"chat gateway ({', '.join(platforms)}): pid {runners[-1].pid}", flush=True)
            trio.run(_gateway, cluster.plain_urls, root, args.agent, args.lease_ttl, credentials)
        finally:
            for proc in runners:
                proc.terminate()
            for proc in runners:
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
    return EXIT_OK


def _password_file(directory: Path, password: str) -> Path:
    """The dev cluster's password in a file only its owner may read (to sign in to it from
    another shell: ``SPINDLE_CLUSTER__PASSWORD=$(cat FILE)``)."""
    path = directory / "nats" / "password"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(password + "\n")
    return path


def cmd_log_export(args: argparse.Namespace, settings: Settings) -> int:
    _protect()
    if args.output and (refused := output_refused(args.output, settings)):
        print(refused, file=sys.stderr)
        return EXIT_USAGE
    from threadspindle.runtime.live.log_read import LogError
    from threadspindle.runtime.live.replay import export_lines

    async def rows() -> list[tuple[int, float, dict[str, Any]]]:
        servers = _servers(args)
        credentials = _credentials(settings, args)
        async with open_jetstream(servers, replicas=len(servers), **credentials) as conn:
            return [row async for row in export_rows(conn, args.thread)]

    try:
        found = trio.run(rows)  # every record read and checked before a line is written
    except LogError as exc:
        print(f"Cannot export: {exc}", file=sys.stderr)
        return EXIT_DATABASE
    except _REFUSALS as exc:
        print(f"Cannot export: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if not found:
        print(f"No thread {args.thread!r} in JetStream.", file=sys.stderr)
        return EXIT_FAILURE
    lines = [line + "\n" for line in export_lines(found, args.thread)]
    if args.output:
        # As the database's export is written: whole, private, never over Spindle's files.
        try:
            write_private(args.output, lambda out: out.write("".join(lines)))
        except OSError as exc:
            print(f"Cannot write {args.output}: {exc.strerror or exc}", file=sys.stderr)
            return write_failure_code(exc)
        print(f"Wrote {len(lines)} actions of {args.thread} to {args.output}.", file=sys.stderr)
    else:
        sys.stdout.write("".join(lines))
    return EXIT_OK
