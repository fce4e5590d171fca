"""/undo's and /redo's conversation rollback with the genuine ``opencode serve`` against the
fake Chat Completions API: the session's revert point hides the undone turns, so the model's
next request no longer holds them; unrevert (or a revert point moved later) brings them back."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_opencode_integration import OpenAIChatFake, opencode_options, running  # noqa: E402

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


async def test_undo_hides_turns_redo_brings_them_back(fake: OpenAIChatFake, tmp_path: Path) -> None:
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
        await thread.turn("and now?")
        sent = json.dumps(fake.requests[-1].body)
        assert "what do you remember?" in sent and "GAMMA-MARK" not in sent
