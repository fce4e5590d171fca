"""The process manager as ``spindle run``/``spindle mcp`` configure it from Spindle's settings
(``app/process_manager.py``), and as each agent gets it (``app/agent_factory.py``): a thread
token, the port really bound, the thread's workdir."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import httpx2
import pytest
import trio
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from threadspindle.agents.base import AgentOptions, AgentStartError, McpServer
from threadspindle.app.agent_factory import AgentFactory, with_process_manager
from threadspindle.app.config import load_settings
from threadspindle.app.process_manager import config_from_settings
from threadspindle.effects.mcp_manager import serve_process_manager
from threadspindle.runtime.core.effect_types import StartAgent


def test_config_from_spindle_settings(tmp_path: Path) -> None:
    toml = tmp_path / "spindle.toml"
    toml.write_text(
        f"""
data_dir = "{tmp_path / "data"}"

[runtime]
allowed_roots = ["{tmp_path}", "~"]

[mcp]
port = 9911
token = "a-long-enough-operator-token"
keep_on_shutdown = true
max_processes_per_thread = 3
max_sessions_per_thread = 4
ring_buffer_lines = 200
max_connections = 64
"""
    )
    settings = load_settings(toml)
    config = config_from_settings(settings)
    assert config.port == 9911 and config.host == "127.0.0.1"
    assert config.token == "a-long-enough-operator-token"
    assert config.data_dir == tmp_path / "data"
    assert config.allowed_roots == (
        Path(os.path.realpath(tmp_path)),
        Path(os.path.realpath(os.path.expanduser("~"))),
    )
    assert config.keep_on_shutdown is True
    assert config.max_processes_per_thread == 3
    assert config.max_sessions_per_thread == 4
    assert config.ring_buffer_lines == 200
    assert config.max_connections == 64
    assert config_from_settings(settings, port=0).port == 0


def test_no_token_in_settings_means_the_generated_one(tmp_path: Path) -> None:
    toml = tmp_path / "spindle.toml"
    toml.write_text(f'data_dir = "{tmp_path}"\n')
    config = config_from_settings(load_settings(toml))
    assert config.token is None  # read, or made, in <data_dir>/mcp-token at start-up


async def test_agent_options_carry_the_thread_token(nursery: trio.Nursery, tmp_path: Path) -> None:
    toml = tmp_path / "spindle.toml"
    toml.write_text(f'data_dir = "{tmp_path / "data"}"\n')
    settings = load_settings(toml)
    manager = await nursery.start(serve_process_manager, config_from_settings(settings))
    base = AgentOptions(mcp_servers=(McpServer(name="other", url="http://127.0.0.1:1/mcp"),))
    options = with_process_manager(base, manager, "discord:9", "/tmp")
    assert [s.name for s in options.mcp_servers] == ["other", "process-manager"]
    server = options.mcp_servers[1]
    assert server.url == manager.url
    caller = manager.authority.identify({"authorization": f"Bearer {server.bearer_token}"})
    assert caller is not None and caller.thread_id == "discord:9"
    # Asking again replaces the entry instead of adding a second one.
    again = with_process_manager(options, manager, "discord:9")
    assert [s.name for s in again.mcp_servers] == ["other", "process-manager"]


async def test_the_factory_binds_the_thread_to_the_workdir_it_starts_in(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    """The agent's workdir comes from the ``StartAgent`` the runtime hands the factory: the
    processes the agent starts through its thread token run there by default."""
    work = tmp_path / "work"
    work.mkdir()
    toml = tmp_path / "spindle.toml"
    toml.write_text(
        f'data_dir = "{tmp_path / "data"}"\n[runtime]\nallowed_roots = ["{tmp_path}"]\n'
    )
    settings = load_settings(toml)
    manager = await nursery.start(serve_process_manager, config_from_settings(settings))
    adapter = AgentFactory(settings, manager)(
        StartAgent(agent="echo", workdir=str(work)), "console:main"
    )
    [server] = [s for s in adapter.options.mcp_servers if s.name == "process-manager"]
    assert server.url == manager.url and server.bearer_token
    headers = {"Authorization": f"Bearer {server.bearer_token}"}
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0)) as http:
        async with Client(streamable_http_client(server.url, http_client=http)) as client:
            result = await client.call_tool(
                "start_process", {"name": "p", "command": sys.executable, "args": ["-c", "pass"]}
            )
    assert not result.is_error, result.content
    assert result.structured_content is not None
    assert result.structured_content["cwd"] == str(work.resolve())
    assert result.structured_content["thread_id"] == "console:main"
    await manager.stop_thread_processes("console:main")
    # Without the process manager the options are the configured ones.
    plain = AgentFactory(settings, None)(StartAgent(agent="echo", workdir=str(work)), "t")
    assert plain.options.mcp_servers == ()


def test_an_agent_is_started_only_in_a_workdir_inside_the_roots_configured_now(
    tmp_path: Path,
) -> None:
    # The core checks a workdir against the roots of its day when it is set; a root
    # taken out of the config since left the thread's agent working there at each start.
    kept, dropped = tmp_path / "kept", tmp_path / "dropped"
    for folder in (kept / "app", dropped):
        folder.mkdir(parents=True)
    (kept / "link").symlink_to(dropped)
    config = tmp_path / "config.toml"
    config.write_text(f'[runtime]\nallowed_roots = ["{kept}"]\n')
    settings = load_settings(config, data_dir=str(tmp_path / "data"))
    factory = AgentFactory(settings, None)
    assert factory(StartAgent(agent="echo", workdir=str(kept / "app")), "t")
    for outside in (dropped, kept / "link"):
        with pytest.raises(AgentStartError, match="outside the allowed roots now"):
            factory(StartAgent(agent="echo", workdir=str(outside)), "t")
    # The console's own roots are where it was started: not checked there (README).
    console = AgentFactory(settings, None, check_roots=False)
    assert console(StartAgent(agent="echo", workdir=str(dropped)), "t")


def test_an_agent_not_installed_is_refused_at_once_with_the_way_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Started, a missing CLI failed five times over ~8 s of backoff (14 warnings in the
    # console) before the thread was told.
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    config = tmp_path / "config.toml"
    config.write_text(f'[runtime]\nallowed_roots = ["{tmp_path}"]\n')
    factory = AgentFactory(load_settings(config, data_dir=str(tmp_path / "data")), None)
    for agent in ("claude", "codex", "gemini", "opencode"):
        with pytest.raises(AgentStartError, match=f"{agent} is not installed.*spindle doctor"):
            factory(StartAgent(agent=agent, workdir=str(tmp_path)), "t")
    assert factory(StartAgent(agent="echo", workdir=str(tmp_path)), "t")  # needs nothing
