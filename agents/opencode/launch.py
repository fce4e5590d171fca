"""How opencode is launched and prompted (pure: no I/O, no clock): the environment, the
``opencode serve`` spec (a ``LaunchSpec`` inside the pool's ``ServerSpec``), the per-thread MCP
registrations and session permission rules, the ``opencode run`` spec of the per-turn
fall-back, and the ``prompt_async`` body.

Invariants: the child never inherits an ``OPENCODE_SERVER_PASSWORD`` of ours (the server gets
its own); MCP tokens never go on a command line, nor in the ``serve`` spec (its tenant names
the registrations by a hash of url and token), and threads with different MCP tokens never
share a server.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from threadspindle.agents.base.launch import LaunchSpec, launch_environment, prompt_text
from threadspindle.agents.base.options import AgentOptions
from threadspindle.agents.opencode.server import ServerSpec
from threadspindle.runtime.core.effect_types import PromptAgent

__all__ = [
    "ASK_PERMISSIONS",
    "DEFAULT_BINARY",
    "DEFAULT_ENV",
    "McpRegistration",
    "launch_env",
    "mcp_registrations",
    "model_ref",
    "private_config",
    "prompt_body",
    "run_argv",
    "run_spec",
    "serve_spec",
    "session_rules",
]

DEFAULT_BINARY = "opencode"
# Quiet defaults for a bot; options.env may override each one.
DEFAULT_ENV = {"OPENCODE_DISABLE_AUTOUPDATE": "1", "OPENCODE_DISABLE_SHARE": "1"}
# Tool permissions that ``permission="ask"`` routes to the thread (session ruleset).
ASK_PERMISSIONS = ("bash", "edit", "webfetch", "external_directory")


def launch_env(options: AgentOptions, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The child's environment: the caller's, a private HOME/XDG tree when ``options.home``
    is set, the quiet defaults, then ``options.env``; never a server password of ours."""
    forced = dict(DEFAULT_ENV)
    if options.home:
        home = options.home
        forced.update(
            XDG_CONFIG_HOME=os.path.join(home, ".config"),
            XDG_DATA_HOME=os.path.join(home, ".local", "share"),
            XDG_CACHE_HOME=os.path.join(home, ".cache"),
            XDG_STATE_HOME=os.path.join(home, ".local", "state"),
        )
    # A password inherited from our own environment must not leak into the child.
    return launch_environment(
        options, forced=forced, withheld=("OPENCODE_SERVER_PASSWORD",), base=base
    )


def private_config(options: AgentOptions) -> dict[str, Any]:
    """What goes into the private ``OPENCODE_CONFIG`` file: the MCP servers (remote, with
    their bearer token as a header). Empty when there is nothing to inject."""
    if not options.mcp_servers:
        return {}
    mcp: dict[str, Any] = {}
    for server in options.mcp_servers:
        entry: dict[str, Any] = {"type": "remote", "url": server.url, "enabled": True}
        if server.bearer_token:
            entry["headers"] = {"Authorization": f"Bearer {server.bearer_token}"}
        mcp[server.name] = entry
    return {"$schema": "https://opencode.ai/config.json", "mcp": mcp}


def serve_spec(
    options: AgentOptions, workdir: str, base_env: Mapping[str, str] | None = None
) -> ServerSpec:
    """``opencode serve`` on a free loopback port, in ``workdir``, for the threads whose MCP
    registrations are these options' (its tenant). An agent reaches its whole server (the
    server's password is in its environment: it could use, or turn its session's rules to,
    any tool registered there), so threads with different MCP tokens never share a server;
    threads with none, or the same, do."""
    binary = options.binary or DEFAULT_BINARY
    argv = (binary, "serve", "--hostname", "127.0.0.1", "--port", "0", *options.extra_args)
    tenant = tuple(sorted(reg.name for reg in mcp_registrations(options)))
    launch = LaunchSpec.of(options, argv, launch_env(options, base_env), workdir)
    return ServerSpec(launch, tenant=tenant)


@dataclass(frozen=True)
class McpRegistration:
    """One thread's MCP server on a shared opencode server: registered as ``name`` (the
    configured name plus a tag derived from its URL and token); its tools are then named
    ``<name>_<tool>``."""

    base: str
    name: str
    config: dict[str, Any]


def mcp_registrations(options: AgentOptions) -> list[McpRegistration]:
    found = []
    for server in options.mcp_servers:
        digest = hashlib.sha256(f"{server.url}\0{server.bearer_token or ''}".encode())
        config: dict[str, Any] = {"type": "remote", "url": server.url, "enabled": True}
        if server.bearer_token:
            config["headers"] = {"Authorization": f"Bearer {server.bearer_token}"}
        name = f"{server.name}-{digest.hexdigest()[:10]}"
        found.append(McpRegistration(base=server.name, name=name, config=config))
    return found


def session_rules(permission: str | None, mcp: list[McpRegistration]) -> list[dict[str, str]]:
    """A session's own permission ruleset (the last matching rule wins): ask before the
    risky tools when ``permission == "ask"``; of the MCP servers registered by threads on
    the same opencode server, only this thread's tools."""
    rules = []
    if permission == "ask":
        rules += [{"permission": p, "pattern": "*", "action": "ask"} for p in ASK_PERMISSIONS]
    for reg in mcp:
        rules.append({"permission": f"{reg.base}-*", "pattern": "*", "action": "deny"})
        rules.append({"permission": f"{reg.name}_*", "pattern": "*", "action": "allow"})
    return rules


def run_argv(
    options: AgentOptions, text: str, session_id: str | None, model: str | None
) -> list[str]:
    """``opencode run --format json`` for one turn (per-turn fall-back)."""
    argv = [options.binary or DEFAULT_BINARY, "run", "--format", "json"]
    if session_id:
        argv += ["-s", session_id]
    if model:
        argv += ["-m", model]
    argv += list(options.extra_args)
    argv += ["--", text]
    return argv


def run_spec(
    options: AgentOptions,
    text: str,
    *,
    workdir: str,
    session_id: str | None,
    model: str | None,
    env: Mapping[str, str],
) -> LaunchSpec:
    """One ``opencode run`` turn in ``workdir``; ``env`` from ``launch_env`` (with the
    private config's ``OPENCODE_CONFIG``, which the sandbox then shows it)."""
    argv = run_argv(options, text, session_id, model)
    return LaunchSpec.of(options, argv, env, workdir, expose=(env.get("OPENCODE_CONFIG"),))


def model_ref(model: str | None) -> dict[str, str] | None:
    """``{"providerID", "modelID"}`` of a ``provider/model`` name (None without one)."""
    if not model or "/" not in model:
        return None
    provider, _, model_id = model.partition("/")
    return {"providerID": provider, "modelID": model_id}


def prompt_body(prompt: PromptAgent, default_model: str | None = None) -> dict[str, Any]:
    """The ``prompt_async`` body: text parts, and the model/system instruction if any."""
    body: dict[str, Any] = {
        "parts": [{"type": "text", "text": prompt_text(prompt.text, prompt.attachments)}]
    }
    model = model_ref(prompt.model or default_model)
    if model is not None:
        body["model"] = model
    if prompt.system_instruction:
        body["system"] = prompt.system_instruction
    return body
