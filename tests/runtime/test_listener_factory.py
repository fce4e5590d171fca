"""An adapter the factory cannot make (issue 19.4: an unknown agent name recorded in an old
log, or options that do not validate) is a notice in its own thread: the runtime, the
thread and every other thread go on."""

from __future__ import annotations

from pathlib import Path

from runtime_harness import Chat, running, until

from threadspindle.agents import adapter_class
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
