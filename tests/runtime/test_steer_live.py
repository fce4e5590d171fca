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
        assert rt.snapshot("t1").capabilities == AgentCapabilities(
            steer=True, compact=True, fork=True
        )
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


async def test_btw_opens_a_forked_thread_with_the_question_while_the_run_goes_on(
    tmp_path, autojump
) -> None:
    opened: list[tuple[str, str]] = []

    async def opener(source: str, title: str) -> tuple[str, str]:
        opened.append((source, title))
        return "t2", "<#t2>"

    async with running(tmp_path, thread_opener=opener) as rt:
        chat = Chat(rt, "t1", str(tmp_path))
        await chat.start()
        await chat.say("hello")
        await until(lambda: rt.snapshot("t1").counters.completed == 1)
        session = rt.snapshot("t1").conversation.session_id
        await chat.say("SLOW work")
        await until(lambda: any("chunk1" in t for t in rt.chat.texts("t1", "text")))
        await chat.send(
            A.ForkRequested(**chat._base(), author_id="u1", author_name="alice", question="why?")
        )
        await until(
            lambda: (
                (rt.snapshot("t2") or rt.snapshot("t1")).counters.completed >= 1
                and rt.snapshot("t2") is not None
                and rt.snapshot("t2").counters.completed == 1
            )
        )
        assert opened == [("t1", "btw: why?")]
        assert rt.agents.forks == [session]
        fork = rt.snapshot("t2").conversation
        assert fork.session_id not in (None, session) and fork.fork_of is None
        assert ("r1", "why?") in [(r, t) for r, t in rt.agents.delivered if t == "why?"]
        # The main run was not touched: it is still going, never interrupted.
        main = rt.snapshot("t1")
        assert main.run is not None and main.run.id == "r2" and rt.agents.interrupts == []
        assert any("Forked into <#t2>" in t for t in rt.chat.texts("t1", None))


async def test_fork_without_a_platform_opener_says_so(tmp_path, autojump) -> None:
    async with running(tmp_path) as rt:
        chat = Chat(rt, "t1", str(tmp_path))
        await chat.start()
        await chat.say("hello")
        await until(lambda: rt.snapshot("t1").counters.completed == 1)
        await chat.send(A.ForkRequested(**chat._base(), author_id="u1"))
        await until(lambda: any("Could not open a thread" in t for t in rt.chat.texts("t1", None)))
