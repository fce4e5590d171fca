"""How a codex process is launched (pure): the ``LaunchSpec`` (argv, environment, config
overrides) and what a prompt becomes (text and image input).

Everything Spindle changes is passed on the command line or in the environment, never
written to a config file: ``-c`` overrides (TOML values) for MCP servers and retries,
``HOME``/``CODEX_HOME`` from ``AgentOptions.home`` for a private config home, MCP bearer
tokens in environment variables named by ``bearer_token_env_var`` (never on an argv).
``--disable unbounded_connection_retries`` is always passed: with it on (codex's default)
a dead model server is retried forever instead of failing the turn.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from threadspindle.agents.base.launch import (
    LaunchSpec,
    launch_environment,
    mcp_token_env,
    prompt_text,
)
from threadspindle.agents.base.options import AgentOptions
from threadspindle.runtime.core.model import Attachment

__all__ = [
    "DEFAULT_BINARY",
    "codex_home",
    "config_override",
    "config_overrides",
    "ensure_codex_home",
    "launch_argv",
    "launch_env",
    "launch_spec",
    "resolve_binary",
    "turn_input",
    "turn_text",
]

DEFAULT_BINARY = "codex"
_PROJECT_BINARY = (
    Path(__file__).resolve().parents[2] / ".agents" / "node_modules" / ".bin" / "codex"
)  # agents/codex/launch.py -> the repository


def _toml_string(value: str) -> str:
    # A JSON string is a valid TOML basic string (same escapes), and -c parses TOML.
    return json.dumps(value)


def _mcp_key(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "_", name) or "mcp"


def config_overrides(options: AgentOptions) -> list[str]:
    """The ``-c``/``--disable`` flags every codex process gets."""
    args = [
        "--disable",
        "unbounded_connection_retries",
        "-c",
        "check_for_update_on_startup=false",
    ]
    for server in options.mcp_servers:
        key = _mcp_key(server.name)
        args += ["-c", f"mcp_servers.{key}.url={_toml_string(server.url)}"]
        if server.bearer_token:
            env_name = _toml_string(mcp_token_env(server.name))
            args += ["-c", f"mcp_servers.{key}.bearer_token_env_var={env_name}"]
    return args


def config_override(options: AgentOptions, key: str) -> str | None:
    """The value of ``-c <key>=<value>`` in ``options.extra_args`` (TOML quotes removed)."""
    args = list(options.extra_args)
    found: str | None = None
    for flag, value in zip(args, args[1:], strict=False):
        if flag in ("-c", "--config") and value.startswith(f"{key}="):
            found = value[len(key) + 1 :].strip().strip("'\"")
    return found


def resolve_binary(options: AgentOptions) -> str:
    if options.binary:
        return options.binary
    found = shutil.which(DEFAULT_BINARY)
    if found:
        return found
    if _PROJECT_BINARY.exists():
        return str(_PROJECT_BINARY)
    return DEFAULT_BINARY


def launch_argv(
    options: AgentOptions,
    *,
    per_turn: bool,
    session_id: str | None = None,
    model: str | None = None,
    system_instruction: str | None = None,
    sandbox: str = "workspace-write",
) -> list[str]:
    """The command line; a per-turn command reads its prompt from stdin (``-``)."""
    binary = resolve_binary(options)
    if not per_turn:
        return [binary, "app-server", *config_overrides(options), *options.extra_args]
    argv = [binary, "exec"]
    if session_id:
        argv.append("resume")
    argv += ["--json", "--skip-git-repo-check", *config_overrides(options)]
    argv += ["-c", f"sandbox_mode={_toml_string(sandbox)}"]
    if model:
        argv += ["-m", model]
    if system_instruction:
        argv += ["-c", f"developer_instructions={_toml_string(system_instruction)}"]
    argv += list(options.extra_args)
    if session_id:
        argv.append(session_id)
    argv.append("-")
    return argv


def codex_home(options: AgentOptions) -> Path:
    if options.home:
        return Path(options.home) / ".codex"
    env = dict(options.env)
    if "CODEX_HOME" in env:
        return Path(env["CODEX_HOME"])
    if os.environ.get("CODEX_HOME"):
        return Path(os.environ["CODEX_HOME"])
    return Path.home() / ".codex"


def ensure_codex_home(options: AgentOptions) -> None:
    """Codex refuses to start when ``CODEX_HOME`` does not exist."""
    codex_home(options).mkdir(parents=True, exist_ok=True)


def launch_env(options: AgentOptions, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment: ``RUST_LOG=warn`` unless set, the user's ``options.env``, a private
    ``HOME``/``CODEX_HOME`` when ``options.home`` is set, and each MCP token in the variable
    its ``bearer_token_env_var`` names."""
    env = launch_environment(options, defaults={"RUST_LOG": "warn"}, base=base)
    if options.home:
        env["HOME"] = options.home  # over options.env too: the private home is the point
        env["CODEX_HOME"] = str(codex_home(options))
    elif "CODEX_HOME" in env:
        env["CODEX_HOME"] = str(codex_home(options))
    for server in options.mcp_servers:
        if server.bearer_token:
            env[mcp_token_env(server.name)] = server.bearer_token
    return env


def launch_spec(
    options: AgentOptions,
    *,
    workdir: str,
    per_turn: bool,
    session_id: str | None = None,
    model: str | None = None,
    system_instruction: str | None = None,
    sandbox: str = "workspace-write",
    base_env: Mapping[str, str] | None = None,
) -> LaunchSpec:
    """``codex app-server`` (or, ``per_turn``, one ``codex exec --json``) in ``workdir``."""
    argv = launch_argv(
        options,
        per_turn=per_turn,
        session_id=session_id,
        model=model,
        system_instruction=system_instruction,
        sandbox=sandbox,
    )
    return LaunchSpec.of(options, argv, launch_env(options, base_env), workdir)


def turn_text(text: str, attachments: Sequence[Attachment] = ()) -> str:
    """The user's text plus what codex can read of the attachments (images go separately)."""
    return prompt_text(text, attachments, images_apart=True)


def turn_input(text: str, attachments: Sequence[Attachment] = ()) -> list[dict[str, Any]]:
    """``turn/start``'s input: the text, and saved images as local image items."""
    items: list[dict[str, Any]] = [
        {"type": "text", "text": turn_text(text, attachments), "text_elements": []}
    ]
    for att in attachments:
        if att.path and (att.content_type or "").startswith("image/"):
            items.append({"type": "localImage", "path": att.path})
    return items
