"""How a generic command is launched (pure): its argv (``binary`` split like a shell would,
plus ``extra_args``) and its environment: the ``SPINDLE_*`` variables that tell it the run,
session, model, system instruction and (with the process manager on) its MCP servers with
the thread's own token, ``HOME`` from ``options.home``, then ``options.env``.
"""

from __future__ import annotations

import json
import shlex

from threadspindle.agents.base.launch import LaunchSpec, launch_environment
from threadspindle.agents.base.options import AgentOptions
from threadspindle.runtime.core.effect_types import PromptAgent

__all__ = ["command_argv", "launch_spec"]


def command_argv(options: AgentOptions) -> list[str]:
    """The command line: ``options.binary`` split like a shell would, plus ``extra_args``."""
    if not options.binary:
        raise ValueError("the command agent needs `binary`: the command to run")
    return shlex.split(options.binary) + list(options.extra_args)


def launch_spec(
    options: AgentOptions, prompt: PromptAgent, *, workdir: str, session_id: str | None
) -> LaunchSpec:
    """One turn's process: ``prompt`` in ``workdir``, the last ``session`` it printed
    known as ``session_id``."""
    forced = {
        "SPINDLE_RUN_ID": prompt.run_id,
        "SPINDLE_SESSION_ID": session_id or prompt.session_id or "",
        "SPINDLE_MODEL": prompt.model or options.model or "",
        "SPINDLE_SYSTEM_INSTRUCTION": prompt.system_instruction or options.system_instruction or "",
    }
    if options.mcp_servers:
        forced["SPINDLE_MCP_SERVERS"] = json.dumps([s.model_dump() for s in options.mcp_servers])
    env = launch_environment(options, forced=forced)
    return LaunchSpec.of(options, command_argv(options), env, workdir)
