"""The MCP process manager as Spindle's configuration sets it up: its ``ProcessManagerConfig``
from ``Settings`` (the ``[mcp]`` section, ``data_dir`` and ``runtime.allowed_roots``), for
``spindle run`` and ``spindle mcp``. It lives in the composition root so the manager itself
(``effects/mcp_manager``) knows nothing of the configuration file."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from threadspindle.app.config import Settings
from threadspindle.app.exit_codes import EXIT_USAGE
from threadspindle.effects.mcp_manager.models import ProcessManagerConfig
from threadspindle.effects.open_files import raise_open_file_limit

__all__ = ["config_from_settings", "serve_alone"]


def config_from_settings(settings: Settings, port: int | None = None) -> ProcessManagerConfig:
    """The manager's configuration; ``port`` (``spindle mcp --port``) overrides the file's.
    Raises ``ValueError`` (pydantic's) for a value the manager refuses."""
    mcp = settings.mcp
    token = mcp.token.get_secret_value() if mcp.token is not None else None
    roots = tuple(
        Path(os.path.realpath(os.path.expanduser(root))) for root in settings.runtime.allowed_roots
    )
    return ProcessManagerConfig(
        port=mcp.port if port is None else port,
        token=token or None,
        data_dir=settings.data_path,
        allowed_roots=roots,
        keep_on_shutdown=mcp.keep_on_shutdown,
        max_processes_per_thread=mcp.max_processes_per_thread,
        max_sessions_per_thread=mcp.max_sessions_per_thread,
        ring_buffer_lines=mcp.ring_buffer_lines,
        max_connections=mcp.max_connections,
    )


def serve_alone(settings: Settings, port: int | None = None) -> int:
    """``spindle mcp``: the manager alone, until SIGINT/SIGTERM."""
    from threadspindle.effects.mcp_manager.server import serve_until_signalled

    try:
        config = config_from_settings(settings, port)
    except ValueError as exc:
        print(f"spindle mcp: {exc}", file=sys.stderr)
        return EXIT_USAGE
    # As ``spindle run`` does: its processes' files and its connections (capped at an
    # eighth of this limit, effects/connection_cap.py) need more than a session's 1,024.
    raise_open_file_limit()
    return serve_until_signalled(config, "mcp.port" if port is None else "--port")
