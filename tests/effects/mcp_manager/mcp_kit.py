"""Helpers for the process manager tests: the official SDK client against a live server on
127.0.0.1, and small scripts to manage. A module of its own, not conftest: with several
``conftest.py`` in the tree, ``from conftest import`` can pick up another directory's."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
import psutil
import trio
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from threadspindle.effects.mcp_manager import ProcessManagerConfig

TOKEN = "test-operator-token-0123456789"

# A raw ``initialize`` request (no client library): the request that opens a session.
INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "raw", "version": "0"},
    },
}
ACCEPT = {"Accept": "application/json, text/event-stream"}


@asynccontextmanager
async def open_client(
    url: str, token: str | None, headers: dict[str, str] | None = None
) -> AsyncIterator[Client]:
    """The SDK's own client over streamable HTTP, with a bearer token (or none)."""
    all_headers = dict(headers or {})
    if token is not None:
        all_headers["Authorization"] = f"Bearer {token}"
    async with httpx2.AsyncClient(headers=all_headers, timeout=httpx2.Timeout(30.0)) as http:
        async with Client(streamable_http_client(url, http_client=http), cache=None) as client:
            yield client


async def call(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    """Call a tool that must succeed; its structured result."""
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, result.content
    assert result.structured_content is not None
    return result.structured_content


async def call_error(client: Client, tool: str, **arguments: Any) -> str:
    """Call a tool that must fail; the error text the agent would read."""
    result = await client.call_tool(tool, arguments)
    assert result.is_error, result.structured_content
    return " ".join(getattr(c, "text", "") for c in result.content)


async def wait_for(predicate: Callable[[], Any], timeout: float = 10.0) -> Any:
    with trio.fail_after(timeout):
        while True:
            value = predicate()
            if value:
                return value
            await trio.sleep(0.02)


async def wait_for_output(client: Client, name: str, needle: str, timeout: float = 10.0) -> dict:
    with trio.fail_after(timeout):
        while True:
            out = await call(client, "get_output", name=name)
            if needle in out["stdout"]:
                return out
            await trio.sleep(0.05)


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


ROOT = Path(__file__).resolve().parents[3]


async def launch_manager(tmp_path: Path, *extra: str) -> tuple[trio.Process, str]:
    """``python -m threadspindle.effects.mcp_manager`` (= ``spindle mcp``) as its own
    process, on any free port, with ``extra`` arguments; returns it and its URL once it listens."""
    argv = [sys.executable, "-m", "threadspindle.effects.mcp_manager", "--port", "0"]
    argv += ["--data-dir", str(tmp_path / "data"), "--allowed-root", str(tmp_path)]
    argv += ["--stop-grace", "1", *extra]
    proc = await trio.lowlevel.open_process(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "SPINDLE_MCP_TOKEN": TOKEN},
        cwd=str(ROOT),
    )
    buf = b""
    with trio.fail_after(30):
        while b"\n" not in buf:
            chunk = await proc.stdout.receive_some(4096)
            assert chunk, "spindle mcp exited before it was listening"
            buf += chunk
    line = buf.decode().splitlines()[0]
    assert line.startswith("process manager on http://127.0.0.1:")
    return proc, line.split()[3]


def make_config(tmp_path: Path, **overrides: Any) -> ProcessManagerConfig:
    fields: dict[str, Any] = {
        "port": 0,
        "token": TOKEN,
        "data_dir": tmp_path / "data",
        "allowed_roots": (tmp_path,),
        "stop_grace_s": 1.0,
        "poll_interval_s": 0.02,
    }
    fields.update(overrides)
    return ProcessManagerConfig(**fields)


class Scripts:
    """Small Python programs for the managed processes to run, written under tmp_path."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.work = root / "work"
        self.work.mkdir(exist_ok=True)

    def write(self, name: str, source: str) -> list[str]:
        """Args for ``command=sys.executable`` that run this source."""
        path = self.work / f"{name}.py"
        path.write_text(textwrap.dedent(source))
        return ["-u", str(path)]

    def start_args(self, name: str, source: str, **extra: Any) -> dict[str, Any]:
        return {
            "name": name,
            "command": sys.executable,
            "args": self.write(name, source),
            "cwd": str(self.work),
            **extra,
        }
