"""The reactor's two lanes: agent effects never wait behind chat effects, each lane keeps
commit order, and a prompt of a run the core already ended is still not sent.

The runtime is the real one (real SQLite log, scripted fake agent); the renderer is the
recording one, made to block on one kind of chat effect for 30 s the way a long Discord
429 ``retry_after`` holds the stream renderer. trio's MockClock jumps over the waits, so a
delay shows as trio time, not as wall time."""

from __future__ import annotations

import pytest
import trio
from runtime_harness import Chat, running, until

from threadspindle.agents.base import AgentOptions
from threadspindle.runtime.core import actions as A
from threadspindle.runtime.core.effect_types import Effect, ReplyToCommand, StartAgent
from threadspindle.testkit.fake_agent import FakeAgentWorld, ScriptedAgent
from threadspindle.testkit.fake_chat import RecordingRenderer, RenderWorld

BLOCK_S = 30.0


@pytest.fixture
def autojump(autojump_clock: trio.testing.MockClock) -> trio.testing.MockClock:
    return autojump_clock


class StuckChat(RenderWorld):
    """A chat whose renderer, once armed, holds every ``ReplyToCommand`` for 30 s."""

    armed = False
    replies_done: list[float]

    def __init__(self) -> None:
        super().__init__()
        self.replies_done = []

    def renderer(self, thread_id: str) -> RecordingRenderer:
        world = self

        class Stuck(RecordingRenderer):
            async def apply(self, effect: Effect) -> list[tuple[str, tuple[str, ...]]]:
                if world.armed and isinstance(effect, ReplyToCommand):
                    await trio.sleep(BLOCK_S)
                    posted = await super().apply(effect)
                    world.replies_done.append(trio.current_time())
                    return posted
                return await super().apply(effect)

        return Stuck(thread_id, self)


class TimedAgents(FakeAgentWorld):
    """Records the trio time of every interrupt the agent receives."""

    def __init__(self) -> None:
        super().__init__()
        self.interrupt_times: list[float] = []

    def factory(self, start: StartAgent, thread_id: str) -> ScriptedAgent:
        world = self

        class Timed(ScriptedAgent):
            async def interrupt(self, run_id: str) -> None:
                world.interrupt_times.append(trio.current_time())
                await super().interrupt(run_id)

        adapter = Timed(AgentOptions(), world=self)
        self.adapters.append(adapter)
        return adapter


async def test_an_abort_is_not_held_behind_a_stuck_chat_effect(tmp_path, autojump) -> None:
    chat_world, agents = StuckChat(), TimedAgents()
    async with running(tmp_path, chat=chat_world, agents=agents) as rt:
        chat = Chat(rt, "t1", str(tmp_path))
        await chat.start()
        await chat.say("please SILENT")  # a turn that runs until interrupted
        await until(lambda: agents.delivered != [], step=0.01)
        chat_world.armed = True
        seen_before = len(chat_world.of_thread("t1"))
        t0 = trio.current_time()
        # /status first: its reply is the chat effect stuck in a 30 s "rate limit" ...
        await chat.send(A.StatusRequested(**chat._base()))
        # ... then /abort, committed after it.
        await chat.abort()
        await until(lambda: agents.interrupts != [], step=0.01)
        assert agents.interrupt_times[0] - t0 < 1.0  # applied at once, not after 30 s
        assert rt.get("t1").reactor.statistics().chat_pending >= 1  # the reply still waits
        await until(lambda: rt.get("t1").is_quiet() and rt.snapshot("t1").run is None)
        # The stuck reply did get out, after its 30 s, and the chat lane kept commit order:
        # the reply (committed before the abort) comes before the abort's chat effects.
        assert chat_world.replies_done and chat_world.replies_done[0] - t0 >= BLOCK_S
        after = chat_world.of_thread("t1")[seen_before:]
        assert isinstance(after[0], ReplyToCommand)  # first, though it took 30 s
        assert len(after) > 1  # the abort's chat effects (its notice, typing off) follow
        assert agents.interrupts == ["r1"]
        assert rt.snapshot("t1").counters.aborts == 1


