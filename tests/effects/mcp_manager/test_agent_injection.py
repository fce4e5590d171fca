"""End to end: the genuine Claude Code CLI, launched by Spindle's Claude adapter with the
process manager injected (``--mcp-config``, a thread token), lists the manager's tools and
runs ``start_process`` -> ``get_output`` -> ``stop_process`` against the real manager, driven
by a scripted fake Anthropic API on 127.0.0.1."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from conftest import alive, make_config

from effects.mcp_manager import ProcessManager, serve_process_manager
from ingress.agents.base import AgentOptions, StampedEvent
from ingress.agents.claude import ClaudeAdapter
from runtime.agent_events import (
    PermissionRequested,
    TextDelta,
    ToolFinished,
    ToolStarted,
    TurnAborted,
    TurnCompleted,
)
from runtime.effects import PromptAgent, StartAgent
from testkit.fake_model.anthropic import FakeAnthropic, user_text
from testkit.fake_model.base import RecordedRequest, SSEResponse

ROOT = Path(__file__).resolve().parents[3]
CLAUDE = ROOT / ".agents" / "node_modules" / ".bin" / "claude"
INSTALLED = ROOT / ".agents" / ".installed"
PREFIX = "mcp__process-manager__"
TOOLS = ("start_process", "get_output", "stop_process", "restart_process", "list_processes")
MARKER = "hello from a managed process"
THREAD = "discord:4242"

pytestmark = pytest.mark.timeout(150)


class ScriptedMcpModel(FakeAnthropic):
    """Answers ``MCPTEST`` with three process-manager calls in turn, then a text."""

    def __init__(self, workdir: Path) -> None:
        super().__init__()
        self.workdir = workdir
        self.offered: list[list[str]] = []  # tool names of every MCPTEST request
        self.results: list[str] = []  # the tool results the CLI sent back

    def _messages(self, request: RecordedRequest) -> SSEResponse:
        body = request.body if isinstance(request.body, dict) else {}
        messages = body.get("messages") or []
        first_user = next((m for m in messages if m.get("role") == "user"), None)
        if "MCPTEST" not in user_text(first_user) and "MCPTEST" not in json.dumps(messages):
            return super()._messages(request)
        self.offered.append([t.get("name", "") for t in body.get("tools") or []])
        calls = [b for b in _blocks(messages, "assistant") if b.get("type") == "tool_use"]
        results = [
            _result_text(b) for b in _blocks(messages, "user") if b.get("type") == "tool_result"
        ]
        self.results = results
        model = body.get("model") or "claude-opus-4-8"
        done = [c["name"].removeprefix(PREFIX) for c in calls]
        if not done:
            script = f"print({MARKER!r}, flush=True); import time; time.sleep(120)"
            return self._tool(
                model,
                PREFIX + "start_process",
                {
                    "name": "web",
                    "command": sys.executable,
                    "args": ["-u", "-c", script],
                    "cwd": str(self.workdir),
                },
            )
        if done[-1] == "start_process" or (done[-1] == "get_output" and MARKER not in results[-1]):
            if done.count("get_output") < 20:  # the process may not have printed yet
                return self._tool(model, PREFIX + "get_output", {"name": "web"})
        if "stop_process" not in done:
            return self._tool(model, PREFIX + "stop_process", {"name": "web"})
        return self._stream(model, [("text", ["MCP ", "done."])], "end_turn")


def _blocks(messages: list[Any], role: str) -> Iterator[dict[str, Any]]:
    for message in messages:
        if message.get("role") == role and isinstance(message.get("content"), list):
            yield from (b for b in message["content"] if isinstance(b, dict))


def _result_text(block: dict[str, Any]) -> str:
    content = block.get("content")
    if isinstance(content, list):
        return "\n".join(c.get("text", "") for c in content if isinstance(c, dict))
    return str(content)


async def test_claude_code_drives_the_process_manager(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    assert INSTALLED.exists() and CLAUDE.exists(), "run `make agents` first"
    manager: ProcessManager = await nursery.start(serve_process_manager, make_config(tmp_path))
    home, workdir = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    workdir.mkdir()
    fake = ScriptedMcpModel(workdir)
    fake.start()
    options = AgentOptions(
        binary=str(CLAUDE),
        home=str(home),
        env=(
            ("ANTHROPIC_BASE_URL", fake.base_url),
            ("ANTHROPIC_API_KEY", "sk-ant-fake-key"),
            ("CLAUDE_CODE_MAX_RETRIES", "1"),
        ),
        mcp_servers=(manager.mcp_server_for_thread(THREAD, str(workdir)),),
        stop_grace_s=3.0,
    )
    adapter = ClaudeAdapter(options)
    events: list[StampedEvent] = []
    arrived = trio.Event()

    async def emit(stamped: StampedEvent) -> None:
        nonlocal arrived
        events.append(stamped)
        arrived.set()

    try:
        async with trio.open_nursery() as inner:
            start = StartAgent(agent="claude", workdir=str(workdir))
            await inner.start(adapter.serve, start, emit)
            await adapter.prompt(
                PromptAgent(run_id="r1", text="MCPTEST", agent="claude", workdir=str(workdir))
            )
            answered: set[str] = set()
            with trio.fail_after(90):
                while not any(isinstance(e.event, TurnCompleted | TurnAborted) for e in events):
                    for e in list(events):
                        ev = e.event
                        if isinstance(ev, PermissionRequested) and ev.request_id not in answered:
                            answered.add(ev.request_id)
                            await adapter.answer_permission(ev.request_id, True)
                    arrived = trio.Event()
                    await arrived.wait()
            with trio.CancelScope(shield=True), trio.fail_after(30):
                await adapter.stop()
    finally:
        fake.stop()

    # The CLI offered all five tools to the model, under the server's name.
    assert fake.offered, "the model never saw the MCPTEST prompt"
    assert {PREFIX + t for t in TOOLS} <= set(fake.offered[0])
    # The turn went start -> get_output (until the marker showed) -> stop, then text.
    ended = [e.event for e in events if isinstance(e.event, TurnCompleted | TurnAborted)]
    assert isinstance(ended[0], TurnCompleted), ended
    started = [e.event.name for e in events if isinstance(e.event, ToolStarted)]
    assert started[0] == PREFIX + "start_process" and started[-1] == PREFIX + "stop_process"
    assert set(started[1:-1]) == {PREFIX + "get_output"}
    finished = [e.event for e in events if isinstance(e.event, ToolFinished)]
    assert not any(f.is_error for f in finished), finished
    assert MARKER in fake.results[-2]  # the last get_output saw the process's output
    assert json.loads(fake.results[-1])["tree_gone"] is True
    text = "".join(e.event.text for e in events if isinstance(e.event, TextDelta))
    assert "MCP done." in text
    # On the manager's side: the process belonged to the thread and is gone.
    procs = manager.processes_for_thread(THREAD)
    assert [(p.name, p.status) for p in procs] == [("web", "stopped")]
    assert procs[0].pid is not None and not alive(procs[0].pid)
    assert json.loads(fake.results[0])["thread_id"] == THREAD
    assert manager.guard.refused == 0
