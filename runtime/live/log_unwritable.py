"""``LogUnwritable``, and which errors mean the disk refuses the event log's writes.

``storage_error`` sorts an exception raised by a write into "the storage refused" (a full
disk, a read-only file system, an I/O error, no permission, the file locked by another
process for longer than the busy timeout: a ``LogUnwritable`` saying which
in a few words, after asking the file system when SQLite's code is vague) or anything else
(None: the caller raises it as it is). ``EventLog`` keeps a refused batch buffered and
retries it until the disk takes writes again.
"""

from __future__ import annotations

import errno
import os
import sqlite3
from pathlib import Path

from threadspindle.runtime.live.log_read import LogError

__all__ = ["LogUnwritable", "held_by_another", "storage_error"]


class LogUnwritable(LogError):
    """The disk refuses to take the log's writes: full, read-only, or failing. ``reason``
    says which in a few words; ``unsaved`` counts the actions still buffered when the log
    was closed (0 while it is open: they are kept and retried)."""

    def __init__(self, path: Path, reason: str, *, unsaved: int = 0) -> None:
        self.path = path
        self.reason = reason
        self.unsaved = unsaved
        super().__init__(f"cannot write the event log {path}: {reason}")


# SQLite's primary result codes that mean "the storage refused": SQLITE_READONLY,
# SQLITE_IOERR, SQLITE_FULL, SQLITE_CANTOPEN (https://sqlite.org/rescode.html).
_SQLITE_STORAGE = {8: "read-only", 10: "I/O error", 13: "full", 14: "cannot open"}
# SQLITE_BUSY, SQLITE_LOCKED: the busy timeout ran out while another connection held it.
_SQLITE_HELD = {5, 6}
_OS_STORAGE = {
    errno.ENOSPC: "the disk is full",
    errno.EDQUOT: "the disk quota is used up",
    errno.EROFS: "the file system is read-only",
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied",
    errno.EIO: "disk I/O error",
    errno.EFBIG: "the file is too large",
}


def held_by_another(exc: BaseException) -> bool:
    """``exc`` is SQLite saying another connection holds the file (SQLITE_BUSY or
    SQLITE_LOCKED once the busy timeout ran out)."""
    code = getattr(exc, "sqlite_errorcode", None) if isinstance(exc, sqlite3.Error) else None
    return code is not None and code & 0xFF in _SQLITE_HELD


def storage_error(exc: BaseException, path: Path) -> LogUnwritable | None:
    """``LogUnwritable`` when ``exc`` is the disk refusing a write, else None."""
    if isinstance(exc, LogUnwritable):
        return exc
    if isinstance(exc, sqlite3.Error):
        code = getattr(exc, "sqlite_errorcode", None)
        if held_by_another(exc):
            # Another process holds the file locked (a `sqlite3` shell in a transaction, a
            # backup): like a full disk, the batch waits and is retried, nothing is lost.
            return LogUnwritable(path, "another process holds the database locked")
        if code is None or code & 0xFF not in _SQLITE_STORAGE:
            return None
        primary = _SQLITE_STORAGE[code & 0xFF]
        if primary == "full":
            return LogUnwritable(path, "the disk is full")
        # SQLite reports a full disk met while growing its side files, or a read-only
        # mount, as an I/O or open error: the file system itself says which.
        seen = _file_system_state(path)
        if seen is not None:
            return LogUnwritable(path, seen)
        if primary == "read-only":
            return LogUnwritable(path, f"it is read-only ({exc})")
        return LogUnwritable(path, f"{exc} (SQLite error {code})")
    if isinstance(exc, OSError) and exc.errno in _OS_STORAGE:
        where = f" ({exc.filename})" if exc.filename else ""
        return LogUnwritable(path, f"{_OS_STORAGE[exc.errno]}{where}")
    return None


def _file_system_state(path: Path) -> str | None:
    """ "the file system is read-only" or "the disk is full" when the file system holding
    ``path`` says so, else None."""
    try:
        stats = os.statvfs(path.parent)
    except OSError:
        return None
    if stats.f_flag & os.ST_RDONLY:
        return "the file system is read-only"
    if stats.f_bavail * stats.f_frsize < 64 * 1024:
        return "the disk is full"
    return None
