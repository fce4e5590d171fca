"""What each ``spindle`` subcommand does (the parser is in ``app.cli``, the exit codes in
``app.exit_codes``)."""

from __future__ import annotations

import argparse
import errno
import sys
from collections.abc import Callable
from importlib import resources
from pathlib import Path

from threadspindle.app.config import ConfigError, Settings, default_config_path, load_settings
from threadspindle.app.exit_codes import (
    EXIT_DATABASE,
    EXIT_DOCTOR,
    EXIT_FAILURE,
    EXIT_OK,
    EXIT_STORAGE,
    EXIT_USAGE,
)

__all__ = ["dispatch"]


def _settings(args: argparse.Namespace) -> Settings:
    level = getattr(args, "log_level", None)
    overrides = {"log_level": level} if level else {}
    return load_settings(getattr(args, "config", None), **overrides)


def dispatch(args: argparse.Namespace) -> int:
    try:
        if args.command == "init":
            return cmd_init(args)
        settings = _settings(args)
        handler = {
            "run": cmd_run,
            "status": cmd_status,
            "doctor": cmd_doctor,
            "replay": cmd_replay,
            "log": cmd_log,
            "web-timeline": cmd_web_timeline,
            "mcp": cmd_mcp,
            "runner": _scale_out("cmd_runner"),
            "gateway": _scale_out("cmd_gateway"),
            "cluster": _scale_out("cmd_cluster"),
        }[args.command]
        return handler(args, settings)
    except ConfigError as exc:
        print(str(exc), file=sys.stderr)
        return EXIT_USAGE


def _scale_out(name: str) -> Callable[[argparse.Namespace, Settings], int]:
    """A command of ``app.scale_out``, imported only when it runs (nats-py is not light)."""

    def handler(args: argparse.Namespace, settings: Settings) -> int:
        from threadspindle.app import scale_out

        command: Callable[[argparse.Namespace, Settings], int] = getattr(scale_out, name)
        return command(args, settings)

    return handler


def cmd_init(args: argparse.Namespace) -> int:
    path: Path = getattr(args, "config", None) or default_config_path()
    if path.exists() and not args.force:
        print(f"{path} already exists (use --force to overwrite it).", file=sys.stderr)
        return EXIT_USAGE
    path.parent.mkdir(parents=True, exist_ok=True)
    template = resources.files("threadspindle.app").joinpath("config_template.toml").read_text()
    path.write_text(template)
    print(f"Wrote {path}. Edit it, then `spindle doctor` to check and `spindle run` to start.")
    return EXIT_OK


def cmd_doctor(args: argparse.Namespace, settings: Settings) -> int:
    from rich.console import Console
    from rich.table import Table

    from threadspindle.app.doctor import run_checks

    rows = run_checks(settings)
    failed = any(r.status == "fail" for r in rows)
    if not sys.stdout.isatty():  # a pipe or a file: one plain line per check, for scripts
        for row in rows:
            fix = f" -> {row.fix}" if row.fix else ""
            print(f"{row.status.upper():4}  {row.name}: {row.found}{fix}")
        return EXIT_DOCTOR if failed else EXIT_OK
    table = Table(title="spindle doctor", show_lines=False)
    for column in ("check", "", "found", "what to do"):
        table.add_column(column)
    marks = {"ok": "[green]ok[/]", "warn": "[yellow]warn[/]", "fail": "[red]FAIL[/]"}
    for row in rows:
        table.add_row(row.name, marks[row.status], row.found, row.fix)
    Console().print(table)
    return EXIT_DOCTOR if failed else EXIT_OK


def _unreadable(exc: Exception, db: Path) -> int:
    """One line for a database that cannot be read: ``LogError`` already names the file (and
    the thread and seq of a bad row); anything else from SQLite gets the file added."""
    from threadspindle.runtime.live.log import LogError

    text = str(exc) if isinstance(exc, LogError) else f"cannot read {db}: {exc}"
    print(f"{text[:1].upper()}{text[1:]}", file=sys.stderr)
    print("`spindle doctor` lists every problem of the file.", file=sys.stderr)
    return EXIT_DATABASE


