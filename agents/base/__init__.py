"""What every agent adapter is built on, in one place.

| module | job |
|---|---|
| ``options.py`` | ``AgentOptions`` (``[agents.<name>]``), ``McpServer``, ``ConversationInfo`` |
| ``adapter.py`` | ``AgentAdapter`` (the runtime's agent port), ``AgentStartError`` |
| ``launch.py`` | ``LaunchSpec``, the environment, the prompt text, ``PrivateDir`` |
| ``process.py`` | ``spawn_agent``: the CLI under the guard (and the sandbox) |
| ``parsing.py`` | ``ParsedLine`` (every parser's output), ``ParserStats``, ``AgentStatistics`` |
| ``fields.py`` | JSON field checkers, ``MalformedInput`` |
| ``jsonrpc.py`` | ``RpcPeer``: requests, answers and waiting for responses, any framing |
| ``session_router.py`` | ``SessionRouter``: one shared connection fanned out by session |
"""

from __future__ import annotations

from threadspindle.agents.base.adapter import AgentAdapter, AgentStartError
from threadspindle.agents.base.launch import (
    LaunchSpec,
    PrivateDir,
    agent_environment,
    launch_environment,
    mcp_token_env,
    prompt_text,
)
from threadspindle.agents.base.options import AgentOptions, ConversationInfo, McpServer
from threadspindle.agents.base.parsing import (
    AgentStatistics,
    ParsedLine,
    ParserStats,
    clean_tool_name,
)
from threadspindle.agents.base.process import spawn_agent
from threadspindle.runtime.live.ports import EmitEvent, StampedEvent

__all__ = [
    "AgentAdapter",
    "AgentOptions",
    "AgentStartError",
    "AgentStatistics",
    "ConversationInfo",
    "EmitEvent",
    "LaunchSpec",
    "McpServer",
    "ParsedLine",
    "ParserStats",
    "PrivateDir",
    "StampedEvent",
    "agent_environment",
    "clean_tool_name",
    "launch_environment",
    "mcp_token_env",
    "prompt_text",
    "spawn_agent",
]


# --- transitional: the adapters not yet moved to the shared base (removed once they are) ----
from collections.abc import Sequence as _Sequence  # noqa: E402

from threadspindle.effects.process import ManagedProcess as _ManagedProcess  # noqa: E402
from threadspindle.runtime.core.model import Attachment as _Attachment  # noqa: E402


def prompt_with_attachments(
    text: str, attachments: _Sequence[_Attachment] = (), *, images_apart: bool = False
) -> str:
    return prompt_text(text, attachments, images_apart=images_apart)


async def spawn_agent_argv(
    options: AgentOptions,
    argv: _Sequence[str],
    *,
    env: dict[str, str] | None,
    cwd: str,
    stdin: bool = True,
    expose: _Sequence[str | None] = (),
) -> _ManagedProcess:
    return await spawn_agent(
        LaunchSpec.of(options, argv, env if env is not None else {}, cwd, expose=expose),
        stdin=stdin,
    )
