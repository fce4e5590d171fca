"""The genuine agent CLIs (``.agents``, installed by ``make agents``) pointed at the project's
fake model servers: one ``AgentOptions`` builder per CLI, each with a private HOME.

Each builder writes what the CLI reads from its HOME (Gemini's user settings, opencode's
provider config) and returns options that keep the CLI offline: the model server is the
loopback fake whose base URL is given, and every start-up call to the network is switched
off. The integration tests of each CLI and the adapter contract
(``tests/agents/test_adapter_contract.py``) share them.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from threadspindle.agents.base import AgentOptions

__all__ = [
    "BWRAP",
    "AGENTS_BIN",
    "GEMINI_USER_SETTINGS",
    "OPENCODE_OFFLINE_ENV",
    "claude_options",
    "cli_path",
    "codex_options",
    "gemini_options",
    "opencode_options",
]

ROOT = Path(__file__).resolve().parents[1]
AGENTS_BIN = ROOT / ".agents" / "node_modules" / ".bin"
_INSTALLED = ROOT / ".agents" / ".installed"
# Debian's bubblewrap, unpacked by `make bwrap` (kept off PATH: Codex misbehaves with it there).
BWRAP = ROOT / ".tools" / "bubblewrap" / "usr" / "bin" / "bwrap"

# What a user's ~/.gemini/settings.json needs for an API key and a base URL (without the
# auth type the CLI picks "gateway", which it then refuses), plus nothing phoning home.
GEMINI_USER_SETTINGS: Mapping[str, Any] = {
    "general": {"enableAutoUpdate": False},
    "privacy": {"usageStatisticsEnabled": False},
    "telemetry": {"enabled": False},
    "security": {"auth": {"selectedType": "gemini-api-key"}},
}

OPENCODE_OFFLINE_ENV = (
    ("OPENCODE_DISABLE_AUTOUPDATE", "1"),
    ("OPENCODE_DISABLE_MODELS_FETCH", "1"),
    ("OPENCODE_DISABLE_LSP_DOWNLOAD", "1"),
    ("OPENCODE_DISABLE_SHARE", "1"),
    ("OPENCODE_DISABLE_DEFAULT_PLUGINS", "1"),
    ("OPENCODE_DISABLE_CLAUDE_CODE", "1"),
)


def cli_path(name: str, *, wait_s: float = 0.0) -> Path:
    """The pinned CLI ``name`` (``claude``, ``codex``, ``gemini``, ``opencode``); a clear
    assertion when it is not installed (``wait_s``: a ``make agents`` may still run)."""
    deadline = time.monotonic() + wait_s
    while not _INSTALLED.exists() and time.monotonic() < deadline:
        time.sleep(2)
    path = AGENTS_BIN / name
    assert _INSTALLED.exists() and path.exists(), (
        f"the genuine {name} CLI is missing at {path}: run `make agents` first"
    )
    return path


def claude_options(base_url: str, home: Path, **overrides: Any) -> AgentOptions:
    """Claude Code against ``testkit/fake_model/anthropic.py``; it retries a failed model
    call once (``CLAUDE_CODE_MAX_RETRIES``)."""
    home.mkdir(parents=True, exist_ok=True)
    env = (
        ("ANTHROPIC_BASE_URL", base_url),
        ("ANTHROPIC_API_KEY", "sk-ant-fake-key"),
        ("CLAUDE_CODE_MAX_RETRIES", "1"),
    )
    settings: dict[str, Any] = {"stop_grace_s": 3.0, **overrides}
    return AgentOptions(binary=str(cli_path("claude")), home=str(home), env=env, **settings)


def codex_options(
    base_url: str, home: Path, *, config: tuple[str, ...] = (), **overrides: Any
) -> AgentOptions:
    """Codex against ``testkit/fake_model/openai_responses.py`` (``base_url`` ends in
    ``/v1``), defined as a provider on the command line so no user config is read or
    written; ``config`` adds ``-c key=value`` overrides (e.g. ``approval_policy=...``)."""
    provider = (
        f'{{name="Fake",base_url="{base_url}",wire_api="responses",env_key="FAKE_API_KEY",'
        "request_max_retries=0,stream_max_retries=0}"
    )
    extra: tuple[str, ...] = (
        "-c", "model=gpt-5.5",
        "-c", "model_provider=fake",
        "-c", f"model_providers.fake={provider}",
        # Everything that would reach for the network at start-up stays off.
        "-c", "features.plugins=false",
        "-c", "features.remote_plugin=false",
        "-c", "features.apps=false",
        "-c", "analytics.enabled=false",
        "-c", 'otel.exporter="none"',
    )  # fmt: skip
    for setting in config:
        extra += ("-c", setting)
    settings: dict[str, Any] = {"start_timeout_s": 30.0, "stop_grace_s": 2.0, **overrides}
    return AgentOptions(
        binary=str(cli_path("codex")),
        extra_args=extra,
        env=(("FAKE_API_KEY", "sk-fake"),),
        home=str(home),
        **settings,
    )


def gemini_options(base_url: str, home: Path, **overrides: Any) -> AgentOptions:
    """Gemini CLI against ``testkit/fake_model/gemini.py``, with a user settings file in
    ``home`` (written once: a test may have changed it) that selects API-key auth."""
    settings_file = home / ".gemini" / "settings.json"
    settings_file.parent.mkdir(parents=True, exist_ok=True)
    if not settings_file.exists():
        settings_file.write_text(json.dumps(GEMINI_USER_SETTINGS, indent=2))
    env = (
        ("GOOGLE_GEMINI_BASE_URL", base_url),
        ("GEMINI_API_KEY", "fake-gemini-key"),
        ("TMPDIR", str(home)),  # the CLI writes error reports to the temp dir
    )
    settings: dict[str, Any] = {"stop_grace_s": 3.0, **overrides}
    return AgentOptions(binary=str(cli_path("gemini")), home=str(home), env=env, **settings)


def opencode_options(
    base_url: str, home: Path, *, bash: str | Mapping[str, str] = "allow", **overrides: Any
) -> AgentOptions:
    """opencode against ``testkit/fake_model/openai_chat.py`` (``base_url`` ends in
    ``/v1``): a private HOME whose opencode config names the fake as its only provider.
    ``bash`` is the config's permission for shell commands: an action, or patterns ->
    actions (opencode applies the last pattern that matches)."""
    config = {
        "$schema": "https://opencode.ai/config.json",
        "autoupdate": False,
        "share": "disabled",
        "model": "fake/fake-model",
        "small_model": "fake/fake-model",
        "provider": {
            "fake": {
                "npm": "@ai-sdk/openai-compatible",
                "name": "Fake local",
                "options": {"baseURL": base_url, "apiKey": "sk-fake"},
                "models": {
                    "fake-model": {
                        "name": "Fake Model",
                        "tool_call": True,
                        "limit": {"context": 128000, "output": 4096},
                    }
                },
            }
        },
        "permission": {"bash": bash, "edit": "allow"},
    }
    config_dir = home / ".config" / "opencode"
    config_dir.mkdir(parents=True, exist_ok=True)
    (config_dir / "opencode.json").write_text(json.dumps(config))
    settings: dict[str, Any] = {"start_timeout_s": 60.0, "stop_grace_s": 2.0, **overrides}
    return AgentOptions(
        binary=str(cli_path("opencode", wait_s=600)),
        home=str(home),
        env=OPENCODE_OFFLINE_ENV,
        **settings,
    )
