"""`!` commands in the genuine ``codex app-server``'s own shell (``thread/shellCommand``)
against the fake Responses API, under Spindle's shell rules (``run_in_agent``): the output
streams in bounded pieces with the exit code; the time limit interrupts the command's turn and
codex goes on; the model's next request holds the command and its output."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
import trio
from test_codex_integration import running  # noqa: E402

from threadspindle.effects.shell_command import ShellLimits, run_in_agent
from threadspindle.runtime.core.agent_events import TurnCompleted
from threadspindle.testkit.fake_model.openai_responses import OpenAIResponsesFake
from threadspindle.testkit.genuine_clis import codex_options

pytestmark = pytest.mark.timeout(150)


@pytest.fixture
def fake() -> Iterator[OpenAIResponsesFake]:
    server = OpenAIResponsesFake()
    server.start()
    yield server
    server.stop()


async def test_a_command_in_codex_shell_streams_stops_and_stays_in_context(
    fake: OpenAIResponsesFake, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    async with running(codex_options(fake.base_url, tmp_path / "home"), work) as s:
        assert s.adapter.capabilities.shell
        pieces: list[str] = []
        limits = ShellLimits(timeout_s=20, flush_s=0.1, piece_chars=50)
        command = "echo SHELL-MARK; seq 1 400; echo err >&2; exit 3"
        outcome = await run_in_agent(
            command,
            s.adapter.shell,
            limits=limits,
            report=lambda text, binary: pieces.append(text),
            cancel=trio.CancelScope(),
        )
        assert (outcome.outcome, outcome.exit_code) == ("exited", 3)
        assert all(len(p) <= 50 + 40 for p in pieces)  # bounded (plus the skipped count)
        assert "chars skipped" in "".join(pieces) and pieces[-1].rstrip().endswith("err")
        # The time limit stops a long command: its turn is interrupted, codex goes on.
        started = trio.current_time()
        slow = await run_in_agent(
            "sleep 30",
            s.adapter.shell,
            limits=ShellLimits(timeout_s=1.5),
            report=lambda text, binary: None,
            cancel=trio.CancelScope(),
        )
        assert slow.outcome == "timed_out" and trio.current_time() - started < 10
        await trio.sleep(0.5)
        children = psutil.Process(s.adapter.pid).children(recursive=True)
        assert not [p for p in children if "sleep" in " ".join(p.cmdline())]  # the tree is gone
        assert s.events == [] or all(e.run_id is None for e in s.events)  # no run's events
        end = await s.turn("r1", "what did the shell print?")
        assert isinstance(end.event, TurnCompleted) and not end.event.is_error
        sent = json.dumps([r.body for r in fake.requests if r.path.endswith("/responses")][-1])
        assert "SHELL-MARK" in sent and "seq 1 400" in sent
