"""Listing an agent CLI's saved sessions for ``/<agent> conversations``: read-only, from
the CLI's own store on disk, newest first.

- Claude Code: ``$HOME/.claude/projects/<cwd slug>/<session id>.jsonl`` (the slug is the
  working directory with every non-alphanumeric character replaced by ``-``).
- Codex: ``$CODEX_HOME/sessions/YYYY/MM/DD/rollout-<timestamp>-<thread id>.jsonl``.
Other CLIs keep theirs in formats we do not read yet: the list is empty for them.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

__all__ = ["SavedSession", "list_sessions"]

_LIMIT = 25
_ROLLOUT = re.compile(
    r"rollout-.*?-([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})\.jsonl$"
)


@dataclass(frozen=True)
class SavedSession:
    id: str
    title: str
    modified: float


def list_sessions(agent: str, workdir: str, home: str | None = None) -> list[SavedSession]:
    home_dir = Path(home or os.path.expanduser("~"))
    if agent == "claude":
        return _claude(home_dir, workdir)
    if agent == "codex":
        return _codex(Path(os.environ.get("CODEX_HOME") or home_dir / ".codex"))
    return []


def _first_user_text(path: Path) -> str:
    """The first prompt in a session file, as its title (best effort)."""
    try:
        with path.open(encoding="utf-8", errors="replace") as lines:
            for _, line in zip(range(50), lines, strict=False):
                text = _user_text(line)
                if text:
                    return " ".join(text.split())[:80]
    except OSError:
        pass
    return ""


def _user_text(line: str) -> str:
    try:
        record = json.loads(line)
    except ValueError:
        return ""
    if not isinstance(record, dict):
        return ""
    message = record.get("message") or record.get("payload") or {}
    if not isinstance(message, dict) or message.get("role") != "user":
        return ""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                return str(part["text"])
    return ""


def _claude(home: Path, workdir: str) -> list[SavedSession]:
    slug = re.sub(r"[^A-Za-z0-9]", "-", workdir)
    folder = home / ".claude" / "projects" / slug
    files = sorted(folder.glob("*.jsonl"), key=lambda p: p.stat().st_mtime, reverse=True)
    return [SavedSession(p.stem, _first_user_text(p), p.stat().st_mtime) for p in files[:_LIMIT]]


def _codex(codex_home: Path) -> list[SavedSession]:
    files = sorted(
        (codex_home / "sessions").glob("*/*/*/rollout-*.jsonl"),
        key=lambda p: p.stat().st_mtime,
        reverse=True,
    )
    sessions = []
    for path in files[:_LIMIT]:
        match = _ROLLOUT.search(path.name)
        if match:
            sessions.append(
                SavedSession(match.group(1), _first_user_text(path), path.stat().st_mtime)
            )
    return sessions
