"""The runtime's ``AdapterFactory`` for ``spindle run``: configured options, the sandbox and,
when the MCP process manager runs, the manager as an MCP server with the thread's token.

This is where agents (``AgentOptions``, ``McpServer``) meet effects (the process manager):
the composition root, so that neither imports the other. Each agent start gets a fresh
adapter for ``start.agent``; the thread's workdir comes from the ``StartAgent`` itself
(the conversation's), so the factory needs nothing from the runtime.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from threadspindle.agents import adapter_class
from threadspindle.agents.base import AgentAdapter, AgentOptions, AgentStartError, McpServer
from threadspindle.app.config import AGENT_NAMES, Settings
from threadspindle.app.doctor import agent_binary
from threadspindle.effects.sandbox import inside
from threadspindle.runtime.core.effect_types import StartAgent

if TYPE_CHECKING:
    from threadspindle.effects.mcp_manager.server import ProcessManager

__all__ = ["AgentFactory", "process_manager_server", "with_process_manager"]


def process_manager_server(
    manager: ProcessManager, thread_id: str, workdir: str | None = None, home: str | None = None
) -> McpServer:
    """The process manager as an MCP server for an agent of this thread: a thread token
    (the agent can touch only its thread's processes), bound to ``workdir`` when given (the
    default ``cwd`` of its ``start_process`` calls)."""
    # Imported here: the MCP SDK takes a second to import, and only a running manager
    # (so an imported one) gets here; ``spindle run --no-mcp`` never pays for it.
    from threadspindle.effects.mcp_manager.server import SERVER_NAME

    if workdir is not None:
        manager.bind_thread(thread_id, workdir, home)
    return McpServer(
        name=SERVER_NAME, url=manager.url, bearer_token=manager.token_for_thread(thread_id)
    )


def with_process_manager(
    options: AgentOptions, manager: ProcessManager, thread_id: str, workdir: str | None = None
) -> AgentOptions:
    """A copy of ``options`` with this thread's process manager among its MCP servers
    (replacing any other entry of the same name)."""
    server = process_manager_server(manager, thread_id, workdir, options.home)
    from threadspindle.effects.mcp_manager.server import SERVER_NAME

    kept = tuple(s for s in options.mcp_servers if s.name != SERVER_NAME)
    return options.model_copy(update={"mcp_servers": (*kept, server)})


class AgentFactory:
    """Makes each thread's adapter (``runtime.live.ports.AdapterFactory``)."""

    def __init__(
        self, settings: Settings, mcp: ProcessManager | None, *, check_roots: bool = True
    ) -> None:
        self.settings = settings
        self.mcp = mcp
        # The console's roots are the folder it was started from: a conversation begun
        # from another one keeps its folder there (README: a warning says so).
        self.check_roots = check_roots

    def __call__(self, start: StartAgent, thread_id: str, /) -> AgentAdapter:
        agent = start.agent
        if self.check_roots:
            self._check_roots(start.workdir)
        if agent in AGENT_NAMES and agent_binary(self.settings, agent) is None:
            # Said at once, as the thread's start failing: started, it failed the same way
            # five times over ~8 s of backoff (14 warnings in the console) before saying so.
            raise AgentStartError(
                f"{agent} is not installed (no {self.settings.agent(agent).binary or agent!r} "
                "found): install it and log in (`spindle doctor` says how)"
            )
        options = self.settings.agent(agent).options()
        options = options.model_copy(update={"sandbox": self.settings.sandbox_for(agent)})
        if self.mcp is not None:
            options = with_process_manager(options, self.mcp, thread_id, start.workdir)
        return adapter_class(agent)(options)

    def _check_roots(self, workdir: str) -> None:
        """The workdir is inside the allowed roots as configured now. The core checked it
        against the roots of its day when it was set; a root taken out of the config
        since left the thread's agent working there at every start."""
        roots = self.settings.runtime.policy().allowed_roots
        real = os.path.realpath(workdir)
        if any(inside(real, root) for root in roots):
            return
        raise AgentStartError(
            f"the workdir {workdir} is outside the allowed roots now "
            f"({', '.join(roots) or 'none configured'}): /workdir set a folder inside them"
        )
