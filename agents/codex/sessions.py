"""Past codex sessions, read from codex's own store: ``<codex home>/sessions/**/rollout-*.jsonl``.

Each rollout file starts with a ``session_meta`` record (thread id, cwd) followed by the
conversation; the first user message that is not codex's own context
(``<environment_context>`` ...) is the title. Best effort: unreadable files are skipped and
nothing here raises.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from threadspindle.agents.base.options import AgentOptions, ConversationInfo
from threadspindle.agents.codex.launch import codex_home

__all__ = ["ConversationInfo", "list_conversations", "sessions_in"]


def _first_user_text(path: Path, max_lines: int = 400) -> tuple[str | None, str | None, str]:
    """(session id, cwd, first user prompt) from a rollout file's first lines."""
    session_id = cwd = None
    title = ""
    with path.open("r", encoding="utf-8", errors="replace") as fh:
        for n, line in enumerate(fh):
            if n >= max_lines:
                break
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if not isinstance(rec, dict):
                continue
            payload = rec.get("payload")
            if not isinstance(payload, dict):
                continue
            if rec.get("type") == "session_meta":
                session_id = payload.get("id") if isinstance(payload.get("id"), str) else None
                cwd = payload.get("cwd") if isinstance(payload.get("cwd"), str) else None
            elif (
                rec.get("type") == "response_item"
                and payload.get("type") == "message"
                and payload.get("role") == "user"
            ):
                content = payload.get("content")
                texts = (
                    [
                        c.get("text", "")
                        for c in content
                        if isinstance(c, dict) and isinstance(c.get("text"), str)
                    ]
                    if isinstance(content, list)
                    else []
                )
                text = "".join(texts).strip()
                if text and not text.startswith("<"):
                    title = text
                    break
    return session_id, cwd, title


def list_conversations(
    workdir: str | None = None, home: str | None = None, limit: int = 25
) -> list[ConversationInfo]:
    """Past codex sessions from ``<codex home>/sessions/**/rollout-*.jsonl``, newest first;
    only those of ``workdir`` when given. ``home`` is a private HOME (as
    ``AgentOptions.home``); None means ``$CODEX_HOME`` or ``~/.codex``. Best effort: never
    raises, unreadable files are left out."""
    return sessions_in(codex_home(AgentOptions(home=home)), workdir, limit)


def sessions_in(codex_dir: Path, workdir: str | None, limit: int = 25) -> list[ConversationInfo]:
    root = codex_dir / "sessions"
    files: list[tuple[float, Path]] = []
    try:
        for path in root.rglob("rollout-*.jsonl"):
            try:
                files.append((path.stat().st_mtime, path))
            except OSError:
                continue
    except OSError:
        return []
    files.sort(key=lambda f: f[0], reverse=True)
    want = os.path.realpath(workdir) if workdir else None
    out: list[ConversationInfo] = []
    for mtime, path in files:
        try:
            session_id, cwd, title = _first_user_text(path)
        except OSError:
            continue
        if session_id is None:
            continue
        if want is not None and (cwd is None or os.path.realpath(cwd) != want):
            continue
        short = title.splitlines()[0] if title else ""
        out.append(ConversationInfo(session_id, short[:100], mtime, str(path), cwd))
        if len(out) >= limit:
            break
    return out
