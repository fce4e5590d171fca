"""`!` commands in the genuine ``opencode serve``'s own shell (``POST /session/{id}/shell``)
against the fake Chat Completions API, under Spindle's shell rules (``run_in_agent``): the
output comes back (bounded) when the command is done; the time limit aborts the session's
command; the model's next request holds the command and its output."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
import trio
from test_opencode_integration import OpenAIChatFake, opencode_options, running  # noqa: E402

from threadspindle.effects.shell_command import ShellLimits, run_in_agent

pytestmark = pytest.mark.timeout(240)


@pytest.fixture
def fake() -> Iterator[OpenAIChatFake]:
    server = OpenAIChatFake()
    server.start()
    yield server
    server.stop()


async def test_a_command_in_opencode_shell_is_bounded_stopped_and_in_context(
    fake: OpenAIChatFake, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    async with running(opencode_options(fake, tmp_path / "home"), work) as thread:
        assert thread.adapter.capabilities.shell
        pieces: list[str] = []
        outcome = await run_in_agent(
            "echo SHELL-MARK; seq 1 400",
            thread.adapter.shell,
            limits=ShellLimits(timeout_s=30, piece_chars=60),
            report=lambda text, binary: pieces.append(text),
            cancel=trio.CancelScope(),
        )
        assert (outcome.outcome, outcome.exit_code) == ("exited", None)  # opencode gives none
        assert len(pieces) == 1 and "chars skipped" in pieces[0] and pieces[0].endswith("400\n")
        started = trio.current_time()
        slow = await run_in_agent(
            "sleep 30",
            thread.adapter.shell,
            limits=ShellLimits(timeout_s=1.5),
            report=lambda text, binary: None,
            cancel=trio.CancelScope(),
        )
        assert slow.outcome == "timed_out" and trio.current_time() - started < 15
        await trio.sleep(1.0)
        server = thread.adapter.server
        assert server is not None and server.process is not None
        children = psutil.Process(server.process.pid).children(recursive=True)
        assert not [p for p in children if "sleep" in " ".join(p.cmdline())]  # aborted
        await thread.turn("what did the shell print?")
        sent = json.dumps(fake.requests[-1].body)
        assert "SHELL-MARK" in sent and "seq 1 400" in sent
