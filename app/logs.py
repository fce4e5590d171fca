"""Structured logging: JSON lines to a file under the data dir, readable lines to the terminal.

Every record carries ``thread_id``, ``run`` and ``action`` (empty when not about one), so a
thread's story can be read back with ``grep``. Secrets registered with ``redact`` are
replaced by ``***`` in every message before any handler sees it.

A log file that cannot be written (a full disk, a read-only file system) is said once, in
one line on the terminal, never as a traceback per record: its records are dropped (the
terminal still gets its own), it is tried again every ``_FileHandler.retry_s`` seconds, and
once it can be written again a record says how many were dropped.

The file is private (0600: records quote prompts and paths) and rotated by size: past
``_FileHandler.max_bytes`` it becomes ``spindle.log.jsonl.1`` (the older ones ``.2``, …,
``backups`` of them kept), so nothing that makes Spindle log, an unauthenticated client of
a webhook included, can fill the disk with it.
"""

from __future__ import annotations

import json
import logging
import logging.handlers
import os
import sys
import time
from pathlib import Path
from typing import Any

from threadspindle.effects.terminal_text import terminal_safe

__all__ = ["configure_logging", "redact"]

_SECRETS: set[str] = set()
_FIELDS = (
    "thread_id",
    "run",
    "action",
)  # "thread" is taken: LogRecord keeps the OS thread id there


def redact(secret: str | None) -> None:
    """Never log this value (tokens, passwords)."""
    if secret and len(secret) >= 6:
        _SECRETS.add(secret)


class _ContextFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        for name in _FIELDS:
            if not hasattr(record, name):
                setattr(record, name, "")
        if _SECRETS:
            message = record.getMessage()
            for secret in _SECRETS:
                message = message.replace(secret, "***")
            record.msg, record.args = message, None
        return True


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for name in _FIELDS:
            entry[name] = getattr(record, name, "")
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


class _HumanFormatter(logging.Formatter):
    """One readable line (plus a traceback) for the terminal. Log messages quote agents'
    stderr and output: escape sequences are removed before they reach the terminal."""

    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%H:%M:%S", time.localtime(record.created))
        where = " ".join(f"{n}={getattr(record, n)}" for n in _FIELDS if getattr(record, n, ""))
        text = f"{stamp} {record.levelname.lower():7} {record.name}: {record.getMessage()}"
        if where:
            text += f"  [{where}]"
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return terminal_safe(text)


class _FileHandler(logging.handlers.RotatingFileHandler):
    """A rotating file handler that survives a disk refusing writes and keeps its files
    private (see the module docstring)."""

    retry_s = 5.0
    max_bytes = 50 * 1024 * 1024
    backups = 3

    def __init__(self, path: Path) -> None:
        super().__init__(
            path,
            maxBytes=self.max_bytes,
            backupCount=self.backups,
            encoding="utf-8",
            delay=True,
        )
        self.failure: OSError | None = None
        self.dropped = 0
        self._retry_at = 0.0

    def emit(self, record: logging.LogRecord) -> None:
        if self.failure is not None:
            if time.monotonic() < self._retry_at:
                self.dropped += 1
                return
            if not self._reopen():
                self.dropped += 1
                return
        try:
            if self.stream is None:
                self.stream = self._open()
        except OSError as exc:
            self._failed(exc)
            self.dropped += 1
            return
        super().emit(record)

    def _open(self) -> Any:
        """The file in append mode, made (or made again) readable by its owner only."""
        fd = os.open(self.baseFilename, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            os.fchmod(fd, 0o600)  # one an older Spindle made with the umask's mode
            return open(fd, "a", encoding=self.encoding, errors=self.errors)
        except BaseException:
            os.close(fd)
            raise

    def handleError(self, record: logging.LogRecord) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, OSError):
            self._failed(exc)
            self.dropped += 1
            return
        super().handleError(record)

    def _failed(self, exc: OSError) -> None:
        if self.stream is not None:
            try:
                self.stream.close()
            except OSError:
                pass  # the buffered rest is what could not be written
            self.stream = None
        self._retry_at = time.monotonic() + self.retry_s
        if self.failure is None:
            self.failure = exc
            print(
                f"spindle: cannot write the log file {self.baseFilename}: "
                f"{exc.strerror or exc}; its records are dropped until it can be written "
                "again (the terminal still shows warnings).",
                file=sys.stderr,
                flush=True,
            )

    def _reopen(self) -> bool:
        """Try the file again: cut a record a failed write left half-written (the file stays
        one JSON object per line), then say how many records were dropped. False when it
        still cannot be written."""
        stream = None
        try:
            _cut_partial_line(Path(self.baseFilename))
            stream = self._open()
            note = logging.LogRecord(
                "spindle.logs",
                logging.WARNING,
                __file__,
                0,
                "the log file could not be written for a while (%s): %d record(s) dropped",
                (self.failure.strerror if self.failure else "", self.dropped),
                None,
            )
            stream.write(self.format(note) + self.terminator)
            stream.flush()
        except OSError:
            self._retry_at = time.monotonic() + self.retry_s
            if stream is not None:
                try:
                    stream.close()
                except OSError:
                    pass
            return False
        self.stream = stream
        self.failure, self.dropped = None, 0
        return True


def _cut_partial_line(path: Path, chunk: int = 64 * 1024) -> None:
    """Truncate ``path`` after its last newline (a record whose write failed half-way)."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return
    with open(path, "rb") as f:
        end = size
        while end > 0:
            start = max(0, end - chunk)
            f.seek(start)
            data = f.read(end - start)
            cut = data.rfind(b"\n")
            if cut >= 0:
                keep = start + cut + 1
                break
            end = start
        else:
            keep = 0
    if keep != size:
        os.truncate(path, keep)


class _OwnDebugOnly(logging.Filter):
    """DEBUG records of Spindle's own loggers only: a library's DEBUG chatter (markdown-it
    logs each rule of each message it renders) rotated a flooded chat's useful records out
    of the log file within seconds."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.INFO or record.name.split(".", 1)[0] in _OWN_LOGGERS


_OWN_LOGGERS = ("spindle", "threadspindle")


def configure_logging(level: str, log_file: Path | None, *, terminal: bool = True) -> None:
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    root.setLevel(logging.DEBUG)
    context = _ContextFilter()
    if log_file is not None:
        try:
            log_file.parent.mkdir(parents=True, exist_ok=True)
        except OSError:
            pass  # said by the handler, once, when it cannot open the file
        file_handler = _FileHandler(log_file)
        file_handler.setLevel(logging.DEBUG)
        file_handler.setFormatter(_JsonFormatter())
        file_handler.addFilter(_OwnDebugOnly())
        file_handler.addFilter(context)
        root.addHandler(file_handler)
    if terminal:
        term = logging.StreamHandler(sys.stderr)
        term.setLevel(level.upper())
        term.setFormatter(_HumanFormatter())
        term.addFilter(_OwnDebugOnly())
        term.addFilter(context)
        root.addHandler(term)
    # Libraries' chatter stays out of the terminal unless asked for.
    for noisy in (
        "discord",
        "hypercorn",
        "httpx",
        "httpcore",
        "mcp",
        "asyncio",
        "trio_asyncio",
        "slack_sdk",  # at DEBUG it logs every request's body and every socket frame
        "slack_bolt",
    ):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))
