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
