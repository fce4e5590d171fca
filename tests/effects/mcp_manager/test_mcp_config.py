"""The manager's configuration: its refusals, the status lines of its processes, and a
server that leaves the root logger alone (built from Spindle's settings: tests/app/
test_process_manager.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from threadspindle.effects.mcp_manager import (
    ProcessInfo,
    ProcessManagerConfig,
)


@pytest.mark.parametrize(
    "fields",
    [{"host": "0.0.0.0"}, {"host": "192.168.1.2"}, {"port": 70000}, {"ring_buffer_chars": 0}],
)
def test_bad_configurations_are_refused(fields: dict) -> None:
    with pytest.raises(ValueError):
        ProcessManagerConfig(**fields)


def test_status_lines() -> None:
    base = {
        "name": "web",
        "thread_id": "t",
        "command": "npm",
        "args": ["run", "dev"],
        "cwd": "/w",
        "restarts": 0,
        "adopted": False,
    }
    running = ProcessInfo(
        **base, status="running", pid=42, exit_code=None, started_at=1000.0, stopped_at=None
    )
    assert running.summary(now=1192.0) == "web: running, pid 42, up 3m12s"
    failed = ProcessInfo(
        **base, status="failed", pid=42, exit_code=2, started_at=1000.0, stopped_at=1010.0
    )
    assert failed.summary(now=1050.0) == "web: failed (exit 2), 40s ago"
    lost = ProcessInfo(
        **base, status="lost", pid=42, exit_code=None, started_at=1000.0, stopped_at=9000.0
    )
    assert lost.summary(now=20000.0) == "web: lost (gone when Spindle restarted)"
    long = running.model_copy(update={"started_at": 0.0})
    assert long.summary(now=7500.0) == "web: running, pid 42, up 2h05m"


def test_building_the_server_leaves_the_root_logger_alone(tmp_path: Path) -> None:
    import logging

    import trio

    from threadspindle.effects.mcp_manager.auth import TokenAuthority
    from threadspindle.effects.mcp_manager.server import build_mcp_server
    from threadspindle.effects.mcp_manager.supervisor import ProcessSupervisor

    root = logging.getLogger()
    saved_handlers, saved_level = root.handlers[:], root.level
    root.handlers.clear()
    try:
        config = ProcessManagerConfig(data_dir=tmp_path, allowed_roots=(tmp_path,))

        async def build() -> None:
            async with ProcessSupervisor.open(config) as supervisor:
                build_mcp_server(supervisor, TokenAuthority("s" * 32))

        trio.run(build)
        assert root.handlers == []
    finally:
        root.handlers[:] = saved_handlers
        root.setLevel(saved_level)
