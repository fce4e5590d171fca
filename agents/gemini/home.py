"""Gemini CLI's files on disk: Spindle's shared store, each thread's own settings home, and the
same-minute ``session/load`` guard.

**Where the CLI looks.** The CLI reads its user settings from
``$GEMINI_CLI_HOME/.gemini/settings.json`` (``GEMINI_CLI_HOME`` falls back to ``$HOME``) and
keeps its runtime state in the same ``.gemini`` directory: the chat files (``tmp/<project>/
chats``), the project registry, the per-project history. The user's ``~/.gemini`` is only
ever read. ``HOME`` itself is left alone, so the tools the agent runs see the user's real
home. (The system settings override, ``GEMINI_CLI_SYSTEM_SETTINGS_PATH``, cannot serve: the
CLI ignores that file unless it and every parent directory are owned by root.)

**A settings home per thread** (``ThreadHome``). The settings hold the thread's MCP servers
with its own bearer token, so they must not be shared: a thread's agent could read another
thread's token (also inside the sandbox, which shows an agent its home). Each adapter gets a
``GEMINI_CLI_HOME`` of its own, a ``PrivateDir`` in the temp dir (0700, removed when the
adapter is done; under the sandbox only its own agent sees it, read-write), whose
``.gemini/settings.json`` (0600) is the user's settings merged with Spindle's overrides:
bounded retries (a dead model server otherwise retries for minutes), no auto-update, and the
thread's MCP servers. Everything else in that ``.gemini`` is a symlink:

- the session store (``SHARED_ENTRIES``: ``tmp`` with the chat files, ``history``) into
  Spindle's **shared store**, ``<home>/.local/state/spindle/gemini-cli/.gemini``, so any
  thread resumes any session and ``/gemini conversations`` lists them all; the CLI finds a
  project's directory there by the ownership marker it keeps in it, so a thread's own
  project registry (``projects.json``, not shared) agrees with every other thread's;
- the user's login and identity, global memory, commands and extensions
  (``LINKED_FROM_USER``) into the user's ``~/.gemini``, so a logged-in user stays logged in.

The shared store holds no secret: a ``settings.json`` an older Spindle left there (with the
last thread's token) is removed.

**Same-minute bug** (``long-lived/REPORT.md`` section 2). A process that ``session/load``s a
session creates a fresh chat file named ``session-<UTC minute>-<id8>.jsonl`` *before* it
reads the old one; in the same UTC minute as the original file that is the same name, and
the old history is wiped. ``avoid_same_minute_collision`` renames such a file one minute
back before the loading process is spawned; the CLI finds sessions by id, not by name.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import re
from pathlib import Path
from typing import Any

from threadspindle.agents.base.launch import PrivateDir
from threadspindle.agents.base.options import AgentOptions

__all__ = [
    "LINKED_FROM_USER",
    "SHARED_ENTRIES",
    "ThreadHome",
    "avoid_same_minute_collision",
    "read_settings_json",
    "shared_gemini_home",
    "spindle_settings",
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
# The CLI's session store, shared by every thread through Spindle's shared store.
SHARED_ENTRIES = ("tmp", "history")
_SESSION_FILE = re.compile(r"^session-(\d{4}-\d{2}-\d{2}T\d{2}-\d{2})-([^.]+)\.jsonl?$")
_MINUTE_FORMAT = "%Y-%m-%dT%H-%M"


def user_home(options: AgentOptions) -> Path:
    return Path(options.home) if options.home else Path(os.path.expanduser("~"))


def shared_gemini_home(options: AgentOptions) -> Path:
    """Spindle's shared store of the CLI's sessions (stable, so sessions persist); a
    ``GEMINI_CLI_HOME`` in form, though no CLI runs with it."""
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


def read_settings_json(path: Path) -> dict[str, Any]:
    """A settings (or registry) file's JSON object; ``{}`` when missing or unreadable."""
    try:
        data = json.loads(strip_json_comments(path.read_text(encoding="utf-8")))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        logger.warning("gemini: cannot read %s (%s); using defaults", path, exc)
        return {}
    return data if isinstance(data, dict) else {}


def prepare_shared_home(options: AgentOptions) -> Path:
    """The shared store, made if missing, with its session directories; returns it."""
    home = shared_gemini_home(options)
    gemini_dir = home / ".gemini"
    gemini_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    for name in SHARED_ENTRIES:
        (gemini_dir / name).mkdir(exist_ok=True, mode=0o700)
    try:  # an older Spindle kept the settings (with a thread's MCP token) here
        (gemini_dir / "settings.json").unlink()
    except FileNotFoundError:
        pass
    return home


class ThreadHome:
    """One thread's ``GEMINI_CLI_HOME`` (see the module docstring). ``path`` is the
    directory to pass; ``remove`` deletes it (the shared store and the user's files stay)."""

    def __init__(self, options: AgentOptions, *, max_attempts: int) -> None:
        self.shared = prepare_shared_home(options)
        self._dir = PrivateDir("spindle-gemini-")
        self.path = Path(self._dir.path)
        gemini_dir = self.path / ".gemini"
        gemini_dir.mkdir(mode=0o700)
        user_dir = user_home(options) / ".gemini"
        merged = _deep_merge(
            read_settings_json(user_dir / "settings.json"),
            spindle_settings(options, max_attempts=max_attempts),
        )
        # 0600 in a 0700 directory: it holds the thread's MCP bearer token.
        self.settings = Path(self._dir.write(".gemini/settings.json", json.dumps(merged, indent=2)))
        links = [(self.shared / ".gemini" / name, gemini_dir / name) for name in SHARED_ENTRIES]
        links += [(user_dir / name, gemini_dir / name) for name in LINKED_FROM_USER]
        for source, link in links:
            if source.exists():
                try:
                    link.symlink_to(source)
                except OSError as exc:
                    logger.warning("gemini: cannot link %s (%s)", source, exc)

    def remove(self) -> None:
        self._dir.remove()


def _chat_files(gemini_home: Path) -> list[Path]:
    try:
        return list((gemini_home / ".gemini" / "tmp").glob("*/chats/session-*.json*"))
    except OSError:
        return []


_MINUTES_BACK = 1440  # a day of names to try


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
        # The first free minute back: one-turn processes resuming the session several
        # times in a minute leave such files behind (the CLI keeps, of the files of one
        # session, the one updated last, whatever its name).
        stamp = dt.datetime.strptime(minute, _MINUTE_FORMAT)
        for back in range(1, _MINUTES_BACK + 1):
            earlier = (stamp - dt.timedelta(minutes=back)).strftime(_MINUTE_FORMAT)
            target = path.with_name(f"session-{earlier}-{id8}{path.suffix}")
            if not target.exists():
                break
        else:
            logger.warning("gemini: no free name to move %s to", path)
            continue
        try:
            path.rename(target)
        except OSError as exc:
            logger.warning("gemini: cannot rename %s (%s)", path, exc)
            continue
        moved.append(target)
    return moved
