"""Where ``spindle log export -o`` and ``spindle web-timeline -o`` write: ``-`` is standard
output; a directory and Spindle's own files (the database and its side files, the log file,
the config file), under any name, are refused (written over, the database would hold one
thread's export, every other thread lost); a file is written whole and private
(``write_private``)."""

from __future__ import annotations

import argparse
import errno
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from threadspindle.app.config import Settings, default_config_path
from threadspindle.app.exit_codes import EXIT_FAILURE, EXIT_STORAGE

__all__ = ["output_refused", "stdout_named", "write_failure_code", "write_private"]


def stdout_named(args: argparse.Namespace) -> bool:
    """``-o -``: standard output, as the tools of the command line take it (a file named
    "-" was written before)."""
    return args.output is not None and str(args.output) == "-"


def output_refused(path: Path, settings: Settings) -> str | None:
    """Why an export or a page may not be written to ``path`` (None: it may): a directory,
    or one of Spindle's own files; written over, the database would hold one thread's
    export, every other thread lost."""
    if os.path.isdir(path):
        return f"Cannot write {path}: it is a directory; name a file."
    own = _spindles_file(path, settings)
    if own is not None:
        return f"Cannot write {path}: it is {own}; name another file."
    return None


def _spindles_file(path: Path, settings: Settings) -> str | None:
    """What ``path`` is of Spindle's own files (the database and its side files, the log
    file, the config file), or None."""
    db = str(settings.database_path)
    own = {
        db: "Spindle's database",
        f"{db}-wal": "the database's WAL",
        f"{db}-shm": "the database's shared memory",
        f"{db}.lock": "the database's lock",
        str(settings.log_path): "Spindle's log file",
        str(getattr(settings, "_config_file", None) or default_config_path()): "the config file",
    }
    real = {os.path.realpath(p): what for p, what in own.items()}
    return real.get(os.path.realpath(path))


def write_private(path: Path, export: Callable[[TextIO], int]) -> int:
    """Run ``export`` into the file ``path`` names; returns its count.

    A symbolic link is followed: its target is written, the link stays. A regular file (or
    none yet) is written beside the target as ``.NAME.partial`` and renamed over it at the
    end, so a failed export leaves no half file and no old file overwritten. Anything else
    (a FIFO, a terminal, a character device) cannot be renamed over without replacing the
    node itself: it is opened and written directly."""
    target = Path(os.path.realpath(path))
    try:
        mode: int | None = os.stat(target).st_mode
    except FileNotFoundError:
        mode = None
    if mode is not None and not stat.S_ISREG(mode):
        with target.open("w", encoding="utf-8") as out:
            return export(out)
    partial = target.with_name(f".{target.name}.partial")
    # Private, as the log it comes from (it quotes every prompt), or as the file it
    # replaces was: made with the umask, it was readable by anyone.
    keep = stat.S_IMODE(mode) if mode is not None else 0o600
    try:
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, keep)
        os.fchmod(fd, keep)  # (the umask may have taken bits the old file had)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            count = export(out)
        partial.replace(target)
    finally:
        partial.unlink(missing_ok=True)
    return count


def write_failure_code(exc: OSError) -> int:
    """Exit 5 when the disk refused the bytes (full, read-only), else 1."""
    return EXIT_STORAGE if exc.errno in (errno.ENOSPC, errno.EROFS, errno.EDQUOT) else EXIT_FAILURE
