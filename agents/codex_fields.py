"""Reading codex's JSON defensively: typed field getters that never raise, and the limits
and text clean-ups both codex parsers share.

Codex's messages are read with these instead of ``msg["key"]``: a field of the wrong type
reads as absent, so an unexpected shape degrades to a skipped or shorter event, never an
exception in the reader.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = [
    "MAX_RESULT_CHARS",
    "MAX_SUMMARY_CHARS",
    "as_dict",
    "as_int",
    "as_list",
    "as_str",
    "cut",
    "shell_command_summary",
]

MAX_RESULT_CHARS = 100_000  # a tool result longer than this is cut: the chat shows a tail anyway
MAX_SUMMARY_CHARS = 500

_BASH_WRAPPER = re.compile(r"^/bin/(?:ba|z)?sh -lc '(.*)'$", re.DOTALL)


def as_str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def as_dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def as_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def shell_command_summary(command: str) -> str:
    """``/bin/bash -lc 'echo hi'`` -> ``echo hi`` (the wrapper says nothing to a reader)."""
    m = _BASH_WRAPPER.match(command.strip())
    return m.group(1) if m else command
