"""Steering the genuine ``claude`` CLI (stream-json input) against the fake Anthropic API.

What Claude Code 2.1.197 does with a user line written while a turn runs (found with these
tests): when the turn makes another model request (after a tool), the line goes into that
request as "The user sent a new message while you were working: ..." and the turn goes on
to one ``result``; when the turn ends first, the CLI runs the line in a turn of its own
right after (a second ``system/init`` ... ``result``); after an interrupt it does the same.
With ``--replay-user-messages`` it echoes each line when it takes it, which is how the
adapter knows a steer was taken. The adapter keeps one run throughout.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio
from test_claude_integration import TURN_TIMEOUT, Session, _prompt, running_claude  # noqa: E402

from threadspindle.runtime.core.agent_events import (
    SessionStarted,
    SteerRefused,
    SteerTaken,
    TextDelta,
    ToolStarted,
    TurnAborted,
    TurnCompleted,
)
from threadspindle.runtime.core.effect_types import SteerAgent
from threadspindle.testkit.fake_model.anthropic import FakeAnthropic

pytestmark = pytest.mark.timeout(150)
STEER = "STEERED also mention bananas"


@pytest.fixture
def fake() -> object:
    server = FakeAnthropic(slow_chunks=16, slow_delay=0.15)
    server.start()
    yield server
    server.stop()


def _steer(steer_id: str, run_id: str, text: str = STEER) -> SteerAgent:
    return SteerAgent(key=f"t/steer/{steer_id}", run_id=run_id, steer_id=steer_id, text=text)


async def _until(s: Session, match, timeout: float = TURN_TIMEOUT) -> None:
    await s.wait_for(match, timeout)


def _ends(s: Session, run_id: str) -> list[object]:
    return [e for e in s.of_run(run_id) if isinstance(e, TurnCompleted | TurnAborted)]


def _bodies(fake: FakeAnthropic) -> list[str]:
    return [json.dumps(r.body) for r in fake.messages_requests()]


async def test_a_steer_during_a_tool_goes_into_the_same_turn(
    tmp_path: Path, fake: FakeAnthropic
) -> None:
    async with running_claude(tmp_path, fake) as s:
        assert s.adapter.capabilities.steer
        await s.adapter.prompt(_prompt("r1", "TOOLTEST", s.workdir))
        await _until(s, lambda e: isinstance(e.event, ToolStarted))
        await s.adapter.steer(_steer("s1", "r1"))
        await _until(s, lambda e: e.run_id == "r1" and isinstance(e.event, TurnCompleted))
        await trio.sleep(1.0)  # nothing more comes: no turn of its own for the steer
        events = s.of_run("r1")
        assert events.count(SteerTaken(steer_id="s1")) == 1
        assert events.index(SteerTaken(steer_id="s1")) < events.index(_ends(s, "r1")[0])
        assert len(_ends(s, "r1")) == 1 and s.of_run("r1").count(SteerRefused) == 0
        assert "Tool said: hi" in s.text_of("r1")
        # The model saw the steered text in the turn's second request.
        assert STEER in _bodies(fake)[-1] and len(fake.messages_requests()) == 2


async def test_a_steer_after_the_last_request_runs_on_in_the_same_run(
    tmp_path: Path, fake: FakeAnthropic
) -> None:
    async with running_claude(tmp_path, fake) as s:
        await s.adapter.prompt(_prompt("r1", "SLOWTEST", s.workdir))
        await _until(s, lambda e: isinstance(e.event, TextDelta))
        await s.adapter.steer(_steer("s1", "r1"))
        await _until(s, lambda e: e.run_id == "r1" and isinstance(e.event, TurnCompleted))
        await trio.sleep(1.0)
        events = s.of_run("r1")
        ends = _ends(s, "r1")
        assert len(ends) == 1, ends  # the CLI's two turns are one run
        assert events.index(SteerTaken(steer_id="s1")) < events.index(ends[0])
        assert s.text_of("r1").endswith("Hello from fake model.")  # the steer's answer
        assert len([e for e in events if isinstance(e, SessionStarted)]) == 2
        assert STEER in _bodies(fake)[-1]
        # Cost and duration of both CLI turns are the run's.
        assert ends[0].cost_usd is not None and ends[0].cost_usd > 0.0003
        # The next prompt is a turn of its own, as usual.
        end2 = await s.turn("r2", "hello")
        assert isinstance(end2.event, TurnCompleted) and s.text_of("r2") == "Hello from fake model."


async def test_a_steer_then_an_interrupt_refuses_the_steer_and_ends_the_run_once(
    tmp_path: Path, fake: FakeAnthropic
) -> None:
    async with running_claude(tmp_path, fake) as s:
        await s.adapter.prompt(_prompt("r1", "SLOWTEST", s.workdir))
        await _until(s, lambda e: isinstance(e.event, TextDelta))
        await s.adapter.steer(_steer("s1", "r1"))
        await s.adapter.interrupt("r1")
        await _until(s, lambda e: e.run_id == "r1" and isinstance(e.event, TurnAborted))
        await trio.sleep(1.5)  # the CLI's own turn for the steer is interrupted too
        events = s.of_run("r1")
        assert SteerRefused(steer_id="s1", reason="the turn was interrupted") in events
        assert SteerTaken(steer_id="s1") not in events
        assert len(_ends(s, "r1")) == 1 and events[-1] == _ends(s, "r1")[0]
        end2 = await s.turn("r2", "hello")
        assert isinstance(end2.event, TurnCompleted) and s.text_of("r2") == "Hello from fake model."


async def test_the_steers_turn_after_an_interrupt_ends_the_run_aborted_even_if_it_finished(
    tmp_path: Path, fake: FakeAnthropic
) -> None:
    """On a loaded machine the interrupt sent at the start of the steers' own turn can come
    after that turn's quick answer (seen once in a full test run): the run still ends
    interrupted, with nothing of that turn shown (the core sends the refused steer again as
    a prompt, so showing its answer here would answer it twice)."""
    async with running_claude(tmp_path, fake) as s:
        await s.adapter.prompt(_prompt("r1", "SLOWTEST", s.workdir))
        await _until(s, lambda e: isinstance(e.event, TextDelta))
        await s.adapter.steer(_steer("s1", "r1"))
        await s.adapter.interrupt("r1")
        sent = s.adapter._control

        async def late(sending) -> None:  # type: ignore[no-untyped-def]
            await trio.sleep(3.0)  # the next control write goes out after that turn is over
            await sent(sending)

        s.adapter._control = late  # type: ignore[method-assign]
        await _until(
            s, lambda e: e.run_id == "r1" and isinstance(e.event, TurnCompleted | TurnAborted)
        )
        s.adapter._control = sent  # type: ignore[method-assign]
        await trio.sleep(3.5)  # the late interrupt reaches an idle CLI: nothing follows
        events = s.of_run("r1")
        assert SteerRefused(steer_id="s1", reason="the turn was interrupted") in events
        assert _ends(s, "r1") == [TurnAborted(reason="interrupted")]
        assert "Hello from fake model." not in s.text_of("r1")
        assert len(_bodies(fake)) == 2 and STEER in _bodies(fake)[-1]  # the CLI did answer it
        end2 = await s.turn("r2", "hello")
        assert isinstance(end2.event, TurnCompleted) and s.text_of("r2") == "Hello from fake model."


async def test_a_steer_for_a_turn_that_is_over_is_refused(
    tmp_path: Path, fake: FakeAnthropic
) -> None:
    async with running_claude(tmp_path, fake) as s:
        await s.turn("r1", "hello")
        asked = len(fake.messages_requests())
        await s.adapter.steer(_steer("s1", "r1"))
        assert s.of_run("r1")[-1] == SteerRefused(steer_id="s1", reason="no turn")
        await trio.sleep(1.0)
        assert len(fake.messages_requests()) == asked  # nothing was written
