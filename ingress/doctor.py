"""``spindle doctor`` and agent discovery: what is ready, and what to do about the rest.

Each check returns a ``Check`` row (name, ok/warn/fail, what was found, how to fix it).
``detect_agents`` is shared with ``spindle run``, which picks the first genuine CLI that is
installed and logged in as the default agent, and otherwise offers the echo demo.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ingress.config import AGENT_NAMES, Settings, looks_like_discord_token

__all__ = ["AgentFound", "Check", "detect_agents", "pick_default_agent", "run_checks"]

Status = Literal["ok", "warn", "fail"]

# Where each CLI keeps its login, and the environment variables that stand for one.
_LOGIN_FILES = {
    "claude": ("~/.claude/.credentials.json",),
    "codex": ("$CODEX_HOME/auth.json", "~/.codex/auth.json"),
    "gemini": ("~/.gemini/oauth_creds.json",),
    "opencode": ("~/.local/share/opencode/auth.json",),
}
_LOGIN_ENV = {
    "claude": ("ANTHROPIC_API_KEY", "CLAUDE_CODE_OAUTH_TOKEN", "ANTHROPIC_AUTH_TOKEN"),
    "codex": ("OPENAI_API_KEY", "CODEX_API_KEY"),
    "gemini": ("GEMINI_API_KEY", "GOOGLE_API_KEY", "GOOGLE_GENAI_USE_VERTEXAI"),
    "opencode": ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "OPENROUTER_API_KEY", "GEMINI_API_KEY"),
}
_INSTALL = {
    "claude": "npm install -g @anthropic-ai/claude-code, then run `claude` once to log in",
    "codex": "npm install -g @openai/codex, then `codex login` (or set OPENAI_API_KEY)",
    "gemini": "npm install -g @google/gemini-cli, then run `gemini` once to log in "
    "(or set GEMINI_API_KEY)",
    "opencode": "npm install -g opencode-ai, then `opencode auth login`",
}


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    found: str
    fix: str = ""


@dataclass(frozen=True)
class AgentFound:
    name: str
    path: str | None
    version: str | None
    logged_in: bool
    how: str  # which file or variable showed the login

    @property
    def ready(self) -> bool:
        return self.path is not None and self.logged_in


def _binary(settings: Settings, name: str) -> str | None:
    configured = settings.agent(name).binary
    if configured:
        path = os.path.expanduser(configured)
        return path if os.access(path, os.X_OK) else shutil.which(configured)
    return shutil.which(name)


def _version(path: str) -> str | None:
    try:
        out = subprocess.run(
            [path, "--version"],
            capture_output=True,
            text=True,
            timeout=15,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    text = (out.stdout or out.stderr).strip().splitlines()
    return text[0][:80] if text else None


def _login(settings: Settings, name: str) -> tuple[bool, str]:
    extra_env = settings.agent(name).env
    for var in _LOGIN_ENV[name]:
        if extra_env.get(var) or os.environ.get(var):
            return True, f"${var}"
    home = settings.agent(name).home
    for pattern in _LOGIN_FILES[name]:
        if pattern.startswith("$CODEX_HOME"):
            base = os.environ.get("CODEX_HOME")
            if not base:
                continue
            path = Path(base) / pattern.split("/", 1)[1]
        elif home:
            path = Path(home) / pattern.removeprefix("~/")
        else:
            path = Path(os.path.expanduser(pattern))
        if path.is_file():
            return True, str(path)
    return False, "no login found"


def detect_agents(settings: Settings, *, with_version: bool = True) -> list[AgentFound]:
    found = []
    for name in AGENT_NAMES:
        path = _binary(settings, name)
        version = _version(path) if (path and with_version) else None
        logged_in, how = _login(settings, name) if path else (False, "not installed")
        found.append(AgentFound(name, path, version, logged_in, how))
    return found


def pick_default_agent(settings: Settings, agents: list[AgentFound] | None = None) -> str:
    """The configured default, else the first genuine CLI installed and logged in, else
    ``echo`` (the demo)."""
    if settings.runtime.default_agent != "auto":
        return settings.runtime.default_agent
    for agent in agents if agents is not None else detect_agents(settings, with_version=False):
        if agent.ready:
            return agent.name
    return "echo"


def _check_data_dir(settings: Settings) -> Check:
    path = settings.data_path
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / ".doctor-probe"
        probe.write_text("ok")
        probe.unlink()
    except OSError as exc:
        return Check(
            "data directory",
            "fail",
            f"{path}: {exc.strerror}",
            "choose a writable data_dir in the config",
        )
    return Check("data directory", "ok", str(path))


def _check_database(settings: Settings) -> Check:
    db = settings.database_path
    if not db.exists():
        return Check("database", "ok", f"{db} (created on first run)")
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=2)
        try:
            result = conn.execute("PRAGMA quick_check").fetchone()[0]
        finally:
            conn.close()
    except sqlite3.DatabaseError as exc:
        return Check(
            "database",
            "fail",
            f"{db}: {exc}",
            "the file is not a usable SQLite database: move it aside (nothing is "
            "overwritten automatically)",
        )
    if result != "ok":
        return Check(
            "database",
            "fail",
            f"{db}: integrity check says {result}",
            "restore from a backup or move the file aside",
        )
    return Check("database", "ok", f"{db} ({db.stat().st_size // 1024} KiB)")


def _check_discord(settings: Settings) -> list[Check]:
    token = settings.token()
    if token is None:
        return [
            Check(
                "discord token",
                "warn",
                "not set: `spindle run` starts the console chat",
                "set SPINDLE_DISCORD_TOKEN to run the Discord bot (docs/discord-setup.md)",
            )
        ]
    rows = []
    if looks_like_discord_token(token):
        rows.append(Check("discord token", "ok", "set (format looks right)"))
    else:
        rows.append(
            Check(
                "discord token",
                "fail",
                "set, but not shaped like a bot token",
                "copy the token from the Developer Portal's Bot page",
            )
        )
    rows.append(
        Check(
            "discord intents",
            "warn",
            "cannot be read offline",
            "enable the Message Content intent on the Bot page (docs/discord-setup.md)",
        )
    )
    d = settings.discord
    if not (d.allowed_user_ids or d.allowed_role_ids):
        rows.append(
            Check(
                "discord access",
                "warn",
                "no allowed users or roles: nobody can use the bot",
                "set discord.allowed_user_ids or discord.allowed_role_ids",
            )
        )
    else:
        rows.append(
            Check(
                "discord access",
                "ok",
                f"{len(d.allowed_user_ids)} user(s), {len(d.allowed_role_ids)} role(s)",
            )
        )
    return rows


def run_checks(settings: Settings) -> list[Check]:
    rows: list[Check] = []
    for agent in detect_agents(settings):
        label = f"agent {agent.name}"
        if agent.path is None:
            rows.append(Check(label, "warn", "not installed", _INSTALL[agent.name]))
        elif not agent.logged_in:
            rows.append(
                Check(
                    label,
                    "warn",
                    f"{agent.path} ({agent.version or 'version ?'}), not logged in",
                    _INSTALL[agent.name].split(", then ", 1)[-1],
                )
            )
        else:
            rows.append(Check(label, "ok", f"{agent.version or agent.path} · login: {agent.how}"))
    if not any(a.status == "ok" for a in rows):
        rows.append(
            Check(
                "default agent",
                "warn",
                "no genuine agent ready: the echo demo is used",
                "install and log in to one of the CLIs above",
            )
        )
    rows.append(_check_data_dir(settings))
    rows.append(_check_database(settings))
    rows.extend(_check_discord(settings))
    roots = settings.runtime.policy().allowed_roots
    missing = [r for r in roots if not os.path.isdir(r)]
    rows.append(
        Check(
            "workdir roots",
            "fail" if missing else "ok",
            ", ".join(roots),
            f"create or fix: {', '.join(missing)}" if missing else "",
        )
    )
    return rows
