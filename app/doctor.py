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

from threadspindle.app.config import AGENT_NAMES, Settings, looks_like_discord_token
from threadspindle.effects.child_env import child_environment
from threadspindle.runtime.live.log_read import LogError, LogReader, check_schema, open_read_only

__all__ = ["AgentFound", "Check", "detect_agents", "pick_default_agent", "run_checks"]

Status = Literal["ok", "warn", "fail"]

LOW_DISK_BYTES = 100 * 2**20  # doctor warns below this much free space for the data
# The database only grows (a row per committed delta): past this, doctor names the way to
# move idle threads out of it.
LARGE_DATABASE_BYTES = 2**30
ARCHIVE_HINT = (
    "`spindle log archive --idle-days 30 --vacuum` moves idle threads out of the database "
    "(docs/commands.md)"
)

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


def agent_binary(settings: Settings, name: str) -> str | None:
    """The executable a genuine CLI agent would be started with, or None: not installed."""
    configured = settings.agent(name).binary
    if configured:
        path = os.path.expanduser(configured)
        return path if os.access(path, os.X_OK) else shutil.which(configured)
    return shutil.which(name)


def _version(path: str) -> str | None:
    try:
        out = subprocess.run(
            [path, "--version"],
            env=child_environment(),
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
        path = agent_binary(settings, name)
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
    """The file opens, SQLite finds it sound, it is a Spindle log, and every row reads: first
    what ``spindle run`` reads at start-up (it refuses the file otherwise), then every row
    of every thread (what ``spindle log export`` and replay need)."""
    db = settings.database_path
    if not db.exists():
        if not db.parent.is_dir():  # the data directory could not be made (see its row)
            return Check("database", "warn", f"{db}: not there, and its folder is unusable")
        return Check("database", "ok", f"{db} (created on first run)")
    move_aside = (
        "restore it from a backup, or move it aside to start afresh (nothing is "
        "overwritten automatically)"
    )
    try:
        conn = open_read_only(db, check=False)
        try:
            result = conn.execute("PRAGMA quick_check").fetchone()[0]
            if result != "ok":
                return Check("database", "fail", f"{db}: integrity check says {result}", move_aside)
            check_schema(conn, db)
            reader = LogReader(conn, db)
            try:
                _read_like_start_up(reader)
            except LogError as exc:
                return Check("database", "fail", f"`spindle run` refuses it: {exc}", move_aside)
            problems, count = reader.problems()
            threads = len(reader.last_seqs())
        finally:
            conn.close()
    except (sqlite3.DatabaseError, LogError) as exc:
        return Check(
            "database",
            "fail",
            f"{db}: {exc}",
            "the file is not a usable Spindle log: " + move_aside,
        )
    if problems:
        shown = "; ".join(str(p).removeprefix(f"event log {db}: ") for p in problems[:3])
        more = f" (and {count - 3} more)" if count > 3 else ""
        return Check(
            "database",
            "fail",
            f"{db}: {count} row problem(s) below a snapshot: {shown}{more}",
            "`spindle run` still starts (the threads' snapshots cover them) but `spindle "
            "log export` and replay of those threads fail: " + move_aside,
        )
    size = db.stat().st_size
    found = f"{db} ({size // 1024} KiB, {threads} thread(s), every row reads)"
    if size >= LARGE_DATABASE_BYTES:
        return Check("database", "warn", found, f"it only grows: {ARCHIVE_HINT}")
    return Check("database", "ok", found)


def _read_like_start_up(reader: LogReader) -> None:
    """Read what ``spindle run`` reads at start-up, with the same checks (``LogCorrupt``)."""
    snapshots = reader.snapshots()
    for thread_id in reader.thread_ids():
        after = snapshots[thread_id][0] if thread_id in snapshots else 0
        for _ in reader.actions(thread_id, after):
            pass
    reader.check_posted_outputs()


def _check_disk_space(settings: Settings) -> Check:
    """Free space where the data lives: Spindle stops taking prompts when it runs out."""
    if not settings.data_path.is_dir():
        # A data directory that could not be made (under /proc, under a file): the space
        # of whatever parent exists says nothing, and advice to free some would mislead.
        return Check("disk space", "warn", f"not checked: {settings.data_path} is no folder")
    path = settings.database_path.parent
    while not path.exists() and path != path.parent:
        path = path.parent
    try:
        free = shutil.disk_usage(path).free
    except OSError as exc:
        return Check("disk space", "warn", f"{path}: {exc.strerror or exc}")
    found = f"{free / 2**20:,.0f} MiB free on {path}"
    if free < LOW_DISK_BYTES:
        return Check(
            "disk space",
            "warn",
            found,
            "free some space (" + ARCHIVE_HINT + "): when the disk is full Spindle refuses "
            "new prompts until it can save again",
        )
    return Check("disk space", "ok", found)


def _check_discord(settings: Settings) -> list[Check]:
    token = settings.token()
    if token is None:
        others = (
            settings.telegram_bot_token() is not None
            or settings.whatsapp_configured()
            or any(settings.slack_tokens())
        )
        return [
            Check(
                "discord token",
                "warn",
                "not set: Discord is not served"
                if others
                else "not set: `spindle run` starts the console chat",
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


def _check_telegram(settings: Settings, timeout_s: float = 5.0) -> list[Check]:
    """Telegram only when it has a token: its shape, then ``getMe`` at the configured
    ``base_url`` (is the Bot API reachable, and does it accept the token?)."""
    token = settings.telegram_bot_token()
    if token is None:
        return []
    import httpx  # only here: doctor without Telegram never needs it

    base = settings.telegram.base_url
    try:
        response = httpx.get(f"{base}{token}/getMe", timeout=timeout_s)
        body = response.json() if response.content else {}
    except (httpx.HTTPError, ValueError) as exc:
        reason = type(exc).__name__ if not str(exc) else str(exc).replace(token, "<token>")
        rows = [
            Check(
                "telegram api",
                "fail",
                f"{base} unreachable: {reason}",
                "check telegram.base_url and the network",
            )
        ]
    else:
        if response.status_code == 200 and isinstance(body, dict) and body.get("ok"):
            result = body.get("result") or {}
            name = result.get("username", "?") if isinstance(result, dict) else "?"
            rows = [Check("telegram api", "ok", f"@{name} at {base}")]
        elif response.status_code in (401, 404):
            rows = [
                Check(
                    "telegram api",
                    "fail",
                    f"the token was refused ({response.status_code})",
                    "copy the token @BotFather gave again (docs/telegram-setup.md)",
                )
            ]
        else:
            rows = [
                Check(
                    "telegram api",
                    "warn",
                    f"getMe answered {response.status_code}",
                    "try again later; check telegram.base_url",
                )
            ]
    t = settings.telegram
    if not t.allowed_user_ids:
        rows.append(
            Check(
                "telegram access",
                "warn",
                "no allowed users: nobody can use the bot",
                "set telegram.allowed_user_ids",
            )
        )
    else:
        rows.append(
            Check(
                "telegram access",
                "ok",
                f"{len(t.allowed_user_ids)} user(s), {len(t.allowed_chat_ids)} group(s), "
                f"{len(t.project_groups)} project group(s)",
            )
        )
    return rows


def _check_slack(settings: Settings, timeout_s: float = 5.0) -> list[Check]:
    """Slack only when it has a token: both tokens there, then ``auth.test`` with the bot
    token at the configured ``base_url`` (is the Web API reachable, does it accept it?)."""
    bot_token, app_token = settings.slack_tokens()
    if bot_token is None and app_token is None:
        return []
    if bot_token is None or app_token is None:
        missing = (
            "SPINDLE_SLACK_BOT_TOKEN (xoxb-)"
            if bot_token is None
            else ("SPINDLE_SLACK_APP_TOKEN (xapp-)")
        )
        return [Check("slack api", "fail", f"{missing} is not set", "docs/slack-setup.md")]
    import httpx  # only here: doctor without Slack never needs it

    base = settings.slack.base_url
    url = base.rstrip("/") + "/auth.test"
    try:
        response = httpx.post(
            url, headers={"Authorization": f"Bearer {bot_token}"}, timeout=timeout_s
        )
        body = response.json() if response.content else {}
    except (httpx.HTTPError, ValueError) as exc:
        reason = type(exc).__name__ if not str(exc) else str(exc)
        for token in (bot_token, app_token):
            reason = reason.replace(token, "<token>")
        rows = [
            Check(
                "slack api",
                "fail",
                f"{base} unreachable: {reason}",
                "check slack.base_url and the network",
            )
        ]
    else:
        ok = response.status_code == 200 and isinstance(body, dict) and body.get("ok")
        error = body.get("error") if isinstance(body, dict) else None
        if ok:
            rows = [
                Check(
                    "slack api",
                    "ok",
                    f"{body.get('user', '?')} in {body.get('team', '?')} at {base}",
                )
            ]
        elif error in ("invalid_auth", "not_authed", "account_inactive", "token_revoked"):
            rows = [
                Check(
                    "slack api",
                    "fail",
                    f"the bot token was refused ({error})",
                    "copy the Bot User OAuth Token again (docs/slack-setup.md)",
                )
            ]
        else:
            rows = [
                Check(
                    "slack api",
                    "warn",
                    f"auth.test answered {response.status_code} {error or ''}".rstrip(),
                    "try again later; check slack.base_url",
                )
            ]
    s = settings.slack
    if not s.allowed_user_ids:
        rows.append(
            Check(
                "slack access",
                "warn",
                "no allowed users: nobody can use the app",
                "set slack.allowed_user_ids",
            )
        )
    else:
        rows.append(
            Check(
                "slack access",
                "ok",
                f"{len(s.allowed_user_ids)} user(s), {len(s.allowed_channel_ids)} channel(s), "
                f"{len(s.project_channels)} project channel(s)",
            )
        )
    return rows


def _check_web(settings: Settings) -> list[Check]:
    """The web chat, when it is switched on in the config: where it listens, and whether
    that port can be had now (taken: another Spindle, or another program)."""
    import socket

    from threadspindle.ingress.web.settings import is_loopback

    web = settings.web
    if not web.enabled:
        return []
    rows: list[Check] = []
    if not is_loopback(web.host):
        rows.append(
            Check(
                "web chat host",
                "warn",
                f"{web.host}: reachable from the network over plain HTTP",
                'keep web.host = "127.0.0.1" unless a TLS proxy stands in front (docs/web.md)',
            )
        )
    family = socket.AF_INET6 if ":" in web.host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((web.host, web.port))
        except OSError as exc:
            rows.append(
                Check(
                    "web chat",
                    "warn",
                    f"{web.host}:{web.port} cannot be listened on: {exc.strerror or exc}",
                    "stop what uses it (a running Spindle?) or set web.port (0: any free)",
                )
            )
            return rows
    rows.append(Check("web chat", "ok", f"http://{web.host}:{web.port} (spindle run serves it)"))
    return rows


def _check_whatsapp(settings: Settings, timeout_s: float = 5.0) -> list[Check]:
    """WhatsApp only when it has a token: the other credentials, then the phone number at
    the configured ``base_url`` (is the Graph API reachable, and does it take the token?)."""
    secrets = settings.whatsapp_secrets()
    token = secrets["token"]
    if not token:
        return []
    import httpx  # only here: doctor without WhatsApp never needs it

    w = settings.whatsapp
    missing = [n for n in ("app_secret", "verify_token") if not secrets[n]]
    if not w.phone_number_id:
        missing.append("phone_number_id")
    rows: list[Check] = []
    if missing:
        rows.append(
            Check(
                "whatsapp config",
                "fail",
                "missing: " + ", ".join(missing),
                "see docs/whatsapp-setup.md (secrets as SPINDLE_WHATSAPP_*)",
            )
        )
        return rows
    base = w.base_url.rstrip("/")
    url = f"{base}/{w.phone_number_id}"
    try:
        response = httpx.get(
            url,
            params={"fields": "display_phone_number,verified_name"},
            headers={"Authorization": f"Bearer {token}"},
            timeout=timeout_s,
        )
        body = response.json() if response.content else {}
    except (httpx.HTTPError, ValueError) as exc:
        reason = type(exc).__name__ if not str(exc) else str(exc).replace(token, "<token>")
        rows.append(
            Check(
                "whatsapp api",
                "fail",
                f"{base} unreachable: {reason}",
                "check whatsapp.base_url and the network",
            )
        )
    else:
        if response.status_code == 200 and isinstance(body, dict):
            number = body.get("display_phone_number", "?")
            rows.append(Check("whatsapp api", "ok", f"{number} ({w.phone_number_id}) at {base}"))
        elif response.status_code in (400, 401, 403):
            rows.append(
                Check(
                    "whatsapp api",
                    "fail",
                    f"the token or phone number id was refused ({response.status_code})",
                    "copy the access token and phone number id again (docs/whatsapp-setup.md)",
                )
            )
        else:
            rows.append(
                Check(
                    "whatsapp api",
                    "warn",
                    f"the phone number lookup answered {response.status_code}",
                    "try again later; check whatsapp.base_url",
                )
            )
    if not w.allowed_wa_ids:
        rows.append(
            Check(
                "whatsapp access",
                "warn",
                "no allowed numbers: nobody can use Spindle on WhatsApp",
                "set whatsapp.allowed_wa_ids",
            )
        )
    else:
        rows.append(
            Check(
                "whatsapp access",
                "ok",
                f"{len(w.allowed_wa_ids)} number(s), {len(w.allowed_group_ids)} group(s); "
                f"webhook on {w.webhook_host}:{w.webhook_port}{w.webhook_path}",
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
    rows.append(_check_disk_space(settings))
    rows.extend(_check_discord(settings))
    rows.extend(_check_telegram(settings))
    rows.extend(_check_web(settings))
    rows.extend(_check_whatsapp(settings))
    rows.extend(_check_slack(settings))
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
