"""How the Claude Code adapter copes with a CLI that misbehaves in ways the genuine one
cannot be made to: a stand-in that speaks the same stream-json protocol but ignores the
in-band interrupt, or never answers ``initialize``. (The genuine CLI is in
``test_claude_integration.py``.)"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest
import trio

from threadspindle.agents.base import AgentOptions, AgentStartError, StampedEvent
from threadspindle.agents.claude import ClaudeAdapter
from threadspindle.runtime.core.agent_events import TextDelta, TurnAborted
from threadspindle.runtime.core.effect_types import PromptAgent, StartAgent

pytestmark = pytest.mark.timeout(60)

STUBBORN_CLI = """
import json, os, signal, sys, time

def out(obj):
    sys.stdout.write(json.dumps(obj) + "\\n")
    sys.stdout.flush()

def on_sigint(*_):
    out({"type": "result", "subtype": "error_during_execution", "is_error": True,
         "terminal_reason": "aborted_streaming", "session_id": "s1"})
    sys.exit(0)

signal.signal(signal.SIGINT, on_sigint)
for line in sys.stdin:
    msg = json.loads(line)
    if msg["type"] == "control_request":
        if msg["request"]["subtype"] == "initialize" and os.environ.get("STUBBORN_SILENT"):
            continue
        # Acknowledge everything, do nothing: an interrupt is ignored.
        out({"type": "control_response",
             "response": {"subtype": "success", "request_id": msg["request_id"]}})
    elif msg["type"] == "user":
        out({"type": "system", "subtype": "init", "session_id": "s1", "model": "stub"})
        out({"type": "assistant", "session_id": "s1",
             "message": {"id": "m1", "content": [{"type": "text", "text": "working"}]}})
        while True:
            time.sleep(0.1)
"""


def _stub(tmp_path: Path) -> str:
    path = tmp_path / "stubborn-claude"
    path.write_text(f"#!{sys.executable}\n{STUBBORN_CLI}")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


async def test_an_ignored_interrupt_escalates_to_sigint(tmp_path: Path) -> None:
    adapter = ClaudeAdapter(AgentOptions(binary=_stub(tmp_path), home=str(tmp_path)))
    adapter.interrupt_grace_s = 0.5
    events: list[StampedEvent] = []

    async def emit(stamped: StampedEvent) -> None:
        events.append(stamped)

    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            await nursery.start(
                adapter.serve, StartAgent(agent="claude", workdir=str(tmp_path)), emit
            )
            prompt = PromptAgent(run_id="r1", text="go", agent="claude", workdir=str(tmp_path))
            await adapter.prompt(prompt)
            while not any(isinstance(s.event, TextDelta) for s in events):
                await trio.sleep(0.02)
            pid = adapter._proc.pid
            await adapter.interrupt("r1")
            # serve returns once the CLI has exited after SIGINT.
    ends = [s for s in events if isinstance(s.event, TurnAborted)]
    assert [(s.run_id, s.event.reason) for s in ends] == [("r1", "interrupted")]
    assert adapter.interrupt_escalations == 1
    assert adapter._proc.returncode == 0
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


async def test_a_cli_that_never_gets_ready_times_out(tmp_path: Path) -> None:
    options = AgentOptions(
        binary=_stub(tmp_path), start_timeout_s=1.0, env=(("STUBBORN_SILENT", "1"),)
    )
    adapter = ClaudeAdapter(options)

    async def emit(stamped: StampedEvent) -> None:
        raise AssertionError("nothing may be emitted")

    with trio.fail_after(20), pytest.raises(AgentStartError, match="did not answer within 1 s"):
        await adapter.serve(StartAgent(agent="claude", workdir=str(tmp_path)), emit)
    assert adapter.stopped_clean is True  # the silent process was stopped, not left behind
