"""Steering through the live runtime: chat actions in, the scripted fake agent (which
declares whether it can steer), the recording renderer, a real SQLite log."""

from __future__ import annotations

import pytest
import trio
from runtime_harness import Chat, running, until

from threadspindle.runtime.core import actions as A
from threadspindle.runtime.core.model import AgentCapabilities
from threadspindle.testkit.fake_agent import FakeAgentWorld


@pytest.fixture
def autojump(autojump_clock: trio.testing.MockClock) -> trio.testing.MockClock:
    return autojump_clock


async def _steer(chat: Chat, text: str) -> None:
    await chat.send(A.SteerCommand(**chat._base(), author_id="u1", author_name="alice", text=text))


async def test_a_steer_reaches_the_running_turn_which_goes_on(tmp_path, autojump) -> None:
    async with running(tmp_path) as rt:
        chat = Chat(rt, "t1", str(tmp_path))
        await chat.start()
        await chat.say("SLOW work")
        await until(lambda: any("chunk1" in t for t in rt.chat.texts("t1", "text")))
        assert rt.snapshot("t1").capabilities == AgentCapabilities(steer=True)
        await _steer(chat, "also add tests")
        await until(lambda: rt.snapshot("t1").run is None)
        state = rt.snapshot("t1")
        assert rt.agents.steered == [("r1", "also add tests")]
        assert rt.agents.interrupts == []  # the turn was not aborted
        assert [t for t, _ in rt.agents.delivered] == ["r1"]  # nor the text sent again
        assert state.counters.completed == 1 and state.counters.steers_taken == 1
        markers = rt.chat.texts("t1", "marker")
        assert markers == ["↪ alice (added to this turn): also add tests"]


async def test_an_agent_that_cannot_steer_is_interrupted_and_gets_it_as_a_prompt(
    tmp_path, autojump
) -> None:
    async with running(tmp_path, agents=FakeAgentWorld(can_steer=False)) as rt:
        chat = Chat(rt, "t1", str(tmp_path))
        await chat.start()
        await chat.say("SLOW work")
        await until(lambda: any("chunk1" in t for t in rt.chat.texts("t1", "text")))
        await _steer(chat, "also add tests")
        await until(lambda: rt.snapshot("t1").counters.completed == 1)
        assert rt.agents.steered == []
        assert rt.agents.interrupts == ["r1"]
        assert [t for _, t in rt.agents.delivered] == ["SLOW work", "also add tests"]
        replies = rt.chat.texts("t1", None)
        assert any("cannot add to a running turn" in t for t in replies)
