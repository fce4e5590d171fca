"""The ``spindle`` command line: run, status, doctor, init, replay, log export, web-timeline,
mcp, and the scale-out commands runner, gateway and cluster dev.

The parser only; what each subcommand does is in ``app.commands_cli`` (imported when a
command runs, so ``spindle --help`` stays instant), the exit codes in ``app.exit_codes``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from threadspindle.app.exit_codes import EXIT_OK, EXIT_USAGE

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    # --config and --log-level work before or after the subcommand.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--config",
        type=Path,
        default=argparse.SUPPRESS,
        help="config file (default: <user config dir>/spindle/config.toml)",
    )
    common.add_argument(
        "--log-level",
        choices=["debug", "info", "warning", "error"],
        default=argparse.SUPPRESS,
        help="terminal log verbosity",
    )
    p = argparse.ArgumentParser(
        parents=[common],
        prog="spindle",
        description="One long-lived actor per chat thread, driving a coding-agent CLI.",
        epilog="Exit codes: 0 ok, 1 failure, 2 usage/config error, 3 doctor found a failure, "
        "4 database unusable (corrupt, locked, a row that cannot be read), 5 data directory "
        "not writable (disk full, read-only).",
    )
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    def command(name: str, *, help: str, description: str | None = None) -> argparse.ArgumentParser:
        return sub.add_parser(name, parents=[common], help=help, description=description)

    run = command(
        "run",
        help="run the bot: Discord when a token is set, else the console chat",
        description="Start the runtime. With a Discord token (SPINDLE_DISCORD_TOKEN) "
        "it runs the Discord bot; without one, the console chat.",
    )
    run.add_argument("--console", action="store_true", help="console chat even if a token is set")
    run.add_argument(
        "--web",
        action="store_true",
        help="serve the web chat on 127.0.0.1 (config [web]); with a bot token, beside the bot",
    )
    run.add_argument(
        "--agent",
        help="default agent for new console threads (claude, codex, gemini, opencode, echo)",
    )
    run.add_argument("--workdir", help="workdir of the first console conversation (default: .)")
    run.add_argument("--no-mcp", action="store_true", help="do not start the MCP process manager")

    command(
        "status",
        help="threads, phases, queues and counters, read from the database",
        description="Read-only: works while the bot runs.",
    )
    command(
        "doctor",
        help="check agents, data dir, database and Discord settings",
        description="Prints what is ready and what to do; exit 3 if something fails.",
    )
    init = command("init", help="write a commented config file")
    init.add_argument("--force", action="store_true", help="overwrite an existing file")

    replay = command(
        "replay",
        help="fold a recorded JSONL log and print its effects",
        description="Never performs effects.",
    )
    replay.add_argument("file", type=Path)
    replay.add_argument("--transcript", action="store_true", help="a readable transcript")
    replay.add_argument(
        "--check",
        type=Path,
        metavar="EXPECTED",
        help="compare with EXPECTED; exit 1 on a difference",
    )

    log = command("log", help="the event log")
    log_sub = log.add_subparsers(dest="log_command", metavar="SUBCOMMAND")
    export = log_sub.add_parser("export", parents=[common], help="write one thread's log as JSONL")
    export.add_argument("thread")
    export.add_argument(
        "-o", "--output", type=Path, help="file, or - for standard output (the default)"
    )
    export.add_argument(
        "--nats", help="read the thread's log from NATS JetStream at these URLs (scale-out)"
    )
    archive = log_sub.add_parser(
        "archive",
        parents=[common],
        help="move idle threads out of the database into replayable files",
        description="Each thread is exported to a file of its own (0600), the file is read "
        "back and folded to the thread's state, and only then are its rows deleted. Only "
        "threads with nothing going on qualify. The bot must be stopped.",
    )
    archive.add_argument("threads", nargs="*", metavar="THREAD", help="threads to archive")
    archive.add_argument(
        "--idle-days",
        type=float,
        metavar="N",
        help="every thread with no action for N days (instead of naming them)",
    )
    archive.add_argument(
        "--to", type=Path, metavar="DIR", help="where the files go (default: <data dir>/archive)"
    )
    archive.add_argument("--dry-run", action="store_true", help="list them, change nothing")
    archive.add_argument(
        "--vacuum", action="store_true", help="give the freed space back to the disk (VACUUM)"
    )
    restore = log_sub.add_parser(
        "restore",
        parents=[common],
        help="put archived threads back into the database",
        description="Each file must be a whole thread's export (log export, log archive) of "
        "a thread the database does not have. The bot must be stopped.",
    )
    restore.add_argument("files", nargs="+", type=Path, metavar="FILE")

    # Scale-out over NATS JetStream (docs/scale-out.md; app/scale_out.py).
    runner = command(
        "runner",
        help="serve workdir roots on a NATS JetStream cluster (scale-out)",
        description="Host the thread actors of the given roots, with the thread log on "
        "JetStream; a second runner of the same roots stands by and takes over.",
    )
    runner.add_argument("--nats", required=True, help="server URLs, comma-separated")
    runner.add_argument("--root", action="append", required=True, help="a workdir root")
    runner.add_argument("--name", help="this runner's name (default: runner-<pid>)")
    runner.add_argument("--replicas", type=int, help="stream replicas (default: one per URL)")
    runner.add_argument("--lease-ttl", type=float, default=5.0, help="lease TTL in seconds")
    gateway = command(
        "gateway",
        help="chat gateway to runners over NATS JetStream (scale-out)",
        description="Holds the configured chat connections (Discord shards, Telegram, "
        "Slack) for runners over JetStream; with none configured (or --console), a console: "
        "type '/start THREAD' and 'THREAD: text'; effects are printed.",
    )
    gateway.add_argument("--nats", required=True, help="server URLs, comma-separated")
    gateway.add_argument(
        "--root",
        action="append",
        help="a runners' workdir root (repeat; the console's first is where it starts "
        "conversations; default: .)",
    )
    gateway.add_argument("--console", action="store_true", help="the console gateway")
    gateway.add_argument("--shards", help="Discord shard ids held here, e.g. 0,1 (default: all)")
    gateway.add_argument("--shard-count", type=int, help="Discord shards in all (default: 1)")
    gateway.add_argument(
        "--platforms", help="of the configured ones, those held here (e.g. discord,telegram)"
    )
    gateway.add_argument(
        "--ack-wait",
        type=float,
        default=10.0,
        help="seconds before an effect a dead gateway held is delivered again (default: 10)",
    )
    gateway.add_argument("--agent", default="echo", help="agent of new conversations")
    gateway.add_argument("--lease-ttl", type=float, default=5.0, help="lease TTL in seconds")
    cluster = command("cluster", help="a local JetStream cluster with runners and a gateway")
    cluster_sub = cluster.add_subparsers(dest="cluster_command", metavar="SUBCOMMAND")
    dev = cluster_sub.add_parser(
        "dev", parents=[common], help="3 NATS nodes, two runners and a console gateway"
    )
    dev.add_argument("--root", default=".", help="the runners' workdir root (default: .)")
    dev.add_argument("--dir", help="data directory (default: a new temporary one)")
    dev.add_argument("--agent", default="echo", help="agent of new conversations")
    dev.add_argument("--lease-ttl", type=float, default=5.0, help="lease TTL in seconds")

    timeline = command(
        "web-timeline",
        help="an exported log's timeline as a standalone HTML page",
        description="Reads a file written by `spindle log export` and writes its timeline "
        "(runs, queue length, tool calls, permission waits) as one HTML file with nothing "
        "loaded from elsewhere.",
    )
    timeline.add_argument("file", type=Path)
    timeline.add_argument(
        "-o", "--output", type=Path, help="file, or - for standard output (the default)"
    )

    mcp = command("mcp", help="run the MCP process manager alone")
    mcp.add_argument("--port", type=int, help="port on 127.0.0.1 (default: config mcp.port)")
    return p


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return EXIT_USAGE
    from threadspindle.app import commands_cli  # imported late: `spindle --help` stays instant

    try:
        return commands_cli.dispatch(args)
    except KeyboardInterrupt:
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
