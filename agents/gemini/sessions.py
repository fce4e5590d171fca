"""Past Gemini sessions (``/gemini conversations``), read from the chat files in Spindle's
shared store (``home.py``), where every thread's CLI saves them.

``gemini --list-sessions`` asks the model for a summary of each session, so the listing reads
the chat files directly: newest first, best effort, empty when there are none.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path
from typing import Any

from threadspindle.agents.base.options import AgentOptions, ConversationInfo
from threadspindle.agents.gemini.home import read_settings_json, shared_gemini_home

__all__ = ["list_conversations"]


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(p.get("text", "") for p in content if isinstance(p, dict)).strip()
    return ""


def _read_chat(path: Path) -> dict[str, Any] | None:
    """Fold a chat file (JSONL records: metadata, messages, ``$set`` updates; or one JSON
    document in older versions) into ``{sessionId, lastUpdated, summary, messages}``."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    state: dict[str, Any] = {"messages": []}
    records: list[Any] = []
    if path.suffix == ".json":
        try:
            records = [json.loads(text)]
        except ValueError:
            return None
    else:
        for line in text.splitlines():
            try:
                records.append(json.loads(line))
            except ValueError:
                continue
    for record in records:
        if not isinstance(record, dict):
            continue
        if isinstance(record.get("$set"), dict):
            state.update(record["$set"])
        elif "type" in record and "id" in record:
            messages = state.get("messages")
            old = messages if isinstance(messages, list) else []
            kept = [m for m in old if isinstance(m, dict) and m.get("id") != record["id"]]
            state["messages"] = kept + [record]
        else:
            state.update(record)
    if not isinstance(state.get("messages"), list):
        state["messages"] = []
    return state if isinstance(state.get("sessionId"), str) else None


def _project_dirs(gemini_home: Path, workdir: str) -> list[Path]:
    """The CLI's temp dirs for ``workdir`` (``projects.json`` maps a path to a short name)."""
    real = os.path.realpath(workdir)
    base = gemini_home / ".gemini" / "tmp"
    names = read_settings_json(gemini_home / ".gemini" / "projects.json").get("projects")
    dirs: list[Path] = []
    if isinstance(names, dict) and isinstance(names.get(real), str):
        dirs.append(base / names[real])
    try:
        for marker in base.glob("*/.project_root"):
            if marker.read_text(encoding="utf-8").strip() == real and marker.parent not in dirs:
                dirs.append(marker.parent)
    except OSError:
        pass
    return dirs


def _timestamp(value: Any, fallback: float) -> float:
    if isinstance(value, str):
        try:
            return dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        except ValueError:
            pass
    return fallback


def list_conversations(
    workdir: str, home: str | None = None, limit: int = 25
) -> list[ConversationInfo]:
    """Past Gemini sessions of ``workdir`` in Spindle's shared store, newest first, at most
    ``limit`` (best effort, never raises). ``home`` is the user's home (``AgentOptions.home``)."""
    gemini_home = shared_gemini_home(AgentOptions(home=home))
    best: dict[str, ConversationInfo] = {}
    try:
        for project in _project_dirs(gemini_home, workdir):
            for path in project.glob("chats/session-*.json*"):
                chat = _read_chat(path)
                if chat is None:
                    continue
                prompts = [
                    _text_of(m.get("content"))
                    for m in chat["messages"]
                    if isinstance(m, dict) and m.get("type") == "user"
                ]
                prompts = [p for p in prompts if p and not p.startswith("<session_context>")]
                if not prompts:
                    continue  # nothing to resume (the CLI skips these too)
                summary = chat.get("summary")
                title = summary if isinstance(summary, str) and summary else prompts[0]
                mtime = path.stat().st_mtime
                info = ConversationInfo(
                    session_id=chat["sessionId"],
                    title=" ".join(title.split())[:100],
                    updated_at=_timestamp(chat.get("lastUpdated"), mtime),
                    path=str(path),
                )
                known = best.get(info.session_id)
                if known is None or info.updated_at > known.updated_at:
                    best[info.session_id] = info
    except OSError:
        pass
    return sorted(best.values(), key=lambda c: c.updated_at, reverse=True)[:limit]
