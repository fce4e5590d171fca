"""What an adapter is configured with (``AgentOptions``, one per agent kind, from the config
file's ``[agents.<name>]``), the MCP servers it hands its CLI, and what a CLI's session store
says about a past conversation (``ConversationInfo``).
"""

from __future__ import annotations

from dataclasses import dataclass

from threadspindle.effects.sandbox import Sandbox
from threadspindle.runtime.core.frozen import Frozen

__all__ = ["AgentOptions", "ConversationInfo", "McpServer"]


class McpServer(Frozen):
    """An MCP server (streamable HTTP) to hand to the agent through its own config."""

    name: str
    url: str
    bearer_token: str | None = None


class AgentOptions(Frozen):
    """Configuration of one agent kind (from the config file's ``[agents.<name>]``)."""

    binary: str | None = None  # path or name on PATH; None: the adapter's default
    extra_args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()  # added to the process environment
    home: str | None = None  # a private HOME/config dir; None: the user's own
    model: str | None = None
    system_instruction: str | None = None
    mcp_servers: tuple[McpServer, ...] = ()
    per_turn: bool = False  # fall back to one process per turn
    # How often the CLI retries a failed model call before the turn fails (each adapter
    # applies it the CLI's own way: docs/agents.md, "Retries").
    max_retries: int = 2
    start_timeout_s: float = 60.0
    stop_grace_s: float = 3.0
    sandbox: Sandbox | None = None  # run the CLI under bubblewrap (effects/sandbox.py)


@dataclass(frozen=True, slots=True)
class ConversationInfo:
    """One past session of an agent CLI, from the CLI's own store (``/<agent>
    conversations``)."""

    session_id: str
    title: str  # the session's summary or first prompt, shortened
    updated_at: float  # POSIX time of the last update
    path: str  # where the CLI keeps it (a file, or a directory)
    workdir: str | None = None  # when the store records it
