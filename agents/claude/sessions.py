"""Claude Code's past sessions for ``/claude conversations``: read-only, from the CLI's own
store, ``$HOME/.claude/projects/<cwd slug>/<session id>.jsonl``, newest first."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from threadspindle.agents.base.options import ConversationInfo

__all__ = ["list_conversations", "project_slug"]


def project_slug(workdir: str) -> str:
    """Claude Code's folder name for a project: its absolute path, every other char '-'."""
    return re.sub(r"[^A-Za-z0-9]", "-", os.path.realpath(workdir))


def _first_prompt(path: Path, max_lines: int = 200) -> str:
    try:
        with path.open(encoding="utf-8", errors="replace") as f:
            for _, line in zip(range(max_lines), f, strict=False):
                try:
                    entry = json.loads(line)
                except ValueError:
                    continue
                if not isinstance(entry, dict) or entry.get("type") != "user":
                    continue
                if entry.get("isMeta") or entry.get("isSidechain"):
                    continue
                message = entry.get("message")
                content = message.get("content") if isinstance(message, dict) else None
                if isinstance(content, str):
                    texts = [content]
                elif isinstance(content, list):
                    texts = [
                        c.get("text", "")
                        for c in content
                        if isinstance(c, dict) and c.get("type") == "text"
                    ]
                else:
                    continue
                for text in texts:
                    text = text.strip() if isinstance(text, str) else ""
                    if text and not text.startswith("<"):
                        return text.splitlines()[0][:100]
    except OSError:
        return ""
    return ""


def list_conversations(workdir: str, home: str | None = None) -> list[ConversationInfo]:
    """Past Claude Code sessions of ``workdir``, newest first (best effort, never raises)."""
    base = Path(home or os.path.expanduser("~")) / ".claude" / "projects" / project_slug(workdir)
    found: list[ConversationInfo] = []
    try:
        files = list(base.glob("*.jsonl"))
    except OSError:
        return []
    for path in files:
        try:
            mtime = path.stat().st_mtime
        except OSError:
            continue
        title = _first_prompt(path)
        found.append(ConversationInfo(path.stem, title or "(no prompt)", mtime, str(path)))
    found.sort(key=lambda c: c.updated_at, reverse=True)
    return found
