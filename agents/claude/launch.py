"""How Claude Code is launched and spoken to (pure: no I/O but reading image attachments,
never through a symlink: ``agents/base/saved_files.py``).

``launch_spec``: ``claude -p --input-format stream-json --output-format stream-json --verbose
--include-partial-messages --permission-prompt-tool stdio`` plus ``--resume <session>``,
``--model``, ``--append-system-prompt`` and ``--mcp-config=<private file>`` (the MCP servers
with their bearer tokens as headers, in a 0600 file of the thread's own ``PrivateDir``: no
user file is touched, no token in ``ps``, and under the sandbox no other agent sees it).

The environment: quiet, offline-friendly defaults (``DEFAULT_ENV``, each overridable by
``options.env``), the CLI's own retry count from ``options.max_retries``, and never the
variables that tell a CLI it runs inside a Claude Code session.

``CONTROL``: Claude Code's control protocol as a ``Framing`` for the shared ``RpcPeer``:
``control_request``s with a ``request_id`` (``initialize``, ``interrupt``, ``set_model``)
and ``control_response``s answering the CLI's own requests. ``prompt_line`` is the one stdin
line of a user prompt.
"""

from __future__ import annotations

import base64
import json
import mimetypes
from collections.abc import Mapping, Sequence
from typing import Any

from threadspindle.agents.base.jsonrpc import RpcId
from threadspindle.agents.base.launch import LaunchSpec, launch_environment
from threadspindle.agents.base.options import AgentOptions
from threadspindle.agents.base.saved_files import read_without_symlinks
from threadspindle.runtime.core.model import Attachment

__all__ = [
    "CONTROL",
    "DEFAULT_BINARY",
    "DEFAULT_ENV",
    "IMAGE_TYPES",
    "MAX_IMAGE_BYTES",
    "NESTED_SESSION_ENV",
    "ClaudeControlFraming",
    "image_blocks",
    "launch_spec",
    "mcp_config",
    "prompt_line",
    "prompt_message",
]

DEFAULT_BINARY = "claude"
# Quiet, offline-friendly defaults; the user's options.env may override each one.
DEFAULT_ENV = {
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_TELEMETRY": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
}
# Set when Spindle itself runs inside a Claude Code session; the child must not think so.
NESTED_SESSION_ENV = ("CLAUDECODE", "CLAUDE_CODE_ENTRYPOINT", "CLAUDE_CODE_SSE_PORT")
IMAGE_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp")  # what the API takes
MAX_IMAGE_BYTES = 5 * 1024 * 1024  # the API's limit per image


def mcp_config(options: AgentOptions) -> dict[str, Any]:
    """Claude Code's ``--mcp-config`` document for the options' MCP servers."""
    servers: dict[str, Any] = {}
    for server in options.mcp_servers:
        entry: dict[str, Any] = {"type": "http", "url": server.url}
        if server.bearer_token:
            entry["headers"] = {"Authorization": f"Bearer {server.bearer_token}"}
        servers[server.name] = entry
    return {"mcpServers": servers}


def launch_spec(
    options: AgentOptions,
    *,
    workdir: str,
    session_id: str | None = None,
    model: str | None = None,
    system_instruction: str | None = None,
    mcp_config_path: str | None = None,
    base_env: Mapping[str, str] | None = None,
    fork: bool = False,
) -> LaunchSpec:
    """argv, environment and cwd of one Claude Code process."""
    argv = [
        options.binary or DEFAULT_BINARY,
        "-p",
        "--input-format",
        "stream-json",
        "--output-format",
        "stream-json",
        "--verbose",
        "--include-partial-messages",
        "--permission-prompt-tool",
        "stdio",
    ]
    if not options.per_turn:
        # Each user line taken into the transcript is echoed back: how a steer (a line
        # written mid-turn) is known to be taken.
        argv.append("--replay-user-messages")
    if session_id:
        argv += ["--resume", session_id]
        if fork:
            argv.append("--fork-session")  # a new session id, continuing a copy
    chosen_model = model or options.model
    if chosen_model:
        argv += ["--model", chosen_model]
    instruction = system_instruction or options.system_instruction
    if instruction:
        argv += ["--append-system-prompt", instruction]
    if mcp_config_path:
        # --mcp-config takes several values: the `=` form keeps it from eating what follows.
        argv.append(f"--mcp-config={mcp_config_path}")
    argv += list(options.extra_args)
    env = launch_environment(
        options,
        defaults=DEFAULT_ENV,
        # The CLI's own retry count (default 10, ~3 minutes of backoff with the API down).
        forced={"CLAUDE_CODE_MAX_RETRIES": str(options.max_retries)},
        withheld=NESTED_SESSION_ENV,
        base=base_env,
    )
    return LaunchSpec.of(options, argv, env, workdir, expose=(mcp_config_path,))


def image_blocks(attachments: Sequence[Attachment]) -> list[dict[str, Any]]:
    """Saved image attachments as base64 image blocks, so the model sees them (best effort:
    an unreadable or too large file, or one reached through a symlink, stays a path in the
    text)."""
    blocks: list[dict[str, Any]] = []
    for attachment in attachments:
        kind = attachment.content_type or mimetypes.guess_type(attachment.name)[0] or ""
        if kind not in IMAGE_TYPES or not attachment.path:
            continue
        # Read by Spindle, outside the sandbox, from a folder the agent writes to: never
        # through a symlink it put in place of the file or a folder above it.
        raw = read_without_symlinks(attachment.path, MAX_IMAGE_BYTES)
        if raw is None:
            continue
        data = base64.b64encode(raw).decode("ascii")
        blocks.append(
            {"type": "image", "source": {"type": "base64", "media_type": kind, "data": data}}
        )
    return blocks


def prompt_message(text: str, attachments: Sequence[Attachment] = ()) -> dict[str, Any]:
    """A user prompt in stream-json input format (one stdin line)."""
    content = [{"type": "text", "text": text}, *image_blocks(attachments)]
    return {"type": "user", "message": {"role": "user", "content": content}}


def prompt_line(text: str, attachments: Sequence[Attachment] = ()) -> str:
    """``prompt_message`` as the line written."""
    return json.dumps(prompt_message(text, attachments), ensure_ascii=False)


class ClaudeControlFraming:
    """Claude Code's control protocol (see the module docstring) as a ``Framing``."""

    def new_id(self, n: int) -> RpcId:
        return f"req_{n}"

    def request(self, rpc_id: RpcId, method: str, params: Mapping[str, Any]) -> dict[str, Any]:
        return {
            "type": "control_request",
            "request_id": rpc_id,
            "request": {"subtype": method, **params},
        }

    def notification(self, method: str, params: Mapping[str, Any] | None) -> dict[str, Any]:
        raise NotImplementedError("Claude Code's control protocol has no notifications")

    def result(self, rpc_id: RpcId, result: Any) -> dict[str, Any]:
        body = {"subtype": "success", "request_id": rpc_id, "response": result or {}}
        return {"type": "control_response", "response": body}

    def error(self, rpc_id: RpcId, code: int, message: str) -> dict[str, Any]:
        body = {"subtype": "error", "request_id": rpc_id, "error": message}
        return {"type": "control_response", "response": body}


CONTROL = ClaudeControlFraming()
