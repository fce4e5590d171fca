"""An adapter the factory cannot make (issue 19.4: an unknown agent name recorded in an old
log, or options that do not validate) is a notice in its own thread: the runtime, the
thread and every other thread go on."""

from __future__ import annotations

from pathlib import Path

from runtime_harness import Chat, running, until

from threadspindle.agents import adapter_class
from threadspindle.agents.base import AgentOptions
from threadspindle.runtime.core.effect_types import StartAgent
from threadspindle.testkit.fake_agent import FakeAgentWorld, ScriptedAgent


async def test_an_unknown_agent_is_a_notice_not_a_crash(tmp_path: Path, autojump_clock) -> None:
    agents = FakeAgentWorld()

    def factory(start: StartAgent, thread_id: str) -> ScriptedAgent:
        if start.agent != "fake":
            adapter_class(start.agent)  # the real registry: "bogus" raises UnknownAgent here
        return agents.factory(start, thread_id)

    async with running(tmp_path, agents=agents, adapter_factory=factory) as rt:
        broken = Chat(rt, "broken", str(tmp_path))
        other = Chat(rt, "other", str(tmp_path))
        await broken.start("bogus")
        await until(
            lambda: any(
                "could not start" in t and "unknown agent 'bogus'" in t
                for t in rt.chat.texts("broken")
            )
        )
        await broken.say("hello")
        await until(lambda: rt.snapshot("broken").counters.failed == 1)
        said = rt.chat.texts("broken")
        assert any("could not take the prompt" in t and "expected one of" in t for t in said)
        assert rt.statistics("broken").actor_running
        # Another thread is untouched, and the broken one recovers with a known agent.
        await other.start()
        await other.say("hi")
        await until(lambda: rt.snapshot("other").counters.completed == 1)
        await broken.start("fake")
        await broken.say("hello again")
        await until(lambda: rt.snapshot("broken").counters.completed == 1)


class MissingBinary(ScriptedAgent):
    """An agent whose CLI is not installed: every start fails, as Claude Code's does."""

    async def serve(self, start, emit, task_status=None) -> None:  # type: ignore[override]
        self.world.serve_calls += 1
        raise RuntimeError("'claude' is not an executable")


async def test_a_new_conversation_does_not_wait_out_the_failed_agents_backoff(
    tmp_path: Path, autojump_clock
) -> None:
    """An agent that cannot start backs off (30 s here) before it is tried again. A new
    conversation with another agent starts at once: before, it was refused with the old
    agent's error ("next start in 30 s"), and once the wait was over the old agent was
    started again, as if the conversation had not changed."""
    import trio

    from threadspindle.runtime.live.listener import Backoff

    agents = FakeAgentWorld()

    def factory(start: StartAgent, thread_id: str) -> ScriptedAgent:
        if start.agent == "missing":
            return MissingBinary(AgentOptions(), world=agents)
        return agents.factory(start, thread_id)

    async with running(
        tmp_path, agents=agents, adapter_factory=factory, backoff=lambda: Backoff(initial_s=30.0)
    ) as rt:
        chat = Chat(rt, "t", str(tmp_path))
        await chat.start("missing")
        await chat.say("hello")
        await until(lambda: rt.snapshot("t").counters.failed == 1)
        assert rt.get("t").listener.backing_off
        switched = trio.current_time()
        await chat.start("fake")
        await chat.say("hello again")
        await until(lambda: rt.snapshot("t").counters.completed == 1)
        assert trio.current_time() - switched < 5.0  # not after the 30 s backoff
        said = rt.chat.texts("t")
        after = said[[i for i, t in enumerate(said) if "Started fake" in t][-1] :]
        assert not any("could not" in t for t in after), after
        assert [s.agent for s in agents.starts] == ["fake"]  # "missing" never started again
