"""What each ``spindle`` subcommand does (the parser is in ``app.cli``, the exit codes in
``app.exit_codes``)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Iterator
from importlib import resources
from pathlib import Path

from threadspindle.app.config import ConfigError, Settings, default_config_path, load_settings
from threadspindle.app.config_loading import misspelt_env
from threadspindle.app.exit_codes import (
    EXIT_DATABASE,
    EXIT_DOCTOR,
    EXIT_FAILURE,
    EXIT_OK,
    EXIT_USAGE,
)
from threadspindle.app.output_files import (
    output_refused,
    stdout_named,
    write_failure_code,
    write_private,
)

__all__ = ["dispatch"]


def _settings(args: argparse.Namespace) -> Settings:
    level = getattr(args, "log_level", None)
    overrides = {"log_level": level} if level else {}
    settings = load_settings(getattr(args, "config", None), **overrides)
    for warning in misspelt_env(Settings, os.environ):
        print(f"Warning: {warning}", file=sys.stderr)
    return settings


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
    if os.path.lexists(path) and not args.force:
        # A link to nothing counts too: an agent that planted one where the config goes
        # would have the file written where it can read it, tokens and all, once filled in.
        what = (
            "already exists"
            if path.exists()
            else f"is a symbolic link to {os.readlink(path)}, which does not exist"
        )
        print(f"{path} {what} (use --force to overwrite it).", file=sys.stderr)
        return EXIT_USAGE
    if path.is_dir():
        print(f"Cannot write {path}: it is a directory; name a file.", file=sys.stderr)
        return EXIT_USAGE
    template = resources.files("threadspindle.app").joinpath("config_template.toml").read_text()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # Private (0600) when new: it is where a token goes.
        write_private(path, lambda out: out.write(template))
    except OSError as exc:  # a full disk, no permission, a file where a folder should be
        print(f"Cannot write {path}: {exc.strerror or exc}", file=sys.stderr)
        return write_failure_code(exc)
    return _write_stdout(
        f"Wrote {path}. Edit it, then `spindle doctor` to check and `spindle run` to start.\n"
    )


def cmd_doctor(args: argparse.Namespace, settings: Settings) -> int:
    from rich.console import Console
    from rich.table import Table

    from threadspindle.app.doctor import run_checks

    rows = run_checks(settings)
    failed = any(r.status == "fail" for r in rows)
    if sys.stdout is None or not sys.stdout.isatty():  # one plain line per check, for scripts
        text = "".join(
            f"{row.status.upper():4}  {row.name}: {row.found}"
            + (f" -> {row.fix}" if row.fix else "")
            + "\n"
            for row in rows
        )
        written = _write_stdout(text)
        return written if written != EXIT_OK else (EXIT_DOCTOR if failed else EXIT_OK)
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
        db = settings.database_path
        return _write_stdout(f"No database yet at {db}: run `spindle run` first.\n")
    except (LogError, sqlite3.Error) as exc:  # corrupt, locked, not ours: say which file
        return _unreadable(exc, settings.database_path)
    return _write_stdout(format_status(rows) + "\n")


# --- standard output ---------------------------------------------------------------------


def _write_stdout(text: str) -> int:
    """Write ``text`` to standard output and flush it here, inside the check: a stdout that
    refuses it (redirected to a full disk, a closed pipe) is one line and exit 5 or 1, not
    a traceback (or, for text left in the buffer, an error at interpreter exit)."""
    if sys.stdout is None:
        return _stdout_closed()
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except OSError as exc:
        return _stdout_failed(exc)
    return EXIT_OK


def _stdout_closed() -> int:
    """Started with standard output closed (``>&-``): Python has no ``sys.stdout`` then."""
    print("Cannot write to standard output: it is closed.", file=sys.stderr)
    return EXIT_FAILURE


def _stdout_failed(exc: OSError) -> int:
    print(f"Cannot write to standard output: {exc.strerror or exc}", file=sys.stderr)
    _discard_stdout()
    return write_failure_code(exc)


def _discard_stdout() -> None:
    """Point standard output at /dev/null: what could not be written stays in its buffer
    and Python flushes it again at exit; failing there too, it would print "Exception
    ignored" and exit 120 after the one line already said."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, sys.stdout.fileno())
        finally:
            os.close(devnull)
    except (OSError, ValueError):  # no descriptor (a replaced sys.stdout): nothing to do
        pass


