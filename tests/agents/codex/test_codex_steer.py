"""Steering the genuine ``codex app-server`` (``turn/steer``) against the fake Responses API:
the steered text reaches the model inside the running turn, which is not aborted; a steer
for a turn that is over is refused; per turn (``codex exec``) it cannot steer at all. And
``/compact`` (``thread/compact/start``): codex's own compaction, a turn of its own."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio
from test_codex_integration import TURN_TIMEOUT, running  # noqa: E402

from threadspindle.agents.base import AgentStartError
from threadspindle.agents.codex import CodexAdapter
from threadspindle.runtime.core.agent_events import (
    SteerRefused,
    SteerTaken,
    TextDelta,
    TurnCompleted,
)
from threadspindle.runtime.core.effect_types import PromptAgent, SteerAgent
from threadspindle.testkit.fake_model.openai_responses import OpenAIResponsesFake
from threadspindle.testkit.genuine_clis import codex_options

pytestmark = pytest.mark.timeout(150)


@pytest.fixture
def fake() -> Iterator[OpenAIResponsesFake]:
    server = OpenAIResponsesFake(slow_delay=0.1, slow_chunks=30)
    server.start()
    yield server
    server.stop()


def _steer(steer_id: str, run_id: str, text: str) -> SteerAgent:
    return SteerAgent(key=f"t/steer/{steer_id}", run_id=run_id, steer_id=steer_id, text=text)


def _inputs(fake: OpenAIResponsesFake) -> list[str]:
    return [json.dumps(r.body) for r in fake.requests if r.path.endswith("/responses")]


async def test_a_steer_reaches_the_model_within_the_running_turn(
    fake: OpenAIResponsesFake, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    async with running(codex_options(fake.base_url, tmp_path / "home"), work) as s:
        assert s.adapter.capabilities.steer
        await s.adapter.prompt(
            PromptAgent(run_id="r1", text="SLOWTEST", agent="codex", workdir=str(work))
        )
        with trio.fail_after(TURN_TIMEOUT):
            while len(s.of("r1", TextDelta)) < 3:
                await trio.sleep(0.01)
        await s.adapter.steer(_steer("s1", "r1", "STEERED also mention bananas"))
        end = await s.turn_end("r1")
        events = [e.event for e in s.events if e.run_id == "r1"]
        taken = [i for i, e in enumerate(events) if isinstance(e, SteerTaken)]
        assert [events[i] for i in taken] == [SteerTaken(steer_id="s1")]
        assert taken[0] < events.index(end.event)  # told before the turn's end
        assert isinstance(end.event, TurnCompleted), end.event  # not aborted
        assert s.of("r1", SteerRefused) == []
        # The model got the steered text in a request of the same turn.
        assert any("STEERED also mention bananas" in body for body in _inputs(fake))
        # A steer for a turn that is over is refused, and nothing is sent.
        sent = len(_inputs(fake))
        await s.adapter.steer(_steer("s2", "r1", "too late"))
        assert s.of("r1", SteerRefused) == [SteerRefused(steer_id="s2", reason="no turn")]
        await trio.sleep(0.5)
        assert len(_inputs(fake)) == sent


async def test_per_turn_codex_cannot_steer(fake: OpenAIResponsesFake, tmp_path: Path) -> None:
    adapter = CodexAdapter(codex_options(fake.base_url, tmp_path / "home", per_turn=True))
    assert not adapter.capabilities.steer
    with pytest.raises(AgentStartError):
        await adapter.steer(_steer("s1", "r1", "x"))


async def test_compact_runs_codex_own_compaction_as_a_turn(
    fake: OpenAIResponsesFake, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    async with running(codex_options(fake.base_url, tmp_path / "home"), work) as s:
        assert s.adapter.capabilities.compact
        await s.turn("r1", "hello")
        asked = len(_inputs(fake))
        await s.adapter.prompt(
            PromptAgent(
                run_id="r2", text="/compact", agent="codex", workdir=str(work), command="compact"
            )
        )
        end = await s.turn_end("r2")
        assert isinstance(end.event, TurnCompleted) and not end.event.is_error, end.event
        compaction = _inputs(fake)[asked:]
        assert len(compaction) == 1  # one model call: the summary, asked as a compaction
        assert '\\"request_kind\\":\\"compaction\\"' in compaction[0]
        assert '\\"reason\\":\\"user_requested\\"' in compaction[0]
        end3 = await s.turn("r3", "hello again")
        assert isinstance(end3.event, TurnCompleted) and s.text("r3") == "Hello from fake model."
        # After compaction the model is sent the summary, not the whole history.
        assert "Hello from fake model." in _inputs(fake)[-1]


async def test_fork_continues_a_copy_of_the_thread_under_a_new_id(
    fake: OpenAIResponsesFake, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    opts = codex_options(fake.base_url, tmp_path / "home")
    async with running(opts, work) as s:
        assert s.adapter.capabilities.fork
        end = await s.turn("r1", "remember ORIGINAL-MARK")
        original = end.session_id
    async with running(opts, work, session_id=original, fork=True) as forked:
        end = await forked.turn("r1", "what did I say?")
        assert end.session_id and end.session_id != original
        last = _inputs(fake)[-1]
        assert "ORIGINAL-MARK" in last and "what did I say?" in last
    async with running(opts, work, session_id=original) as again:
        end = await again.turn("r1", "and now?")
        assert end.session_id == original
        last = _inputs(fake)[-1]
        assert "ORIGINAL-MARK" in last and "what did I say?" not in last
