"""/undo's conversation rollback with the genuine ``codex app-server`` against the fake
Responses API: ``thread/revert`` drops the run's turn (and later ones) from the thread, so the
model's next request no longer holds it; after a restart the turn is found by
``thread/turns/list``; codex cannot bring a turn back (no /redo)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_codex_integration import running  # noqa: E402

from threadspindle.runtime.core.effect_types import RollbackAgent, StartAgent
from threadspindle.testkit.fake_model.openai_responses import OpenAIResponsesFake
from threadspindle.testkit.genuine_clis import codex_options

pytestmark = pytest.mark.timeout(150)


@pytest.fixture
def fake() -> Iterator[OpenAIResponsesFake]:
    server = OpenAIResponsesFake()
    server.start()
    yield server
    server.stop()


def _rollback(op: str, run_id: str, turns: int, work: Path) -> RollbackAgent:
    start = StartAgent(agent="codex", workdir=str(work))
    return RollbackAgent(job_id="j", op=op, run_id=run_id, turns=turns, start=start)  # type: ignore[arg-type]


def _last_request(fake: OpenAIResponsesFake) -> str:
    return json.dumps([r.body for r in fake.requests if r.path.endswith("/responses")][-1])


async def test_undo_drops_the_turn_from_the_thread_also_after_a_restart(
    fake: OpenAIResponsesFake, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    options = codex_options(fake.base_url, tmp_path / "home")
    async with running(options, work) as s:
        caps = s.adapter.capabilities
        assert caps.rollback and not caps.restore
        await s.turn("r1", "remember ALPHA-MARK")
        await s.turn("r2", "remember BETA-MARK")
        await s.adapter.rollback(_rollback("undo", "r2", 1, work))
        end = await s.turn("r3", "remember GAMMA-MARK")
        thread = end.session_id
        sent = _last_request(fake)
        assert "ALPHA-MARK" in sent and "GAMMA-MARK" in sent and "BETA-MARK" not in sent
        with pytest.raises(Exception, match="cannot roll"):
            await s.adapter.rollback(_rollback("redo", "r2", 0, work))
    # A new process on the same thread: the run's turn is the newest one it lists.
    async with running(options, work, session_id=thread) as s:
        await s.adapter.rollback(_rollback("undo", "r3", 1, work))
        await s.turn("r4", "what do you remember?")
        sent = _last_request(fake)
        assert "ALPHA-MARK" in sent and "GAMMA-MARK" not in sent and "BETA-MARK" not in sent
        with pytest.raises(Exception, match="no turn 5 back"):
            await s.adapter.rollback(_rollback("undo", "r0", 5, work))