def cmd_replay(args: argparse.Namespace, settings: Settings) -> int:
    from threadspindle.runtime.live import replay

    if args.check is None:
        return _replay_to_stdout(args.file, replay.replay_lines(args.file, args.transcript))
    try:
        lines = replay.replay_file(args.file, transcript=args.transcript)
    except (OSError, ValueError) as exc:
        print(f"Cannot replay {args.file}: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    try:
        expected = args.check.read_text(encoding="utf-8").splitlines()
    except (OSError, ValueError) as exc:  # missing, a directory, not UTF-8
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        print(f"Cannot read {args.check}: {reason}", file=sys.stderr)
        return EXIT_FAILURE
    if expected == lines:
        return _write_stdout(f"{len(lines)} lines match {args.check}.\n")
    import difflib

    diff = difflib.unified_diff(
        [e + "\n" for e in expected],
        [line + "\n" for line in lines],
        str(args.check),
        f"replay of {args.file}",
    )
    code = _write_stdout("".join(diff))
    return code if code != EXIT_OK else EXIT_FAILURE


def _replay_to_stdout(source: Path, lines: Iterator[str]) -> int:
    """Print a replay as it is folded, 64 KiB at a time. A bad line further on stops it
    there, naming the line, after what came before it was printed (exit 1)."""
    if sys.stdout is None:
        return _stdout_closed()
    chunk: list[str] = []
    size = 0
    while True:
        try:
            line = next(lines, None)
        except (OSError, ValueError) as exc:  # the file, not the output
            print(f"Cannot replay {source}: {exc}", file=sys.stderr)
            code = _write_stdout("".join(chunk))
            return code if code != EXIT_OK else EXIT_FAILURE
        if line is not None:
            chunk.append(line + "\n")
            size += len(line) + 1
        if size >= 65536 or (line is None and chunk):
            try:
                sys.stdout.write("".join(chunk))
            except OSError as exc:
                return _stdout_failed(exc)
            chunk, size = [], 0
        if line is None:
            return _write_stdout("")  # the flush, inside the check


def cmd_log(args: argparse.Namespace, settings: Settings) -> int:
    import sqlite3

    from threadspindle.runtime.live import replay
    from threadspindle.runtime.live.log import LogError

    if args.log_command in ("archive", "restore"):
        from threadspindle.app import log_archive

        if args.log_command == "archive":
            return log_archive.cmd_log_archive(args, settings)
        return log_archive.cmd_log_restore(args, settings)
    if args.log_command != "export":
        print(
            "usage: spindle log export THREAD [-o FILE] | archive [THREAD ...] "
            "[--idle-days N] | restore FILE ...",
            file=sys.stderr,
        )
        return EXIT_USAGE
    if stdout_named(args):
        args.output = None
    if getattr(args, "nats", None):
        return _scale_out("cmd_log_export")(args, settings)
    db = settings.database_path
    if not db.exists():
        print(f"No database at {db}.", file=sys.stderr)
        return EXIT_DATABASE
    if args.output is not None and (refused := output_refused(args.output, settings)):
        print(refused, file=sys.stderr)
        return EXIT_USAGE
    try:
        if args.output is not None:
            count = write_private(
                args.output, lambda out: replay.export_thread(db, args.thread, out)
            )
            print(f"Wrote {count} actions of {args.thread} to {args.output}.", file=sys.stderr)
        elif sys.stdout is None:
            return _stdout_closed()
        else:
            replay.export_thread(db, args.thread, sys.stdout)
            sys.stdout.flush()  # here, inside the check, not at interpreter exit
    except KeyError as exc:
        print(f"No thread {exc.args[0]!r} in {db}.", file=sys.stderr)
        return EXIT_FAILURE
    except (LogError, sqlite3.Error) as exc:
        return _unreadable(exc, db)
    except OSError as exc:  # the output (the database was found above)
        if args.output is None:
            return _stdout_failed(exc)
        print(f"Cannot write {args.output}: {exc.strerror or exc}", file=sys.stderr)
        return write_failure_code(exc)
    return EXIT_OK


def cmd_web_timeline(args: argparse.Namespace, settings: Settings) -> int:
    from threadspindle.ingress.web.pages import standalone_timeline
    from threadspindle.ingress.web.timeline import timeline_of_file

    to_stdout = args.output is None or stdout_named(args)
    if not to_stdout and (refused := output_refused(args.output, settings)):
        print(refused, file=sys.stderr)
        return EXIT_USAGE
    try:
        timeline = timeline_of_file(args.file)
    except (OSError, ValueError) as exc:
        print(f"Cannot read {args.file}: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    if timeline.actions == 0:
        print(f"{args.file} holds no action.", file=sys.stderr)
        return EXIT_FAILURE
    page = standalone_timeline(timeline, title=args.file.name)
    if to_stdout:
        return _write_stdout(page)
    try:
        # As an export is written: whole or not at all, private (the page quotes every
        # prompt), never over the database.
        write_private(args.output, lambda out: out.write(page))
    except OSError as exc:
        print(f"Cannot write {args.output}: {exc.strerror or exc}", file=sys.stderr)
        return write_failure_code(exc)
    print(f"Wrote the timeline of {len(timeline.runs)} run(s) to {args.output}.", file=sys.stderr)
    return EXIT_OK


def cmd_mcp(args: argparse.Namespace, settings: Settings) -> int:
    from threadspindle.app.process_manager import serve_alone

    return serve_alone(settings, port=args.port)


def cmd_run(args: argparse.Namespace, settings: Settings) -> int:
    from threadspindle.app.app import run_app

    refused = _workdir_refused(args)
    if refused is not None:
        print(f"--workdir: {refused}", file=sys.stderr)
        return EXIT_USAGE
    return run_app(settings, args)


def _workdir_refused(args: argparse.Namespace) -> str | None:
    """Why ``--workdir`` cannot be a conversation's workdir, if it cannot: checked before
    anything starts, since the console refuses it only once the runtime runs (a fresh data
    dir's first conversation then stopped ``spindle run`` with a traceback). Both the value
    given and the path it resolves to are checked, as the console uses the latter."""
    if not getattr(args, "workdir", None):
        return None
    from threadspindle.app.app import console_workdir
    from threadspindle.ingress.input_checks import InputRefused, check_path

    try:
        check_path(args.workdir)
        check_path(console_workdir(args))
    except InputRefused as exc:
        return str(exc)
    return None
