"""Structured logging: JSON lines to a file under the data dir, readable lines to the terminal.

Every record carries ``thread_id``, ``run`` and ``action`` (empty when not about one), so a
thread's story can be read back with ``grep``. Secrets registered with ``redact`` are
replaced by ``***`` in every message before any handler sees it.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path

from effects.terminal_text import terminal_safe

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


def configure_logging(level: str, log_file: Path | None, *, terminal: bool = True) -> None:
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    root.setLevel(logging.DEBUG)
    context = _ContextFilter()
    if log_file is not None:
        log_file.parent.mkdir(parents=True, exist_ok=True)
        file_handler = logging.FileHandler(log_file, encoding="utf-8")
        file_handler.setLevel(logging.DEBUG)
        file_handler.setFormatter(_JsonFormatter())
        file_handler.addFilter(context)
        root.addHandler(file_handler)
    if terminal:
        term = logging.StreamHandler(sys.stderr)
        term.setLevel(level.upper())
        term.setFormatter(_HumanFormatter())
        term.addFilter(context)
        root.addHandler(term)
    # Libraries' chatter stays out of the terminal unless asked for.
    for noisy in ("discord", "hypercorn", "httpx", "httpcore", "mcp", "asyncio", "trio_asyncio"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))