def cmd_status(args: argparse.Namespace, settings: Settings) -> int:
    import sqlite3

    from threadspindle.app.status import format_status, read_status
    from threadspindle.runtime.live.log import LogError

    try:
        rows = read_status(settings.database_path)
    except FileNotFoundError:
        print(f"No database yet at {settings.database_path}: run `spindle run` first.")
        return EXIT_OK
    except (LogError, sqlite3.Error) as exc:  # corrupt, locked, not ours: say which file
        return _unreadable(exc, settings.database_path)
    print(format_status(rows))
    return EXIT_OK


def cmd_replay(args: argparse.Namespace, settings: Settings) -> int:
    from threadspindle.runtime.live import replay

    try:
        lines = replay.replay_file(args.file, transcript=args.transcript)
    except (OSError, ValueError) as exc:
        print(f"Cannot replay {args.file}: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    if args.check is not None:
        expected = args.check.read_text().splitlines()
        if expected != lines:
            import difflib

            sys.stdout.writelines(
                difflib.unified_diff(
                    [e + "\n" for e in expected],
                    [line + "\n" for line in lines],
                    str(args.check),
                    f"replay of {args.file}",
                )
            )
            return EXIT_FAILURE
        print(f"{len(lines)} lines match {args.check}.")
        return EXIT_OK
    for line in lines:
        print(line)
    return EXIT_OK


def cmd_log(args: argparse.Namespace, settings: Settings) -> int:
    import sqlite3

    from threadspindle.runtime.live import replay
    from threadspindle.runtime.live.log import LogError

    if args.log_command != "export":
        print("usage: spindle log export THREAD [-o FILE]", file=sys.stderr)
        return EXIT_USAGE
    if getattr(args, "nats", None):
        return _scale_out("cmd_log_export")(args, settings)
    db = settings.database_path
    if not db.exists():
        print(f"No database at {db}.", file=sys.stderr)
        return EXIT_DATABASE
    try:
        if args.output:
            # Written beside the target and renamed at the end: a failed export leaves no
            # half file (and no old file overwritten).
            partial = args.output.with_name(f".{args.output.name}.partial")
            try:
                with partial.open("w") as out:
                    count = replay.export_thread(db, args.thread, out)
                partial.replace(args.output)
            finally:
                partial.unlink(missing_ok=True)
            print(f"Wrote {count} actions of {args.thread} to {args.output}.", file=sys.stderr)
        else:
            replay.export_thread(db, args.thread, sys.stdout)
    except KeyError as exc:
        print(f"No thread {exc.args[0]!r} in {db}.", file=sys.stderr)
        return EXIT_FAILURE
    except (LogError, sqlite3.Error) as exc:
        return _unreadable(exc, db)
    except OSError as exc:  # the output file (the database was found above)
        print(f"Cannot write {args.output}: {exc.strerror or exc}", file=sys.stderr)
        full = exc.errno in (errno.ENOSPC, errno.EROFS, errno.EDQUOT)
        return EXIT_STORAGE if full else EXIT_FAILURE
    return EXIT_OK


def cmd_web_timeline(args: argparse.Namespace, settings: Settings) -> int:
    from threadspindle.ingress.web.pages import standalone_timeline
    from threadspindle.ingress.web.timeline import timeline_of_file

    try:
        timeline = timeline_of_file(args.file)
    except (OSError, ValueError) as exc:
        print(f"Cannot read {args.file}: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    if timeline.actions == 0:
        print(f"{args.file} holds no action.", file=sys.stderr)
        return EXIT_FAILURE
    page = standalone_timeline(timeline, title=args.file.name)
    if args.output is None:
        sys.stdout.write(page)
        return EXIT_OK
    try:
        args.output.write_text(page, encoding="utf-8")
    except OSError as exc:
        print(f"Cannot write {args.output}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_FAILURE
    print(f"Wrote the timeline of {len(timeline.runs)} run(s) to {args.output}.", file=sys.stderr)
    return EXIT_OK


def cmd_mcp(args: argparse.Namespace, settings: Settings) -> int:
    from threadspindle.app.process_manager import serve_alone

    return serve_alone(settings, port=args.port)


def cmd_run(args: argparse.Namespace, settings: Settings) -> int:
    from threadspindle.app.app import run_app

    return run_app(settings, args)
