"""/undo's and /redo's conversation rollback and `!` in the session's own shell, with the
genuine ``opencode serve`` against the fake Chat Completions API (one server start for both).

Rollback: the session's revert point hides the undone turns, so the model's next request no
longer holds them; unrevert (or a revert point moved later) brings them back. Shell
(``POST /session/{id}/shell`` under Spindle's rules, ``run_in_agent``): the output comes back
bounded when the command is done; the time limit aborts the command (its process is gone);
the model's next request holds the command and its output."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
import trio
from test_opencode_integration import OpenAIChatFake, opencode_options, running  # noqa: E402

from threadspindle.effects.shell_command import ShellLimits, run_in_agent
from threadspindle.runtime.core.effect_types import RollbackAgent, StartAgent

pytestmark = pytest.mark.timeout(240)


@pytest.fixture
def fake() -> Iterator[OpenAIChatFake]:
    server = OpenAIChatFake()
    server.start()
    yield server
    server.stop()


def _rollback(op: str, run_id: str, turns: int, work: Path) -> RollbackAgent:
    start = StartAgent(agent="opencode", workdir=str(work))
    return RollbackAgent(job_id="j", op=op, run_id=run_id, turns=turns, start=start)  # type: ignore[arg-type]


async def _hidden(thread) -> list[str]:  # type: ignore[no-untyped-def]
    """The user texts after the session's revert point (what the next prompt drops)."""
    server, session = thread.adapter._server, thread.adapter._session_id
    users, point = await thread.adapter._user_messages(server, session)
    return users[users.index(point) :] if point in users else []


async def test_undo_hides_turns_redo_brings_them_back_and_a_shell_command(
    fake: OpenAIChatFake, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    async with running(opencode_options(fake, tmp_path / "home"), work) as thread:
        caps = thread.adapter.capabilities
        assert caps.rollback and caps.restore
        for mark in ("ALPHA-MARK", "BETA-MARK", "GAMMA-MARK"):
            await thread.turn(f"remember {mark}")
        # /undo twice (GAMMA, then BETA), /redo once (BETA back, GAMMA still hidden).
        await thread.adapter.rollback(_rollback("undo", "r3", 1, work))
        assert len(await _hidden(thread)) == 1
        await thread.adapter.rollback(_rollback("undo", "r2", 1, work))
        assert len(await _hidden(thread)) == 2
        await thread.adapter.rollback(_rollback("redo", "r2", 1, work))
        assert len(await _hidden(thread)) == 1
        await thread.turn("what do you remember?")
        sent = json.dumps(fake.requests[-1].body)
        assert "ALPHA-MARK" in sent and "BETA-MARK" in sent and "GAMMA-MARK" not in sent
        # The next prompt dropped the hidden turn for good; undo then redo the last one.
        await thread.adapter.rollback(_rollback("undo", "r4", 1, work))
        assert len(await _hidden(thread)) == 1
        await thread.adapter.rollback(_rollback("redo", "r4", 0, work))
        assert await _hidden(thread) == []
        with pytest.raises(RuntimeError, match="hidden turns"):
            await thread.adapter.rollback(_rollback("redo", "r4", 0, work))
        await _shell_in_the_session(thread)
        await thread.turn("and now?")
        sent = json.dumps(fake.requests[-1].body)
        assert "what do you remember?" in sent and "GAMMA-MARK" not in sent
        assert "SHELL-MARK" in sent and "seq 1 400" in sent  # the command is in its context


async def _shell_in_the_session(thread) -> None:  # type: ignore[no-untyped-def]
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
