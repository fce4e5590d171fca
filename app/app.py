"""``spindle run``: put the parts together and run until told to stop.

It makes its own process unreadable to its children (non-dumpable) and its files private,
opens the event log first (a corrupt or locked file, a row that cannot be read, a full or
read-only disk: one line naming the file and exit 4 or 5, before anything else starts),
stops whatever the previous run's agents left running (before any conversation resumes:
``effects/child_registry.py``), starts the MCP process manager (its operator token in memory
only), and runs the chat platforms that have a token (Discord, Telegram, WhatsApp, Slack,
or any of them together over one runtime: ``ingress/platforms.py``), the web chat with them
or alone (``--web`` or ``[web] enabled``: its URL with a fresh access token printed once),
or the console chat (nothing else configured, or ``--console``). Agents get the process
manager through their adapters' own config mechanism (``AgentOptions.mcp_servers``), each
thread with its own token so its processes stay its own.
"""

from __future__ import annotations

import argparse
import logging
import os
import secrets
import signal
import subprocess
import sys
import time
from contextlib import AsyncExitStack
from functools import partial
from pathlib import Path
from typing import Any

import trio

from threadspindle.agents import known_agents, unknown_agent_message
from threadspindle.app.agent_factory import AgentFactory
from threadspindle.app.config import Settings
from threadspindle.app.exit_codes import (
    EXIT_DATABASE,
    EXIT_FAILURE,
    EXIT_OK,
    EXIT_STORAGE,
    EXIT_USAGE,
)
from threadspindle.app.logs import configure_logging, redact
from threadspindle.effects.child_env import child_environment
from threadspindle.effects.child_registry import FILE_NAME as CHILDREN_FILE
from threadspindle.effects.child_registry import ChildRegistry, stop_recorded_children
from threadspindle.effects.open_files import raise_open_file_limit
from threadspindle.effects.platform import PlatformLimits
from threadspindle.effects.process import record_children
from threadspindle.effects.sandbox import SandboxUnavailable, check_sandbox
from threadspindle.effects.self_protection import make_non_dumpable, private_dir, private_file
from threadspindle.effects.workspace_port import workspace_factory
from threadspindle.runtime.core.model import Policy
from threadspindle.runtime.live.log import EventLog, LogError, LogLocked, LogUnwritable
from threadspindle.runtime.live.tuning import tune_gc

__all__ = ["run_app"]

logger = logging.getLogger("spindle.app")


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def choose_console_agent(settings: Settings, requested: str | None) -> str:
    """The console's default agent, telling the user why when it is the echo demo."""
    from threadspindle.app.doctor import detect_agents, pick_default_agent

    if requested:
        return requested
    agents = detect_agents(settings, with_version=False)
    agent = pick_default_agent(settings, agents)
    if agent == "echo" and settings.runtime.default_agent == "auto":
        missing = ", ".join(
            f"{a.name} ({'not logged in' if a.path else 'not installed'})" for a in agents
        )
        _say(f"No agent CLI is ready: {missing}.")
        _say("Install one and log in (`spindle doctor` says how), or try Spindle now with the")
        _say("built-in echo agent: a DEMO that echoes your prompts back slowly, word by word")
        _say('(a prompt with the word "tool" simulates a tool call, "ask" a permission prompt).')
    return agent


