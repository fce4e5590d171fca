"""The generic command adapter with real processes (``cat``, small Python scripts), its
line parser, and the adapter registry that finds it by name."""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

import psutil
import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from threadspindle.agents import ADAPTERS, adapter_class
from threadspindle.agents.base import AgentOptions, AgentStartError, StampedEvent
from threadspindle.agents.claude import ClaudeAdapter
from threadspindle.agents.command import CommandAdapter
from threadspindle.agents.command.parser import CommandLineParser
from threadspindle.effects.process import ManagedProcess
from threadspindle.runtime.core.agent_events import (
    AgentError,
    SessionStarted,
    TextDelta,
    ThinkingDelta,
    ToolFinished,
    ToolStarted,
    TurnAborted,
    TurnCompleted,
)
from threadspindle.runtime.core.effect_types import PromptAgent, StartAgent
from threadspindle.testkit.late_reader import lines_after_exit

pytestmark = pytest.mark.timeout(60)

JSON_AGENT = r"""
import json, os, sys
prompt = sys.stdin.read()
def out(**kw):
    print(json.dumps(kw), flush=True)
out(type="session", id="sess-" + os.environ["SPINDLE_RUN_ID"], model="tiny")
out(type="thinking", text="reading the prompt")
out(type="tool_start", id="t1", name="mcp__files__read_file", input={"path": "x"})
out(type="tool_end", id="t1", result="contents", is_error=False)
print("cwd=" + os.getcwd())
out(type="text", text="you said: " + prompt)
out(type="text", text=5)
out(type="weird")
out(type="error", message="a warning", retryable=True)
out(type="result", cost_usd=0.5, model="tiny-1")
"""


class Collector:
    def __init__(self) -> None:
        self.events: list[StampedEvent] = []
        self.changed = trio.Event()

    async def emit(self, stamped: StampedEvent) -> None:
        self.events.append(stamped)
        self.changed.set()

    async def end_of(self, run_id: str, timeout: float = 20) -> StampedEvent:
        with trio.fail_after(timeout):
            while True:
                for s in self.events:
                    if s.run_id == run_id and isinstance(s.event, TurnCompleted | TurnAborted):
                        return s
                self.changed = trio.Event()
                await self.changed.wait()

    def of(self, run_id: str) -> list[object]:
        return [s.event for s in self.events if s.run_id == run_id]


def _prompt(run_id: str, text: str, workdir: Path) -> PromptAgent:
    return PromptAgent(run_id=run_id, text=text, agent="command", workdir=str(workdir))


async def _serve(
    nursery: trio.Nursery, options: AgentOptions, workdir: Path
) -> tuple[CommandAdapter, Collector]:
    adapter = CommandAdapter(options)
    collector = Collector()
    start = StartAgent(agent="command", workdir=str(workdir))
    await nursery.start(adapter.serve, start, collector.emit)
    return adapter, collector


async def test_cat_echoes_text_lines(tmp_path: Path) -> None:
    async with trio.open_nursery() as nursery:
        adapter, got = await _serve(nursery, AgentOptions(binary="cat"), tmp_path)
        await adapter.prompt(_prompt("r1", "hello\nworld", tmp_path))
        end = await got.end_of("r1")
        assert [e.text for e in got.of("r1") if isinstance(e, TextDelta)] == ["hello\n", "world\n"]
        assert isinstance(end.event, TurnCompleted) and end.event.duration_ms is not None
        await adapter.prompt(_prompt("r2", "again", tmp_path))
        await got.end_of("r2")
        assert adapter.processes_started == 2  # one process per turn
        await adapter.stop()


async def test_json_lines_become_events(tmp_path: Path) -> None:
    script = tmp_path / "agent.py"
    script.write_text(JSON_AGENT)
    work = tmp_path / "work"
    work.mkdir()
    options = AgentOptions(binary=f"{sys.executable} {script}")
    async with trio.open_nursery() as nursery:
        adapter, got = await _serve(nursery, options, work)
        await adapter.prompt(_prompt("r1", "ping", work))
        end = await got.end_of("r1")
        await adapter.stop()
    events = got.of("r1")
    assert events[0] == SessionStarted(session_id="sess-r1", model="tiny")
    assert ThinkingDelta(text="reading the prompt") in events
    started = next(e for e in events if isinstance(e, ToolStarted))
    assert started.display_name == "Files · Read File" and started.input_summary == '{"path": "x"}'
    assert ToolFinished(tool_id="t1", result="contents") in events
    texts = [e.text for e in events if isinstance(e, TextDelta)]
    assert texts == [f"cwd={work}\n", "you said: ping"]
    assert AgentError(message="a warning", retryable=True) in events
    assert isinstance(end.event, TurnCompleted)
    assert end.event.cost_usd == 0.5 and end.event.model == "tiny-1"
    assert end.session_id == end.event.session_id == "sess-r1"
    stats = adapter.statistics()
    assert stats.malformed == 1  # {"type": "text", "text": 5}
    assert stats.skipped_types == {"weird": 1, "result": 1}