async def test_agent_effects_keep_commit_order_among_themselves(tmp_path, autojump) -> None:
    """A permission answer committed after a prompt reaches the agent after it, even with
    the chat lane stuck: each lane is ordered on its own."""
    chat_world, agents = StuckChat(), TimedAgents()
    async with running(tmp_path, chat=chat_world, agents=agents) as rt:
        chat = Chat(rt, "t1", str(tmp_path))
        await chat.start()
        chat_world.armed = True
        await chat.send(A.StatusRequested(**chat._base()))  # stuck for 30 s
        t0 = trio.current_time()
        await chat.say("PERMISSION please")
        await until(lambda: rt.snapshot("t1").blockers != (), step=0.01)
        await chat.allow("perm1")
        await until(lambda: rt.snapshot("t1").counters.completed == 1, step=0.01)
        # The whole turn (prompt, question, answer) happened while the reply was stuck.
        assert trio.current_time() - t0 < BLOCK_S
        assert [t for _, t in agents.delivered] == ["PERMISSION please"]
        assert agents.answers == [("perm1", True)]
        await until(lambda: rt.get("t1").is_quiet())
        assert chat_world.replies_done and chat_world.duplicate_keys == []


async def test_a_prompt_of_a_run_ended_while_it_waited_is_not_sent(tmp_path, autojump) -> None:
    """The agent takes 5 s to start; the conversation is ended meanwhile (the core ends the
    run at once). The prompt, which was waiting in the agent lane for that start, must not
    reach the agent."""

    class SlowStart(TimedAgents):
        def factory(self, start: StartAgent, thread_id: str) -> ScriptedAgent:
            world = self

            class Slow(ScriptedAgent):
                async def serve(self, start, emit, task_status=trio.TASK_STATUS_IGNORED) -> None:
                    await trio.sleep(5)
                    await super().serve(start, emit, task_status)

                async def interrupt(self, run_id: str) -> None:
                    world.interrupt_times.append(trio.current_time())
                    await super().interrupt(run_id)

            adapter = Slow(AgentOptions(), world=self)
            self.adapters.append(adapter)
            return adapter

    agents = SlowStart()
    async with running(tmp_path, agents=agents) as rt:
        chat = Chat(rt, "t1", str(tmp_path))
        await chat.start()
        await chat.say("hello")
        await chat.end()  # while the agent is still starting
        assert rt.snapshot("t1").run is None
        await until(lambda: agents.serve_calls == 1 and rt.get("t1").is_quiet(), step=0.01)
        reactor = rt.get("t1").reactor
        assert agents.delivered == [] and reactor.skipped_prompts == 1
        # A new conversation's prompt does go through.
        await chat.start()
        await chat.say("again")
        await until(lambda: rt.snapshot("t1").counters.completed == 1)
        assert [t for _, t in agents.delivered] == ["again"]


def test_consecutive_appends_of_one_output_are_joined() -> None:
    from threadspindle.runtime.core.effect_types import AppendOutput, Typing
    from threadspindle.runtime.live.reactor import _coalesce_appends

    def app(key: str, seq: int, text: str) -> AppendOutput:
        return AppendOutput(key=key, seq=seq, text=text)

    batches = [
        (1, [app("k", 1, "a")]),
        (2, [app("k", 2, "b"), app("k", 3, "c")]),
        (3, [Typing(on=True)]),  # anything else ends a run
        (4, [app("k", 4, "d"), app("j", 1, "x")]),  # another key ends a run
        (5, [app("j", 3, "y")]),  # a gap in seq ends a run
        (6, [app("j", 4, "z")]),
    ]
    merged = _coalesce_appends(batches)
    assert merged == [
        (app("k", 3, "abc"), 3),
        (Typing(on=True), 1),
        (app("k", 4, "d"), 1),
        (app("j", 1, "x"), 1),
        (app("j", 4, "yz"), 2),
    ]
    assert sum(count for _, count in merged) == 8  # every committed effect accounted for