async def _serve(
    settings: Settings, args: argparse.Namespace, log: EventLog, console_agent: str | None
) -> int:
    if console_agent is not None:
        settings = _with_console_workdir(settings, args)
    policy = settings.runtime.policy().replace(workspace=settings.workspaces.policy())
    async with trio.open_nursery() as nursery:
        # Ctrl-C and SIGTERM end the program the orderly way: the console stops reading
        # input, the Discord bot is asked to stop; either way the runtime then parks every
        # thread (runs stopped with a notice, queues kept) before anything closes.
        stop_input = trio.CancelScope()
        mcp = None
        if settings.mcp.enabled and not args.no_mcp:
            from threadspindle.app.process_manager import config_from_settings
            from threadspindle.effects.mcp_manager.server import (
                PortUnavailable,
                serve_process_manager,
            )

            mcp_config = config_from_settings(settings)
            mcp_config = mcp_config.model_copy(
                update={
                    # Memory only: a token in a file is a token an agent can read.
                    "token": mcp_config.token or secrets.token_urlsafe(32),
                    "sandbox": _process_sandbox(settings),
                }
            )
            try:
                mcp = await nursery.start(serve_process_manager, mcp_config)
            except PortUnavailable as exc:
                # Only a fixed port can be taken (the default, 0, is any free one).
                _say(f"Cannot start: mcp.port = {exc.port}: {exc}. Set another, or 0 (any free).")
                return EXIT_USAGE
            logger.info("MCP process manager on %s", mcp.url)
        factory = AgentFactory(settings, mcp, check_roots=console_agent is None)
        runtime_kwargs: dict[str, Any] = {
            "idle_timeout_s": settings.runtime.idle_actor_timeout_s,
            "workspace_factory": workspace_factory(
                settings.workspaces.options(sandbox=settings.workspace_sandbox())
            ),
            # A project channel's own default verbosity for the threads it opens.
            "channel_policies": {
                channel_id: policy.replace(verbosity=channel.verbosity)
                for channel_id, channel in settings.discord.project_channels.items()
                if channel.verbosity is not None
            },
        }
        if mcp is not None:
            runtime_kwargs["enrich"] = partial(_with_processes, mcp)
            runtime_kwargs["on_dispose"] = mcp.stop_thread_processes
            # The agents' schedule_wakeup tool posts its wake-ups into the runtime.
            runtime_kwargs["on_start"] = lambda runtime: mcp.wakeups.attach(runtime.post)
        web = _web_settings(settings, args) if console_agent is None else None
        if console_agent is None and (
            settings.telegram_bot_token() is not None
            or settings.whatsapp_configured()
            or any(settings.slack_tokens())
            or web
        ):
            # Telegram, WhatsApp, Slack and/or the web chat (with Discord too when it has a
            # token): one runtime, every platform.
            from threadspindle.ingress.discord.settings import settings_from_config
            from threadspindle.ingress.platforms import run_platforms
            from threadspindle.ingress.slack.settings import slack_settings_from_config
            from threadspindle.ingress.telegram.settings import telegram_settings_from_config
            from threadspindle.ingress.whatsapp.settings import whatsapp_settings_from_config

            discord = settings_from_config(settings) if settings.token() is not None else None
            telegram = (
                telegram_settings_from_config(settings)
                if settings.telegram_bot_token() is not None
                else None
            )
            slack = slack_settings_from_config(settings) if any(settings.slack_tokens()) else None
            whatsapp = (
                whatsapp_settings_from_config(settings) if settings.whatsapp_configured() else None
            )
            limits = PlatformLimits(min_edit_interval_s=settings.runtime.edit_interval_s)
            finished = trio.Event()

            async def platforms(task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
                try:
                    await run_platforms(
                        discord=discord,
                        telegram=telegram,
                        whatsapp=whatsapp,
                        slack=slack,
                        web=web,
                        log=log,
                        adapter_factory=factory,
                        policy=policy,
                        discord_limits=limits,
                        stop_on_signals=True,
                        task_status=task_status,
                        **runtime_kwargs,
                    )
                finally:
                    finished.set()

            try:
                both = await nursery.start(platforms)
            except Exception as error:
                busy = _port_unavailable(error)
                # Whatever started before (the process manager) goes too: returning from
                # the nursery's body waits for its children, and the manager serves for
                # ever (the bot said it could not start, and ran on, deaf to SIGTERM).
                nursery.cancel_scope.cancel()
                if busy is not None:
                    _say(
                        f"Cannot start: web.port = {busy.port}: {busy}. "
                        "Set another, or 0 (any free)."
                    )
                    return EXIT_USAGE
                if not isinstance(error, OSError):
                    raise
                # The WhatsApp webhook's port (the web chat's is PortUnavailable above).
                _say(
                    f"Cannot start: the WhatsApp webhook cannot listen on "
                    f"{settings.whatsapp.webhook_host}:{settings.whatsapp.webhook_port}: "
                    f"{error.strerror or error}. Set whatsapp.webhook_port to another port."
                )
                return EXIT_USAGE
            if both.web is not None:
                from threadspindle.app.web_address import tell_web_address

                tell_web_address(
                    both.web, Path(settings.data_dir), _say, terminal=sys.stderr.isatty()
                )
            if _early_stop.requested:
                both.stop()
            else:
                names = [
                    name
                    for name, on in (
                        ("Discord", discord is not None),
                        ("Telegram", telegram is not None),
                        ("WhatsApp", whatsapp is not None),
                        ("Slack", slack is not None),
                    )
                    if on
                ]
                joined = " and ".join(
                    [", ".join(names[:-1]), names[-1]] if len(names) > 1 else names
                )
                where = f"Connected to {joined}" if names else "Serving the web chat"
                _say(f"{where}. Stop with Ctrl-C.")
                if both.whatsapp is not None:
                    _say(f"WhatsApp webhook on {both.whatsapp.webhook_url}")
            await finished.wait()
        elif console_agent is None:
            from threadspindle.ingress.discord.host import run_discord_runtime
            from threadspindle.ingress.discord.settings import settings_from_config

            limits = PlatformLimits(min_edit_interval_s=settings.runtime.edit_interval_s)
            done = trio.Event()

            async def discord_bot(task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
                try:
                    await run_discord_runtime(
                        settings_from_config(settings),
                        log=log,
                        adapter_factory=factory,
                        policy=policy,
                        limits=limits,
                        stop_on_signals=True,
                        task_status=task_status,
                        **runtime_kwargs,
                    )
                finally:
                    done.set()

            app = await nursery.start(discord_bot)
            if _early_stop.requested:  # SIGTERM while it was starting: stop the same way
                app.stop()
            else:
                _say("Connected to Discord. Stop with Ctrl-C.")
            await done.wait()
        else:
            nursery.start_soon(_quit_on_signal, stop_input)
            await _console(
                settings, args, log, factory, policy, console_agent, runtime_kwargs, stop_input
            )
        nursery.cancel_scope.cancel()
    return EXIT_OK


async def _console(
    settings: Settings,
    args: argparse.Namespace,
    log: EventLog,
    factory: AgentFactory,
    policy: Policy,
    agent: str,
    runtime_kwargs: dict[str, Any],
    stop_input: trio.CancelScope,
) -> None:
    from threadspindle.effects.console_platform import ConsolePlatform
    from threadspindle.ingress.console import open_console, read_piped_lines, read_terminal_lines

    workdir = console_workdir(args)
    interactive = sys.stdin.isatty() and sys.stdout.isatty()
    async with AsyncExitStack() as stack:
        if interactive:
            # A terminal: prompt_toolkit owns the input line (history, editing, a live status
            # toolbar) and keeps it below the output that streams in (patch_stdout).
            # trio-asyncio first: it patches asyncio.get_running_loop, which prompt_toolkit
            # binds when it is imported (imported before, prompt_toolkit found no running
            # loop at its second prompt and `spindle run` exited 1).
            from threadspindle.effects.asyncio_loop import open_asyncio_loop  # isort: skip
            from prompt_toolkit.patch_stdout import patch_stdout  # isort: skip

            await stack.enter_async_context(open_asyncio_loop())
            stack.enter_context(patch_stdout(raw=True))
        # Ids of its own per run: the log keeps them, and a later run edits them.
        platform = ConsolePlatform(sys.stdout, rich=False, id_prefix=f"c{secrets.token_hex(3)}-")
        async with open_console(
            platform,
            out=sys.stdout,
            default_agent=agent,
            default_workdir=workdir,
            log=log,
            adapter_factory=factory,
            policy=policy,
            **runtime_kwargs,
        ) as chat:
            if agent == "echo":
                _say("Using the echo demo agent. Type /help for commands, /quit to leave.")
            else:
                _say(f"Using {agent}. Type /help for commands, /quit to leave.")
            await chat.ensure_conversation(announce=True)
            with stop_input:
                if interactive:
                    await read_terminal_lines(chat)
                else:
                    await read_piped_lines(chat)
        platform.close()


def _web_settings(settings: Settings, args: argparse.Namespace) -> Any:
    """The web chat's settings when it is asked for (``--web`` or ``[web] enabled``), else
    None. Its default agent is the console's (the first CLI ready, else echo)."""
    if not (getattr(args, "web", False) or settings.web.enabled):
        return None
    from threadspindle.agents import known_agents
    from threadspindle.app.doctor import detect_agents, pick_default_agent
    from threadspindle.ingress.web.settings import WebSettings, new_token

    token = new_token()
    redact(token)
    roots = tuple(settings.runtime.allowed_roots) or ("~",)
    workdir = console_workdir(args) if getattr(args, "workdir", None) else roots[0]
    agent = getattr(args, "agent", None) or pick_default_agent(
        settings, detect_agents(settings, with_version=False)
    )
    return WebSettings(
        host=settings.web.host,
        port=settings.web.port,
        token=token,
        agents=tuple(known_agents()),
        default_agent=agent,
        default_workdir=workdir,
        allowed_roots=roots,
    )


def _port_unavailable(error: BaseException) -> Any:
    """The web chat's ``PortUnavailable`` that ended the start, also inside trio's groups."""
    from threadspindle.ingress.web.host import PortUnavailable

    if isinstance(error, PortUnavailable):
        return error
    if isinstance(error, BaseExceptionGroup):
        for inner in error.exceptions:
            found = _port_unavailable(inner)
            if found is not None:
                return found
    return None


def console_workdir(args: argparse.Namespace) -> str:
    return os.path.realpath(os.path.expanduser(args.workdir or "."))


def _with_console_workdir(settings: Settings, args: argparse.Namespace) -> Settings:
    """In the console the directory you start from is yours to work in: an allowed root of
    the conversations and of the processes their agents start (the process manager's roots
    come from the same setting). So is the folder `/worktree new` puts its repository's
    worktrees in (``<repo>.worktrees`` beside it): else the worktree is made and the
    conversation refused there, outside the roots."""
    workdir = console_workdir(args)
    roots = settings.runtime.allowed_roots
    known = {os.path.realpath(os.path.expanduser(r)) for r in roots}
    wanted = [workdir, _worktree_folder(workdir, settings.workspaces.worktree_dir)]
    added = [path for path in dict.fromkeys(wanted) if path is not None and path not in known]
    if not added:
        return settings
    runtime = settings.runtime.model_copy(update={"allowed_roots": [*roots, *added]})
    return settings.model_copy(update={"runtime": runtime})


def _worktree_folder(workdir: str, configured: str | None) -> str | None:
    """Where `/worktree new` would put the worktrees of the repository ``workdir`` is in
    (its main worktree's), or None when it is in none (or git cannot say)."""
    from threadspindle.effects.git_worktrees import worktree_dir

    try:
        listed = subprocess.run(
            ["git", "-C", workdir, "worktree", "list", "--porcelain"],
            env=child_environment(),  # never Spindle's secrets (effects/child_env.py)
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    first = listed.stdout.splitlines()[:1] if listed.returncode == 0 else []
    if not first or not first[0].startswith("worktree "):
        return None
    return worktree_dir(first[0][len("worktree ") :], configured)


def _with_processes(mcp: Any, action: Any) -> Any:
    """``/status`` learns the thread's managed processes here, in ingress: the core only
    prints what the action carries."""
    from threadspindle.runtime.core.actions import StatusRequested

    if not isinstance(action, StatusRequested):
        return action
    now = time.time()
    lines = tuple(p.summary(now) for p in mcp.processes_for_thread(action.thread_id))
    return action.replace(processes=lines) if lines else action


class _EarlyStop:
    """SIGTERM before the console or the bot listens for signals (opening the log, folding
    it, connecting): remembered, and the start-up then ends in the orderly stop (threads
    parked, queues kept), instead of the process dying half-started. A second SIGTERM
    after the stop has begun ends the process at once, as without a handler."""

    def __init__(self) -> None:
        self.requested = False

    def install(self) -> None:
        signal.signal(signal.SIGTERM, self._handle)

    def _handle(self, signum: int, frame: object) -> None:
        if self.requested:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.raise_signal(signal.SIGTERM)
        self.requested = True


_early_stop = _EarlyStop()


async def _quit_on_signal(scope: trio.CancelScope) -> None:
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        if _early_stop.requested:
            logger.info("stopping on SIGTERM received while starting")
            scope.cancel()
            return
        async for signum in signals:
            _early_stop.requested = True
            logger.info("stopping on %s", signal.Signals(signum).name)
            scope.cancel()
            return


def _process_sandbox(settings: Settings) -> Any:
    """MCP-managed processes run sandboxed when any agent does: else a sandboxed agent
    could ask the process manager to run, outside, what it may not run itself."""
    from threadspindle.app.config import AGENT_NAMES

    for agent in (*AGENT_NAMES, "command", "echo"):
        sandbox = settings.sandbox_for(agent)
        if sandbox is not None:
            return sandbox
    return None


def _protect(settings: Settings) -> None:
    """Before any secret is used or any file written: this process unreadable to same-user
    processes (``/proc/<pid>/environ`` holds the bot token), its files private."""
    make_non_dumpable()
    private_dir(settings.data_path)
    private_file(settings.log_path)
    db = settings.database_path
    private_dir(db.parent) if db.parent == settings.data_path else None
    for path in (db, Path(f"{db}-wal"), Path(f"{db}-shm")):
        if path == db or path.exists():
            private_file(path)


def _stop_leftovers(settings: Settings) -> None:
    """What the previous run's agents left running is stopped before any conversation is
    resumed (it would write into the session being resumed); then this run's are recorded."""
    path = settings.data_path / CHILDREN_FILE
    stopped = stop_recorded_children(path)
    if stopped:
        _say(
            f"Stopped {len(stopped)} agent process tree(s) left running by the previous run "
            f"({', '.join(c.label or str(c.pid) for c in stopped)})."
        )
    record_children(ChildRegistry(path))


def _log_failure(exc: BaseException) -> LogError | None:
    """The ``LogError`` that ended the run, also from inside trio's exception groups."""
    if isinstance(exc, LogError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = _log_failure(inner)
            if found is not None:
                return found
    return None


def _platform_refused(exc: BaseException) -> BaseException | None:
    """A chat platform's refusal of its tokens at start-up, also inside exception groups."""
    if "threadspindle.ingress.slack.host" in sys.modules:
        from threadspindle.ingress.slack.host import SlackRefused

        if isinstance(exc, SlackRefused):
            return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = _platform_refused(inner)
            if found is not None:
                return found
    return None


def _say_log_failure(failure: LogError, starting: bool) -> int:
    if isinstance(failure, LogUnwritable):
        _say(
            f"{'Cannot start' if starting else 'Stopped'}: {failure}. Free some space or make "
            "it writable, then start again; nothing that was saved is lost."
        )
        return EXIT_STORAGE
    _say(f"{'Cannot start' if starting else 'Stopped'}: {failure}")
    if starting and not isinstance(failure, LogLocked):
        _say("No row was changed or removed. `spindle doctor` lists every problem of the file.")
    return EXIT_DATABASE


def _archive_idle(settings: Settings, log: EventLog, idle_days: float) -> None:
    """``[runtime] archive_idle_days``: idle threads out of the database before any actor
    starts (under this process's lock). A thread that cannot be archived stays and is said;
    the bot starts all the same."""
    from threadspindle.app.log_archive import archive_at_start

    moved = archive_at_start(log, idle_days, settings.data_path / "archive")
    for line in moved.said:
        logger.log(logging.WARNING if line.startswith("Not archived") else logging.INFO, line)
    if moved.threads:
        _say(
            f"Archived {moved.threads} thread(s) idle for {idle_days:g} days or more to "
            f"{settings.data_path / 'archive'} (`spindle log restore FILE` puts one back)."
        )
    if moved.problems:
        _say(f"{moved.problems} idle thread(s) could not be archived: see the log.")


def run_app(settings: Settings, args: argparse.Namespace) -> int:
    _early_stop.install()
    requested_agent = getattr(args, "agent", None)
    if requested_agent is not None and requested_agent not in known_agents():
        _say(f"--agent: {unknown_agent_message(requested_agent)}.")
        return EXIT_USAGE
    given_workdir = getattr(args, "workdir", None)
    if given_workdir is not None and not os.path.isdir(os.path.expanduser(given_workdir)):
        _say(f"--workdir {given_workdir}: no such directory.")
        return EXIT_USAGE
    command = settings.agents.get("command")
    if requested_agent == "command" and (command is None or not command.options().binary):
        # (As ``runtime.default_agent = "command"`` is refused without it.)
        _say(
            "--agent command: set the command line to run first: [agents.command] binary "
            '= "python3 my_agent.py" (or command = ["python3", "my_agent.py"])'
        )
        return EXIT_USAGE
    _protect(settings)
    raise_open_file_limit()
    telegram = settings.telegram_bot_token() is not None
    whatsapp = settings.whatsapp_configured()
    slack = any(settings.slack_tokens())
    web = getattr(args, "web", False) or settings.web.enabled
    console = args.console or (
        settings.token() is None and not telegram and not whatsapp and not slack and not web
    )
    if not console and settings.token() is not None:
        try:
            from threadspindle.ingress.discord.settings import settings_from_config

            settings_from_config(settings)
        except ValueError as exc:
            _say(f"Cannot start the Discord bot: {exc}")
            return EXIT_USAGE
    if not console and telegram:
        try:
            from threadspindle.ingress.telegram.settings import telegram_settings_from_config

            telegram_settings_from_config(settings)
        except ValueError as exc:
            _say(f"Cannot start the Telegram bot: {exc}")
            return EXIT_USAGE
    if not console and slack:
        try:
            from threadspindle.ingress.slack.settings import slack_settings_from_config

            slack_settings_from_config(settings)
        except ValueError as exc:
            _say(f"Cannot start the Slack app: {exc}")
            return EXIT_USAGE
    if not console and whatsapp:
        try:
            from threadspindle.ingress.whatsapp.settings import whatsapp_settings_from_config

            whatsapp_settings_from_config(settings)
        except ValueError as exc:
            _say(f"Cannot start WhatsApp: {exc}")
            return EXIT_USAGE
    if _process_sandbox(settings) is not None:
        try:
            check_sandbox(_process_sandbox(settings))
        except SandboxUnavailable as exc:
            _say(f"Cannot start: {exc}")
            return EXIT_USAGE
    # The event log first: a file that cannot be used is one line and an exit code, before
    # the log file, the agents or the terminal are touched.
    log = EventLog(settings.database_path)
    try:
        log.open()
    except LogError as exc:
        return _say_log_failure(exc, starting=True)
    # The console chat shares the terminal with the log: only warnings go there unless a
    # level was asked for; the JSON log file under the data dir gets everything anyway.
    level = settings.log_level
    if console and getattr(args, "log_level", None) is None:
        level = "warning"
    configure_logging(level, settings.log_path, terminal=True)
    redact(settings.token())
    redact(settings.telegram_bot_token())
    for slack_token in settings.slack_tokens():
        redact(slack_token)
    for secret in settings.whatsapp_secrets().values():
        redact(secret or None)
    if settings.mcp.token is not None:
        redact(settings.mcp.token.get_secret_value())
    if settings.transcription.api_key is not None:
        redact(settings.transcription.api_key.get_secret_value())
    agent = choose_console_agent(settings, args.agent) if console else None
    _stop_leftovers(settings)  # under the log's lock: never another live Spindle's children
    if settings.runtime.archive_idle_days is not None:
        try:
            _archive_idle(settings, log, settings.runtime.archive_idle_days)
        except LogError as exc:  # a row that cannot be read: start-up would refuse it too
            log.close()
            return _say_log_failure(exc, starting=True)
    tune_gc()  # thousands of threads' states: see runtime/live/tuning.py
    code = EXIT_OK
    try:
        code = trio.run(_serve, settings, args, log, agent)
    except KeyboardInterrupt:
        code = EXIT_OK
    except BaseException as exc:
        failure = _log_failure(exc)
        refused = _platform_refused(exc)
        if refused is not None:
            _say(f"Cannot start: {refused}")
            code = EXIT_USAGE
        elif failure is None:
            logger.exception("spindle run stopped on an error")
            code = EXIT_FAILURE
        else:
            code = _say_log_failure(failure, starting=log.flushes == 0)
    finally:
        record_children(None)
        try:
            log.close()
        except LogUnwritable as exc:
            _say(
                f"Stopped while {exc.path} cannot be written ({exc.reason}): {exc.unsaved} "
                "action(s) recorded since then were not saved. Nothing that was shown or "
                "acknowledged is among them."
            )
            code = EXIT_STORAGE
    return code
