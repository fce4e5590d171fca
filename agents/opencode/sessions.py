"""Past opencode sessions (``/opencode conversations``): read-only from opencode's SQLite
database (no server needed), or from a running server's API (``conversations_from``).
Best effort: ``[]`` when there is none or the schema is not the one we know (opencode 1.18).
"""

from __future__ import annotations

import os
import sqlite3
from typing import Any

from threadspindle.agents.base.options import ConversationInfo

__all__ = ["conversations_from", "list_conversations"]


def conversations_from(rows: list[Any]) -> list[ConversationInfo]:
    """Sessions as opencode's API gives them (``GET /session``), newest first."""
    found = []
    for row in rows:
        if not isinstance(row, dict) or not isinstance(row.get("id"), str):
            continue
        raw_times = row.get("time")
        times: dict[str, Any] = raw_times if isinstance(raw_times, dict) else {}
        updated = times.get("updated") or times.get("created") or 0
        title = row.get("title") if isinstance(row.get("title"), str) else ""
        found.append(
            ConversationInfo(
                session_id=row["id"],
                title=title or "(untitled)",
                updated_at=float(updated) / 1000.0 if isinstance(updated, int | float) else 0.0,
                path=str(row.get("directory") or ""),
            )
        )
    found.sort(key=lambda c: c.updated_at, reverse=True)
    return found


def _data_dir(home: str | None) -> str:
    if home:
        return os.path.join(home, ".local", "share", "opencode")
    xdg = os.environ.get("XDG_DATA_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "share"
    )
    return os.path.join(xdg, "opencode")


def list_conversations(
    workdir: str, home: str | None = None, limit: int = 50
) -> list[ConversationInfo]:
    """Past opencode sessions of ``workdir``, newest first, read from opencode's SQLite
    database (read-only, no server needed). Best effort: ``[]`` when there is none or the
    schema is not the one we know (opencode 1.18)."""
    path = os.path.join(_data_dir(home), "opencode.db")
    if not os.path.exists(path):
        return []
    directory = os.path.realpath(workdir)
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=2.0)
    except sqlite3.Error:
        return []
    try:
        db.row_factory = sqlite3.Row
        rows = db.execute(
            "SELECT id, title, directory, time_created, time_updated FROM session "
            "WHERE directory IN (?, ?) AND parent_id IS NULL "
            "ORDER BY time_updated DESC LIMIT ?",
            (directory, workdir, limit),
        ).fetchall()
    except sqlite3.Error:
        return []
    finally:
        db.close()
    return conversations_from(
        [
            {
                "id": r["id"],
                "title": r["title"],
                "directory": r["directory"],
                "time": {"created": r["time_created"], "updated": r["time_updated"]},
            }
            for r in rows
        ]
    )
