"""The MCP process manager (issue 7): long-running processes for agents, per chat thread,
served over streamable HTTP on loopback with the official MCP SDK.

See docs/process-manager.md. ``serve_process_manager`` is for ``spindle run``, ``main`` for
``spindle mcp``.
"""

from .auth import Caller, TokenAuthority
from .models import (
    DEFAULT_PORT,
    OutputResult,
    ProcessInfo,
    ProcessList,
    ProcessManagerConfig,
    ProcessStatus,
    StopResult,
)
from .server import (
    SERVER_NAME,
    PortUnavailable,
    ProcessManager,
    main,
    serve_process_manager,
    serve_until_signalled,
)
from .supervisor import ProcessError, ProcessSupervisor

__all__ = [
    "DEFAULT_PORT",
    "SERVER_NAME",
    "Caller",
    "OutputResult",
    "PortUnavailable",
    "ProcessError",
    "ProcessInfo",
    "ProcessList",
    "ProcessManager",
    "ProcessManagerConfig",
    "ProcessStatus",
    "ProcessSupervisor",
    "StopResult",
    "TokenAuthority",
    "main",
    "serve_process_manager",
    "serve_until_signalled",
]
