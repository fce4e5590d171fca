"""``spindle run`` and the port it opens (issue 19.7). The MCP process manager listens on any
free port unless ``mcp.port`` fixes one, so two Spindles on one machine both serve, and every
agent adapter is handed the port really bound; a fixed port that is taken stops start-up
with one line naming ``mcp.port`` (exit 2), never a traceback. Real ``spindle run`` (and
``spindle mcp``) processes, console mode through a pipe, as in test_console.py."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx2
import pytest
import trio
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from threadspindle.agents import ADAPTER_MODULES
from threadspindle.app.agent_factory import AgentFactory
from threadspindle.app.config import load_settings
from threadspindle.app.process_manager import config_from_settings
from threadspindle.effects.mcp_manager import serve_process_manager
from threadspindle.effects.mcp_manager.server import SERVER_NAME
from threadspindle.runtime.core.effect_types import StartAgent

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "ports-test-operator-token-0123456789"


def _place(tmp_path: Path, name: str) -> dict[str, Path]:
    root = tmp_path / name
    place = {"work": root / "work", "home": root / "home", "data": root / "data"}
    for folder in place.values():
        folder.mkdir(parents=True)
    place["config"] = root / "none.toml"
    return place


def _env(place: dict[str, Path], **extra: str) -> dict[str, str]:
    return {
        "PATH": "/usr/bin:/bin",
        "HOME": str(place["home"]),
        "SPINDLE_DATA_DIR": str(place["data"]),
        "SPINDLE_CONFIG": str(place["config"]),
        "SPINDLE_MCP__TOKEN": TOKEN,
        "PYTHONPATH": str(ROOT),
        **extra,
    }


def _spindle(place: dict[str, Path], *args: str, **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "threadspindle.app.cli", *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=place["work"],
        env=_env(place, **env),
    )


@contextmanager
def _busy_port() -> Iterator[int]:
    """A port on 127.0.0.1 that something else listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


async def _mcp_url(place: dict[str, Path], proc: subprocess.Popen[str]) -> str:
    """The process manager's URL, from the JSON log once ``spindle run`` has it listening."""
    log = place["data"] / "spindle.log.jsonl"
    with trio.fail_after(60):
        while True:
            assert proc.poll() is None, proc.communicate()[1]
            if log.exists():
                for line in log.read_text().splitlines():
                    message = json.loads(line)["msg"]
                    if message.startswith("MCP process manager on "):
                        return message.split()[-1]
            await trio.sleep(0.1)


@asynccontextmanager
async def _client(url: str) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {TOKEN}", "X-Spindle-Thread": "thread-ports"}
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0)) as http:
        async with Client(streamable_http_client(url, http_client=http), cache=None) as client:
            yield client


async def _call(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, result.content
    assert result.structured_content is not None
    return result.structured_content


async def test_two_spindles_at_once_both_serve(tmp_path: Path) -> None:
    places = [_place(tmp_path, name) for name in ("one", "two")]
    procs = [_spindle(place, "run", "--agent", "echo") for place in places]
    try:
        urls = [await _mcp_url(place, proc) for place, proc in zip(places, procs, strict=True)]
        ports = {urlsplit(url).port for url in urls}
        assert len(ports) == 2 and all(ports)  # two real ports, neither 0
        for url, place in zip(urls, places, strict=True):
            async with _client(url) as client:
                started = await _call(
                    client,
                    "start_process",
                    name="hello",
                    command="echo",
                    args=[f"served by {place['data']}"],
                    cwd=str(place["home"]),  # the allowed root by default
                )
                assert started["status"] in ("running", "stopped")
                with trio.fail_after(10):
                    while True:
                        out = await _call(client, "get_output", name="hello")
                        if f"served by {place['data']}\n" in out["stdout"]:
                            break
                        await trio.sleep(0.05)
        results = []
        for number, proc in enumerate(procs):
            script = f"hello from spindle {number}\n/wait\n/quit\n"
            results.append(
                await trio.to_thread.run_sync(partial(proc.communicate, script, timeout=60))
            )
        for number, (proc, (stdout, stderr)) in enumerate(zip(procs, results, strict=True)):
            assert proc.returncode == 0, stderr
            assert f"hello from spindle {number}" in stdout
            assert "Traceback" not in stderr
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()


def test_a_fixed_port_that_is_taken_stops_start_up_with_one_line(tmp_path: Path) -> None:
    place = _place(tmp_path, "busy")
    with _busy_port() as port:
        run = _spindle(place, "run", "--agent", "echo", SPINDLE_MCP__PORT=str(port))
        _, run_err = run.communicate("/quit\n", timeout=60)
        mcp = _spindle(place, "mcp", SPINDLE_MCP__PORT=str(port))
        _, mcp_err = mcp.communicate(timeout=60)
    for proc, stderr in ((run, run_err), (mcp, mcp_err)):
        assert proc.returncode == 2, stderr  # a configuration error
        lines = stderr.strip().splitlines()
        assert len(lines) == 1, stderr  # one line, no traceback
        assert "mcp.port" in lines[0] and f"127.0.0.1:{port} is already in use" in lines[0]


def test_a_taken_web_port_stops_start_up_with_the_manager_running(tmp_path: Path) -> None:
    # The process manager starts first; the web chat's port taken after it made the bot
    # say it could not start, and then serve on (the manager's task kept the nursery
    # open), deaf to SIGTERM.
    place = _place(tmp_path, "busy-web")
    with _busy_port() as port:
        run = _spindle(place, "run", "--web", SPINDLE_WEB__PORT=str(port))
        try:
            _, stderr = run.communicate(timeout=60)
        finally:
            if run.poll() is None:
                run.kill()
                run.communicate()
    assert run.returncode == 2, stderr
    lines = [line for line in stderr.strip().splitlines() if "Cannot start" in line]
    assert len(lines) == 1 and "web.port" in lines[0], stderr
    assert "Traceback" not in stderr


async def test_every_adapter_is_handed_the_port_really_bound(
    nursery: trio.Nursery, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The genuine CLIs (`make test` installs them): an agent not installed is refused.
    monkeypatch.setenv("PATH", f"{ROOT / '.agents' / 'node_modules' / '.bin'}:/usr/bin:/bin")
    config = tmp_path / "config.toml"
    config.write_text(f'[runtime]\nallowed_roots = ["{tmp_path}"]\n')
    settings = load_settings(config, data_dir=str(tmp_path / "data"))
    assert settings.mcp.port == 0  # the default: any free port
    manager = await nursery.start(serve_process_manager, config_from_settings(settings))
    port = urlsplit(manager.url).port
    assert port
    factory = AgentFactory(settings, manager)
    for agent in ADAPTER_MODULES:
        adapter = factory(StartAgent(agent=agent, workdir=str(tmp_path)), "thread-ports")
        urls = [s.url for s in adapter.options.mcp_servers if s.name == SERVER_NAME]
        assert urls == [manager.url], agent
    async with httpx2.AsyncClient() as http:  # and that is where it listens
        response = await http.post(f"http://127.0.0.1:{port}/mcp", json={})
    assert response.status_code == 401  # the manager's guard: no token
