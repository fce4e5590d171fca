"""Shared pieces for the process manager tests: a live server on 127.0.0.1 (any free port)
inside the test's nursery, and the official SDK client talking to it over HTTP."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio
from mcp_kit import Scripts, make_config

from threadspindle.effects.mcp_manager import ProcessManager, serve_process_manager


@pytest.fixture
def scripts(tmp_path: Path) -> Scripts:
    return Scripts(tmp_path)


@pytest.fixture
async def manager(nursery: trio.Nursery, tmp_path: Path) -> ProcessManager:
    return await nursery.start(serve_process_manager, make_config(tmp_path))


@pytest.fixture
def dump() -> Callable[[Any], str]:
    return lambda value: json.dumps(value, indent=1, default=str)