async def test_deltas_piled_up_behind_a_stuck_chat_call_go_out_as_one_append(
    tmp_path, autojump
) -> None:
    chat_world, agents = StuckChat(), TimedAgents()
    async with running(tmp_path, chat=chat_world, agents=agents) as rt:
        chat = Chat(rt, "t1", str(tmp_path))
        await chat.start()
        await chat.say("SLOW please")  # 20 chunks, one every 0.5 s
        await until(lambda: any("chunk0" in t for t in chat_world.texts("t1", "text")))
        chat_world.armed = True
        seen_before = len(chat_world.of_thread("t1"))
        await chat.send(A.StatusRequested(**chat._base()))  # the chat lane is stuck 30 s
        await until(lambda: rt.snapshot("t1").counters.completed == 1)
        await until(lambda: rt.get("t1").is_quiet())
        text = chat_world.texts("t1", "text")[0]
        assert text == "".join(f"chunk{i} " for i in range(20))  # nothing lost, in order
        appends = [e for e in chat_world.of_thread("t1")[seen_before:] if e.type == "append_output"]
        assert len(appends) <= 2  # the ~19 deltas that waited went out together
        assert rt.get("t1").reactor.statistics().coalesced >= 15


async def test_an_abort_is_not_held_behind_a_real_429_retry_after(tmp_path, autojump) -> None:
    """The same with the real StreamRenderer over RecordingPlatform: the /status reply gets
    a 429 with a 30 s Retry-After, which the renderer waits out and retries."""
    from threadspindle.effects.render import StreamRenderer
    from threadspindle.testkit.recording_platform import RecordingPlatform

    platform, agents = RecordingPlatform(), TimedAgents()
    async with running(
        tmp_path, agents=agents, renderer_factory=lambda t: StreamRenderer(platform, t)
    ) as rt:
        chat = Chat(rt, "t1", str(tmp_path))
        await chat.start()
        await chat.say("please SILENT")
        await until(lambda: agents.delivered != [], step=0.01)
        platform.rate_limit(kind="reply", retry_after=BLOCK_S)
        t0 = trio.current_time()
        await chat.send(A.StatusRequested(**chat._base()))
        await chat.abort()
        await until(lambda: agents.interrupts != [], step=0.01)
        assert agents.interrupt_times[0] - t0 < 1.0
        await until(lambda: rt.get("t1").is_quiet() and rt.snapshot("t1").run is None)
        status = [c for c in platform.calls if c.kind == "reply" and "Queue:" in (c.text or "")]
        assert [c.error is None for c in status] == [False, True]  # a 429, then sent
        assert status[-1].at - t0 >= BLOCK_S
        # The abort's own reply kept its place in the chat lane: after the status reply.
        abort_reply = next(c for c in platform.calls if "Aborted" in (c.text or ""))
        assert abort_reply.at >= status[-1].at
        assert rt.get("t1").reactor.statistics().failed == 0


async def test_a_reply_queued_in_the_chat_lane_is_told_to_the_renderer_at_once(
    tmp_path, autojump
) -> None:
    """A renderer with ``expedite`` hears of each urgent chat effect (a command reply) when
    it is committed, while the effect ahead of it in the chat lane still holds the lane
    (so it can hurry that one), and again once the reply is applied: the count returns to
    zero, and commit order in the lane is unchanged."""
    told: list[tuple[float, int]] = []

    class Hurried(StuckChat):
        def renderer(self, thread_id: str) -> RecordingRenderer:
            renderer = super().renderer(thread_id)
            renderer.expedite = lambda n: told.append((trio.current_time(), n))  # type: ignore[attr-defined]
            return renderer

    chat_world = Hurried()
    async with running(tmp_path, chat=chat_world, agents=TimedAgents()) as rt:
        chat = Chat(rt, "t1", str(tmp_path))
        await chat.start()
        await until(lambda: rt.get("t1").is_quiet())
        before = sum(n for _, n in told)
        assert before == 0 and told  # the start's reply: told, then applied
        told.clear()
        chat_world.armed = True
        t0 = trio.current_time()
        await chat.send(A.StatusRequested(**chat._base()))  # held 30 s in the lane
        await chat.send(A.StatusRequested(**chat._base()))  # queued behind it
        await until(lambda: len(told) >= 2, step=0.01)
        assert [n for _, n in told[:2]] == [1, 1]
        assert all(at - t0 < 1.0 for at, _ in told[:2])  # told at once, not after 30 s
        await until(lambda: rt.get("t1").is_quiet())
        assert len(chat_world.replies_done) == 2
        assert [n for _, n in told] == [1, 1, -1, -1] and sum(n for _, n in told) == 0
        assert told[2][0] - t0 >= BLOCK_S  # the first reply's -1 came once it was applied