async def test_a_node_command_s_last_burst_survives_a_reader_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A command that exits at its turn's end says its last lines just before. Node queues
    what its stdout pipe cannot take and drops the queue at exit: with the reader behind
    (here: it reads only once the command is gone) a 64 KiB pipe kept a third of this
    answer. The turn's pipe has room for it (``TURN_STDOUT_BYTES``)."""
    node = shutil.which("node")
    assert node is not None, "node comes with the agent CLIs (make agents)"
    script = tmp_path / "burst.js"
    script.write_text(
        "for (let i = 0; i < 2000; i++)"
        " process.stdout.write('line ' + i + ' ' + 'x'.repeat(90) + '\\n');"
        "process.exit(0);"
    )

    monkeypatch.setattr(ManagedProcess, "stdout_lines", lines_after_exit)
    async with trio.open_nursery() as nursery:
        adapter, got = await _serve(nursery, AgentOptions(binary=f"{node} {script}"), tmp_path)
        await adapter.prompt(_prompt("r1", "go", tmp_path))
        end = await got.end_of("r1")
        await adapter.stop()
    texts = [e.text for e in got.of("r1") if isinstance(e, TextDelta)]
    assert len(texts) == 2000 and texts[-1].startswith("line 1999 ")
    assert isinstance(end.event, TurnCompleted)


async def test_failing_command_aborts_with_code_and_stderr(tmp_path: Path) -> None:
    options = AgentOptions(binary="sh -c", extra_args=("echo partial; echo boom >&2; exit 3",))
    async with trio.open_nursery() as nursery:
        adapter, got = await _serve(nursery, options, tmp_path)
        await adapter.prompt(_prompt("r1", "x", tmp_path))
        end = await got.end_of("r1")
        await adapter.stop()
    assert isinstance(end.event, TurnAborted)
    assert end.event.exit_code == 3 and "boom" in end.event.stderr_tail
    assert TextDelta(text="partial\n") in got.of("r1")


async def test_interrupt_stops_the_process_tree_and_the_next_turn_runs(tmp_path: Path) -> None:
    script = tmp_path / "slow.py"
    script.write_text(
        "import subprocess, sys, time\n"
        "if sys.stdin.read() == 'quick':\n"
        "    print('quick answer')\n"
        "    sys.exit(0)\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "print(child.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    options = AgentOptions(binary=f"{sys.executable} {script}", stop_grace_s=1.0)
    async with trio.open_nursery() as nursery:
        adapter, got = await _serve(nursery, options, tmp_path)
        await adapter.prompt(_prompt("r1", "", tmp_path))
        with trio.fail_after(15):
            while not got.of("r1"):
                await trio.sleep(0.02)
        grandchild = int(got.of("r1")[0].text)
        began = time.monotonic()
        await adapter.interrupt("r1")
        end = await got.end_of("r1")
        assert time.monotonic() - began < 5
        assert isinstance(end.event, TurnAborted) and end.event.reason == "interrupted"
        assert not psutil.pid_exists(grandchild) or psutil.Process(grandchild).status() == "zombie"
        await adapter.prompt(_prompt("r2", "quick", tmp_path))  # the next turn runs normally
        after = await got.end_of("r2")
        assert isinstance(after.event, TurnCompleted)
        assert got.of("r2")[0] == TextDelta(text="quick answer\n")
        await adapter.stop()


async def test_missing_command_is_a_clear_error(tmp_path: Path) -> None:
    adapter = CommandAdapter(AgentOptions(binary="/nonexistent/spindle-agent"))
    start = StartAgent(agent="command", workdir=str(tmp_path))
    with pytest.raises(AgentStartError, match="command not found"):
        await adapter.serve(start, Collector().emit)


def test_plain_and_json_lines() -> None:
    parser = CommandLineParser()
    assert parser.feed("{not json").events == [TextDelta(text="{not json\n")]
    assert parser.feed('{"no_type": 1}').events == [TextDelta(text='{"no_type": 1}\n')]
    assert parser.feed(json.dumps({"type": "tool_end", "id": "t", "is_error": "yes"})).events == []
    assert parser.stats.malformed == 1 and parser.stats.lines == 3


@given(
    st.lists(
        st.text(max_size=100)
        | st.dictionaries(st.text(max_size=8), st.none() | st.integers() | st.text(max_size=8)).map(
            json.dumps
        ),
        max_size=20,
    )
)
def test_fuzz_command_parser_never_raises(lines: list[str]) -> None:
    parser = CommandLineParser()
    for line in lines:
        before = (parser.stats.events, parser.stats.skipped, parser.stats.malformed)
        events = parser.feed(line).events
        assert (
            events or (parser.stats.events, parser.stats.skipped, parser.stats.malformed) != before
        )
    assert parser.stats.lines == len(lines)


def test_registry_finds_adapters_by_name() -> None:
    assert adapter_class("claude") is ClaudeAdapter
    assert ADAPTERS["command"] is CommandAdapter
    assert "claude" in ADAPTERS and "command" in list(ADAPTERS)
    with pytest.raises(KeyError):
        adapter_class("no-such-agent")
    with pytest.raises(KeyError):
        ADAPTERS["../evil"]


def test_agents_do_not_inherit_spindle_secrets(monkeypatch):
    from threadspindle.agents.base import agent_environment

    monkeypatch.setenv("SPINDLE_DISCORD_TOKEN", "secret.token.value")
    monkeypatch.setenv("SPINDLE_MCP__TOKEN", "another-secret")
    monkeypatch.setenv("SPINDLE_CLUSTER__PASSWORD", "the-nats-servers-password")
    monkeypatch.setenv("KEEP_ME", "1")
    env = agent_environment()
    assert "SPINDLE_DISCORD_TOKEN" not in env and "SPINDLE_MCP__TOKEN" not in env
    assert "the-nats-servers-password" not in env.values()
    assert env["KEEP_ME"] == "1"
