"""Gemini CLI's files on disk: the private settings home, the same-minute ``session/load``
guard, and the past-conversations listing.

**Private home.** The CLI reads its user settings from ``$GEMINI_CLI_HOME/.gemini/settings.json``
(``GEMINI_CLI_HOME`` falls back to ``$HOME``). Spindle points ``GEMINI_CLI_HOME`` at a
directory of its own (``<home>/.local/state/spindle/gemini-cli``) whose ``settings.json`` is
the user's own settings merged with Spindle's overrides: bounded retries (a dead model
server otherwise retries for minutes), no auto-update, and the MCP servers to hand to the
agent. The user's ``~/.gemini/settings.json`` is only ever read. Credential files (and the
global memory, commands, extensions) are symlinked from the user's ``~/.gemini`` so a
logged-in user stays logged in. ``HOME`` itself
is left alone, so the tools the agent runs see the user's real home. (The system settings
override, ``GEMINI_CLI_SYSTEM_SETTINGS_PATH``, cannot serve: the CLI ignores that file unless
it and every parent directory are owned by root.)

**Same-minute bug** (``long-lived/REPORT.md`` section 2). A process that ``session/load``s a
session creates a fresh chat file named ``session-<UTC minute>-<id8>.jsonl`` *before* it
reads the old one; in the same UTC minute as the original file that is the same name, and
the old history is wiped. ``avoid_same_minute_collision`` renames such a file one minute
back before the loading process is spawned; the CLI finds sessions by id, not by name.

**Listing.** ``gemini --list-sessions`` asks the model for a summary of each session, so the
listing reads the chat files directly: newest first, best effort, empty when there are none.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import re
from pathlib import Path
from typing import Any

from threadspindle.agents.base import AgentOptions, ConversationInfo

__all__ = [
    "ConversationInfo",
    "LINKED_FROM_USER",
    "avoid_same_minute_collision",
    "list_conversations",
    "private_gemini_home",
    "spindle_settings",
    "write_private_settings",
]

logger = logging.getLogger(__name__)

# What of the user's ~/.gemini the agent should still see: the login and identity, the
# global memory and env, custom commands and extensions. Linked, never copied or written.
LINKED_FROM_USER = (
    "oauth_creds.json",
    "google_accounts.json",
    "installation_id",
    "user_id",
    "mcp-oauth-tokens.json",
    "GEMINI.md",
    ".env",
    "commands",
    "extensions",
)
_SESSION_FILE = re.compile(r"^session-(\d{4}-\d{2}-\d{2}T\d{2}-\d{2})-([^.]+)\.jsonl?$")
_MINUTE_FORMAT = "%Y-%m-%dT%H-%M"


def user_home(options: AgentOptions) -> Path:
    return Path(options.home) if options.home else Path(os.path.expanduser("~"))


def private_gemini_home(options: AgentOptions) -> Path:
    """The ``GEMINI_CLI_HOME`` Spindle runs the CLI with (stable, so sessions persist)."""
    return user_home(options) / ".local" / "state" / "spindle" / "gemini-cli"


def spindle_settings(options: AgentOptions, *, max_attempts: int) -> dict[str, Any]:
    """What Spindle sets on top of the user's settings."""
    servers: dict[str, Any] = {}
    for server in options.mcp_servers:
        entry: dict[str, Any] = {"httpUrl": server.url, "trust": True}
        if server.bearer_token:
            entry["headers"] = {"Authorization": f"Bearer {server.bearer_token}"}
        servers[server.name] = entry
    settings: dict[str, Any] = {
        "general": {
            # The CLI retries a failed model call up to 10 times with 5-30 s backoff, and
            # "fetch failed" (nothing listening) counts as retryable: minutes of silence.
            "maxAttempts": max_attempts,
            "retryFetchErrors": False,
            "enableAutoUpdate": False,
            "enableAutoUpdateNotification": False,
        },
    }
    if servers:
        settings["mcpServers"] = servers
    return settings


def _deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def strip_json_comments(text: str) -> str:
    """Drop ``//`` and ``/* */`` comments outside strings: the CLI reads settings.json
    through strip-json-comments, so a user's file may have them."""
    out: list[str] = []
    i, n = 0, len(text)
    in_string = False
    while i < n:
        ch = text[i]
        if in_string:
            out.append(ch)
            if ch == "\\" and i + 1 < n:
                out.append(text[i + 1])
                i += 1
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
            out.append(ch)
        elif text.startswith("//", i):
            end = text.find("\n", i)
            i = n if end < 0 else end
            continue
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            i = n if end < 0 else end + 2
            continue
        else:
            out.append(ch)
        i += 1
    return "".join(out)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(strip_json_comments(path.read_text(encoding="utf-8")))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        logger.warning("gemini: cannot read %s (%s); using defaults", path, exc)
        return {}
    return data if isinstance(data, dict) else {}


def write_private_settings(options: AgentOptions, *, max_attempts: int) -> Path:
    """Create/refresh the private home; returns it. Never writes under the user's ~/.gemini."""
    home = private_gemini_home(options)
    gemini_dir = home / ".gemini"
    gemini_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    user_dir = user_home(options) / ".gemini"
    merged = _deep_merge(
        _read_json(user_dir / "settings.json"), spindle_settings(options, max_attempts=max_attempts)
    )
    target = gemini_dir / "settings.json"
    # Per-process temp name, then an atomic replace: threads starting together never see a
    # half-written file (they all write the same content: options are per agent kind).
    temp = gemini_dir / f".settings.{os.getpid()}.{id(options)}.tmp"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # may hold a bearer token
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(merged, f, indent=2)
    os.replace(temp, target)
    for name in LINKED_FROM_USER:
        source, link = user_dir / name, gemini_dir / name
        if source.exists() and not link.exists() and not link.is_symlink():
            try:
                link.symlink_to(source)
            except OSError as exc:
                logger.warning("gemini: cannot link %s (%s)", source, exc)
    return home


def _chat_files(gemini_home: Path) -> list[Path]:
    try:
        return list((gemini_home / ".gemini" / "tmp").glob("*/chats/session-*.json*"))
    except OSError:
        return []


def avoid_same_minute_collision(
    gemini_home: Path, session_id: str, now: dt.datetime | None = None
) -> list[Path]:
    """Rename ``session_id``'s chat files stamped with the current UTC minute one minute
    back, so a process loading it now cannot create (and wipe) a file of the same name.
    Returns the new paths. ``now`` is for tests."""
    now = now or dt.datetime.now(dt.UTC)
    minute = now.strftime(_MINUTE_FORMAT)
    id8 = session_id[:8]
    moved: list[Path] = []
    for path in _chat_files(gemini_home):
        match = _SESSION_FILE.match(path.name)
        if match is None or match.group(1) != minute or match.group(2) != id8:
            continue
        stamp = dt.datetime.strptime(minute, _MINUTE_FORMAT) - dt.timedelta(minutes=1)
        target = path.with_name(f"session-{stamp.strftime(_MINUTE_FORMAT)}-{id8}{path.suffix}")
        if target.exists():
            continue
        try:
            path.rename(target)
        except OSError as exc:
            logger.warning("gemini: cannot rename %s (%s)", path, exc)
            continue
        moved.append(target)
    return moved


# --- past conversations --------------------------------------------------------------------


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
    names = _read_json(gemini_home / ".gemini" / "projects.json").get("projects")
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
    """Past Gemini sessions of ``workdir`` in Spindle's private home, newest first, at most
    ``limit`` (best effort, never raises). ``home`` is the user's home (``AgentOptions.home``)."""
    gemini_home = private_gemini_home(AgentOptions(home=home))
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
