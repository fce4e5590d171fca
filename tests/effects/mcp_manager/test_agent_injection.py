"""End to end: the genuine Claude Code CLI, launched by Spindle's Claude adapter with the
process manager injected (``--mcp-config``, a thread token), lists the manager's tools and
runs ``start_process`` -> ``get_output`` -> ``stop_process`` against the real manager, driven
by a scripted fake Anthropic API on 127.0.0.1."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from mcp_kit import alive, make_config

from threadspindle.agents.base import AgentOptions, StampedEvent
from threadspindle.agents.claude import ClaudeAdapter
from threadspindle.agents.codex import CodexAdapter
from threadspindle.agents.gemini import GeminiAdapter
from threadspindle.agents.opencode import OpencodeAdapter
from threadspindle.app.agent_factory import process_manager_server
from threadspindle.effects.mcp_manager import ProcessManager, serve_process_manager
from threadspindle.runtime.core.agent_events import (
    PermissionRequested,
    TextDelta,
    ToolFinished,
    ToolStarted,
    TurnAborted,
    TurnCompleted,
)
from threadspindle.runtime.core.effect_types import PromptAgent, StartAgent
from threadspindle.testkit.fake_model.anthropic import FakeAnthropic
from threadspindle.testkit.fake_model.base import RecordedRequest, SSEEvent, SSEResponse
from threadspindle.testkit.fake_model.gemini import FakeGeminiServer
from threadspindle.testkit.fake_model.gemini import tool_names as gemini_tool_names
from threadspindle.testkit.fake_model.openai_chat import OpenAIChatFake, is_title_request
from threadspindle.testkit.fake_model.openai_chat import tool_names as chat_tool_names
from threadspindle.testkit.fake_model.openai_responses import OpenAIResponsesFake, last_user_text

ROOT = Path(__file__).resolve().parents[3]
CLAUDE = ROOT / ".agents" / "node_modules" / ".bin" / "claude"
INSTALLED = ROOT / ".agents" / ".installed"
PREFIX = "mcp__process-manager__"
TOOLS = ("start_process", "get_output", "stop_process", "restart_process", "list_processes")
MARKER = "hello from a managed process"
THREAD = "discord:4242"

pytestmark = pytest.mark.timeout(150)


def next_call(prefix: str, done: list[str], results: list[str], workdir: Path) -> Any:
    """The scripted model's next process-manager call as ``(tool, arguments)``, or None when
    it is time for the final text: start, get_output until the marker shows, stop."""
    if not done:
        # A shell, not Python: it prints at once, where a Python starting on a loaded machine
        # had not printed yet when the model's 20 looks were over (the test failed).
        arguments = {
            "name": "web",
            "command": "/bin/sh",
            "args": ["-c", f"echo '{MARKER}'; exec sleep 120"],
            "cwd": str(workdir),
        }
        return prefix + "start_process", arguments
    last = done[-1]
    waiting = last == "start_process" or (last == "get_output" and MARKER not in results[-1])
    if waiting and done.count("get_output") < 20:  # the process may not have printed yet
        return prefix + "get_output", {"name": "web"}
    if "stop_process" not in done:
        return prefix + "stop_process", {"name": "web"}
    return None


class ScriptedMcpModel(FakeAnthropic):
    """Answers ``MCPTEST`` with the scripted process-manager calls, then a text."""

    def __init__(self, workdir: Path) -> None:
        super().__init__()
        self.workdir = workdir
        self.offered: list[list[str]] = []  # tool names of every MCPTEST request
        self.results: list[str] = []  # the tool results the CLI sent back

    def _messages(self, request: RecordedRequest) -> SSEResponse:
        body = request.body if isinstance(request.body, dict) else {}
        messages = body.get("messages") or []
        if "MCPTEST" not in json.dumps(messages):
            return super()._messages(request)
        self.offered.append([t.get("name", "") for t in body.get("tools") or []])
        calls = [b for b in _blocks(messages, "assistant") if b.get("type") == "tool_use"]
        results = [
            _result_text(b) for b in _blocks(messages, "user") if b.get("type") == "tool_result"
        ]
        self.results = results
        model = body.get("model") or "claude-opus-4-8"
        done = [c["name"].removeprefix(PREFIX) for c in calls]
        step = next_call(PREFIX, done, results, self.workdir)
        if step is None:
            return self._stream(model, [("text", ["MCP ", "done."])], "end_turn")
        return self._tool(model, *step)


def _starter(names: list[str]) -> str | None:
    """The offered name of start_process (not restart_process, which ends the same way)."""
    return next((n for n in names if n.endswith("start_process") and "restart" not in n), None)


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
        mcp_servers=(process_manager_server(manager, THREAD, str(workdir)),),
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


# -- Codex (app-server) ---------------------------------------------------------------------

CODEX = ROOT / ".agents" / "node_modules" / ".bin" / "codex"


class CodexScript:
    """The same script over the Responses API (the fake's ``script`` hook). Codex offers an
    MCP server's tools as a ``namespace`` tool (``mcp__process_manager``) holding plain
    functions; the model calls one with ``name`` plus ``namespace``."""

    def __init__(self, fake: OpenAIResponsesFake, workdir: Path) -> None:
        self.fake = fake
        self.workdir = workdir
        self.offered: list[list[str]] = []  # "namespace/name" of every offered MCP tool
        self.results: list[str] = []

    def __call__(self, request: RecordedRequest) -> list[SSEEvent] | None:
        body = request.body if isinstance(request.body, dict) else {}
        if "MCPTEST" not in last_user_text(body):
            return None
        spaces = [
            t
            for t in body.get("tools") or []
            if t.get("type") == "namespace" and "process_manager" in str(t.get("name"))
        ]
        self.offered.append(
            [f"{ns['name']}/{tool.get('name')}" for ns in spaces for tool in ns.get("tools", [])]
        )
        if not spaces:
            return None  # no manager tools offered: the fake's plain text (the test fails)
        namespace = spaces[0]["name"]
        items = [i for i in body.get("input") or [] if isinstance(i, dict)]
        done = [i["name"] for i in items if i.get("type") == "function_call"]
        self.results = [
            i["output"] if isinstance(i.get("output"), str) else json.dumps(i.get("output"))
            for i in items
            if i.get("type") == "function_call_output"
        ]
        model = body.get("model", "fake")
        step = next_call("", done, self.results, self.workdir)
        if step is None:
            return list(self.fake.text_reply(model, ["MCP ", "done."]))
        events = list(self.fake.tool_call_reply(model, *step))
        for event in events:
            _put_in_namespace(event.data, namespace)
        return events


def _put_in_namespace(data: Any, namespace: str) -> None:
    """Add ``namespace`` to every function_call item inside one SSE event's data."""
    if isinstance(data, dict):
        if data.get("type") == "function_call":
            data["namespace"] = namespace
        for value in data.values():
            _put_in_namespace(value, namespace)
    elif isinstance(data, list):
        for value in data:
            _put_in_namespace(value, namespace)


def _codex_options(base_url: str, home: Path, manager: ProcessManager, workdir: Path) -> Any:
    provider = (
        f'{{name="Fake",base_url="{base_url}",wire_api="responses",env_key="FAKE_API_KEY",'
        "request_max_retries=0,stream_max_retries=0}"
    )
    extra = (
        # A model codex has no catalogue entry for: MCP tools are then offered directly
        # (for its own models they hide behind its tool_search tool).
        "-c", "model=fake-model",
        "-c", "model_provider=fake",
        "-c", f"model_providers.fake={provider}",
        "-c", "features.plugins=false",
        "-c", "features.remote_plugin=false",
        "-c", "features.apps=false",
        "-c", "analytics.enabled=false",
        "-c", 'otel.exporter="none"',
    )  # fmt: skip
    return AgentOptions(
        binary=str(CODEX),
        extra_args=extra,
        env=(("FAKE_API_KEY", "sk-fake"),),
        home=str(home),
        mcp_servers=(process_manager_server(manager, THREAD, str(workdir)),),
        start_timeout_s=30.0,
        stop_grace_s=2.0,
    )


async def test_codex_drives_the_process_manager(nursery: trio.Nursery, tmp_path: Path) -> None:
    assert INSTALLED.exists() and CODEX.exists(), "run `make agents` first"
    manager: ProcessManager = await nursery.start(serve_process_manager, make_config(tmp_path))
    home, workdir = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    workdir.mkdir()
    fake = OpenAIResponsesFake()
    script = CodexScript(fake, workdir)
    fake.script = script
    fake.start()
    adapter = CodexAdapter(_codex_options(fake.base_url, home, manager, workdir))
    try:
        events = await _one_turn(adapter, "codex", workdir)
    finally:
        fake.stop()

    assert script.offered, "the model never saw the MCPTEST prompt"
    offered = script.offered[0]
    assert {f"mcp__process_manager/{t}" for t in TOOLS} <= set(offered), offered
    ended = [e.event for e in events if isinstance(e.event, TurnCompleted | TurnAborted)]
    assert isinstance(ended[0], TurnCompleted), ended
    assert MARKER in script.results[-2]
    assert re.search(r'tree_gone\\?"\s*:\s*true', script.results[-1]), script.results[-1]
    assert "MCP done." in "".join(e.event.text for e in events if isinstance(e.event, TextDelta))
    procs = manager.processes_for_thread(THREAD)
    assert [(p.name, p.status) for p in procs] == [("web", "stopped")]
    assert procs[0].pid is not None and not alive(procs[0].pid)
    assert manager.guard.refused == 0


async def _one_turn(adapter: Any, agent: str, workdir: Path) -> list[StampedEvent]:
    """Run one MCPTEST turn, allowing every permission asked; stop the agent after it."""
    events: list[StampedEvent] = []
    async with trio.open_nursery() as inner:
        start = StartAgent(agent=agent, workdir=str(workdir))
        await inner.start(adapter.serve, start, _collect(events))
        try:
            await adapter.prompt(
                PromptAgent(run_id="r1", text="MCPTEST", agent=agent, workdir=str(workdir))
            )
            answered: set[str] = set()
            with trio.fail_after(90):
                while not any(isinstance(e.event, TurnCompleted | TurnAborted) for e in events):
                    for e in list(events):
                        ev = e.event
                        if isinstance(ev, PermissionRequested) and ev.request_id not in answered:
                            answered.add(ev.request_id)
                            await adapter.answer_permission(ev.request_id, True)
                    await trio.sleep(0.02)
        finally:
            with trio.CancelScope(shield=True), trio.fail_after(30):
                await adapter.stop()
    return events


def _collect(events: list[StampedEvent]) -> Any:
    async def emit(stamped: StampedEvent) -> None:
        events.append(stamped)

    return emit


# -- Gemini CLI (ACP) -----------------------------------------------------------------------

GEMINI = ROOT / ".agents" / "node_modules" / ".bin" / "gemini"
GEMINI_USER_SETTINGS = {
    "general": {"enableAutoUpdate": False},
    "privacy": {"usageStatisticsEnabled": False},
    "telemetry": {"enabled": False},
    "security": {"auth": {"selectedType": "gemini-api-key"}},
}


class ScriptedGemini(FakeGeminiServer):
    """The same script over the Gemini API: tools are ``mcp_<server>_<tool>`` functions."""

    def __init__(self, workdir: Path) -> None:
        super().__init__()
        self.workdir = workdir
        self.offered: list[list[str]] = []
        self.results: list[str] = []

    def _stream(self, body: Any) -> Iterator[SSEEvent]:
        contents = body.get("contents") if isinstance(body, dict) else None
        if "MCPTEST" not in json.dumps(contents):
            yield from super()._stream(body)
            return
        names = gemini_tool_names(body)
        self.offered.append(names)
        starter = _starter(names)
        if starter is None:
            yield from super()._stream(body)
            return
        prefix = starter.removesuffix("start_process")
        parts = [p for c in contents for p in c.get("parts") or [] if isinstance(p, dict)]
        done = [
            p["functionCall"]["name"].removeprefix(prefix) for p in parts if "functionCall" in p
        ]
        self.results = [
            json.dumps(p["functionResponse"].get("response"))
            for p in parts
            if "functionResponse" in p
        ]
        step = next_call(prefix, done, self.results, self.workdir)
        if step is None:
            yield from self._text_events("MCP done.")
            return
        call = {"name": step[0], "args": step[1]}
        yield SSEEvent(
            {
                "candidates": [
                    {
                        "content": {"role": "model", "parts": [{"functionCall": call}]},
                        "finishReason": "STOP",
                        "index": 0,
                    }
                ],
                "usageMetadata": {
                    "promptTokenCount": 10,
                    "candidatesTokenCount": 5,
                    "totalTokenCount": 15,
                },
                "modelVersion": "fake",
            }
        )


async def test_gemini_drives_the_process_manager(nursery: trio.Nursery, tmp_path: Path) -> None:
    assert INSTALLED.exists() and GEMINI.exists(), "run `make agents` first"
    manager: ProcessManager = await nursery.start(serve_process_manager, make_config(tmp_path))
    home, workdir = tmp_path / "home", tmp_path / "work"
    (home / ".gemini").mkdir(parents=True)
    (home / ".gemini" / "settings.json").write_text(json.dumps(GEMINI_USER_SETTINGS))
    workdir.mkdir()
    fake = ScriptedGemini(workdir)
    fake.start()
    options = AgentOptions(
        binary=str(GEMINI),
        home=str(home),
        env=(
            ("GOOGLE_GEMINI_BASE_URL", fake.base_url),
            ("GEMINI_API_KEY", "fake-gemini-key"),
            ("TMPDIR", str(home)),
        ),
        mcp_servers=(process_manager_server(manager, THREAD, str(workdir)),),
        stop_grace_s=3.0,
    )
    try:
        events = await _one_turn(GeminiAdapter(options, max_attempts=1), "gemini", workdir)
    finally:
        fake.stop()

    assert fake.offered, "the model never saw the MCPTEST prompt"
    assert all(any(n.endswith("_" + t) for n in fake.offered[0]) for t in TOOLS), fake.offered
    ended = [e.event for e in events if isinstance(e.event, TurnCompleted | TurnAborted)]
    assert isinstance(ended[0], TurnCompleted), ended
    assert MARKER in fake.results[-2]
    assert re.search(r'tree_gone\\?"\s*:\s*true', fake.results[-1]), fake.results[-1]
    assert "MCP done." in "".join(e.event.text for e in events if isinstance(e.event, TextDelta))
    procs = manager.processes_for_thread(THREAD)
    assert [(p.name, p.status) for p in procs] == [("web", "stopped")]
    assert procs[0].pid is not None and not alive(procs[0].pid)
    assert manager.guard.refused == 0


# -- OpenCode (serve) -----------------------------------------------------------------------

OPENCODE = ROOT / ".agents" / "node_modules" / ".bin" / "opencode"
OPENCODE_OFFLINE_ENV = (
    ("OPENCODE_DISABLE_AUTOUPDATE", "1"),
    ("OPENCODE_DISABLE_MODELS_FETCH", "1"),
    ("OPENCODE_DISABLE_LSP_DOWNLOAD", "1"),
    ("OPENCODE_DISABLE_SHARE", "1"),
    ("OPENCODE_DISABLE_DEFAULT_PLUGINS", "1"),
    ("OPENCODE_DISABLE_CLAUDE_CODE", "1"),
)


class ChatScript:
    """The same script over Chat Completions (the fake's ``script`` hook); opencode names
    MCP tools ``<server>_<tool>``."""

    def __init__(self, fake: OpenAIChatFake, workdir: Path) -> None:
        self.fake = fake
        self.workdir = workdir
        self.offered: list[list[str]] = []
        self.results: list[str] = []

    def __call__(self, request: RecordedRequest) -> list[SSEEvent] | None:
        body = request.body if isinstance(request.body, dict) else {}
        if is_title_request(body) or "MCPTEST" not in json.dumps(body.get("messages")):
            return None
        names = chat_tool_names(body)
        self.offered.append(names)
        starter = _starter(names)
        if starter is None:
            return None
        prefix = starter.removesuffix("start_process")
        messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
        done = [
            call["function"]["name"].removeprefix(prefix)
            for m in messages
            if m.get("role") == "assistant"
            for call in m.get("tool_calls") or []
        ]
        self.results = [
            m["content"] if isinstance(m.get("content"), str) else json.dumps(m.get("content"))
            for m in messages
            if m.get("role") == "tool"
        ]
        model = body.get("model", "fake-model")
        step = next_call(prefix, done, self.results, self.workdir)
        if step is None:
            return list(self.fake.text_reply(model, ["MCP ", "done."]))
        return list(self.fake.tool_call_reply(model, *step))


def _opencode_options(fake: OpenAIChatFake, home: Path, manager: ProcessManager, work: Path) -> Any:
    config = {
        "$schema": "https://opencode.ai/config.json",
        "autoupdate": False,
        "share": "disabled",
        "model": "fake/fake-model",
        "small_model": "fake/fake-model",
        "provider": {
            "fake": {
                "npm": "@ai-sdk/openai-compatible",
                "name": "Fake local",
                "options": {"baseURL": fake.base_url, "apiKey": "sk-fake"},
                "models": {
                    "fake-model": {
                        "name": "Fake Model",
                        "tool_call": True,
                        "limit": {"context": 128000, "output": 4096},
                    }
                },
            }
        },
    }
    config_dir = home / ".config" / "opencode"
    config_dir.mkdir(parents=True)
    (config_dir / "opencode.json").write_text(json.dumps(config))
    return AgentOptions(
        binary=str(OPENCODE),
        home=str(home),
        env=OPENCODE_OFFLINE_ENV,
        mcp_servers=(process_manager_server(manager, THREAD, str(work)),),
        start_timeout_s=60.0,
        stop_grace_s=2.0,
    )


async def test_opencode_drives_the_process_manager(nursery: trio.Nursery, tmp_path: Path) -> None:
    assert INSTALLED.exists() and OPENCODE.exists(), "run `make agents` first"
    manager: ProcessManager = await nursery.start(serve_process_manager, make_config(tmp_path))
    home, workdir = tmp_path / "home", tmp_path / "work"
    workdir.mkdir()
    fake = OpenAIChatFake()
    script = ChatScript(fake, workdir)
    fake.script = script
    fake.start()
    adapter = OpencodeAdapter(_opencode_options(fake, home, manager, workdir))
    try:
        events = await _one_turn(adapter, "opencode", workdir)
    finally:
        fake.stop()

    assert script.offered, "the model never saw the MCPTEST prompt"
    assert all(any(n.endswith("_" + t) for n in script.offered[0]) for t in TOOLS), script.offered
    ended = [e.event for e in events if isinstance(e.event, TurnCompleted | TurnAborted)]
    assert isinstance(ended[0], TurnCompleted), ended
    assert MARKER in script.results[-2]
    assert re.search(r'tree_gone\\?"\s*:\s*true', script.results[-1]), script.results[-1]
    assert "MCP done." in "".join(e.event.text for e in events if isinstance(e.event, TextDelta))
    procs = manager.processes_for_thread(THREAD)
    assert [(p.name, p.status) for p in procs] == [("web", "stopped")]
    assert procs[0].pid is not None and not alive(procs[0].pid)
    assert manager.guard.refused == 0
