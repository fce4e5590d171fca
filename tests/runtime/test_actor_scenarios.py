"""End-to-end scenarios through the live runtime: chat actions in, the scripted fake agent,
the recording renderer, a real SQLite log; trio's MockClock jumps over the waits."""

from __future__ import annotations

import sqlite3

import pytest
import trio
from runtime_harness import Chat, running, until

from threadspindle.agents.base import AgentOptions
from threadspindle.runtime.core import agent_events as E
from threadspindle.runtime.core.actions import (
    AgentEventReceived,
    EffectFailed,
    QuestionAnswered,
    UserMessage,
)
from threadspindle.runtime.core.effect_types import KEYED_POSTS, PromptAgent
from threadspindle.runtime.core.model import Phase
from threadspindle.runtime.live.replay import replay_actions
from threadspindle.testkit.fake_agent import FakeAgentWorld, ScriptedAgent


@pytest.fixture
def autojump(autojump_clock: trio.testing.MockClock) -> trio.testing.MockClock:
    return autojump_clock


def logged(runtime, thread_id: str, kind: str) -> list:
    runtime.log.flush()
    return [e.action for e in runtime.log.read(thread_id) if e.action.kind == kind]


def idle_and_empty(runtime, thread_id: str = "t1") -> bool:
    state = runtime.snapshot(thread_id)
    actor = runtime.get(thread_id)
    return state.run is None and not state.queue and (actor is None or actor.is_quiet())


async def test_two_prompts_at_the_same_moment(tmp_path, autojump) -> None:
    async with running(tmp_path) as rt:
        chat = Chat(rt, "t1", str(tmp_path))
        await chat.start()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(chat.say, "first")
            nursery.start_soon(chat.say, "second")
        await until(lambda: idle_and_empty(rt) and rt.snapshot("t1").counters.runs == 2)
        state = rt.snapshot("t1")
        # No deadlock, one agent process, one session for both runs.
        assert rt.agents.serve_calls == 1
        sessions = {
            a.event.session_id
            for a in logged(rt, "t1", "agent_event")
            if isinstance(a.event, E.SessionStarted)
        }
        assert sessions == {"sess-1"}
        assert state.conversation.session_id == "sess-1"
        # Whichever came second interrupted the other, then ran to completion.
        assert sorted(t for _, t in rt.agents.delivered) == ["first", "second"]
        assert state.counters.completed >= 1 and state.counters.interrupts == 1
        assert rt.chat.duplicate_keys == []


async def test_three_runs_reuse_the_same_actor_and_listener(tmp_path, autojump) -> None:
    async with running(tmp_path) as rt:
        chat = Chat(rt, "t1", str(tmp_path))
        await chat.start()
        actor = rt.get("t1")
        for n in range(1, 4):
            await chat.say(f"prompt {n}")
            await until(lambda n=n: rt.snapshot("t1").counters.completed == n)
            assert rt.get("t1") is actor
        stats = rt.statistics("t1")
        assert stats.listener_starts == 1 and stats.counters.listener_starts == 1
        assert rt.agents.serve_calls == 1
        assert stats.counters.runs == 3 and stats.phase is Phase.IDLE
        assert len(rt.chat.texts("t1", "footer")) == 3


async def test_abort_during_a_long_tool_step_then_a_new_message(tmp_path, autojump) -> None:
    async with running(tmp_path) as rt:
        chat = Chat(rt, "t1", str(tmp_path))
        await chat.start()
        await chat.say("please TOOL")
        await until(lambda: rt.chat.texts("t1", "tool") != [])
        started = trio.current_time()
        await chat.abort()
        await until(lambda: rt.snapshot("t1").run is None)
        assert trio.current_time() - started < 5  # did not wait for the 30 s tool
        assert rt.agents.interrupts == ["r1"]
        await chat.say("hello again")
        await until(lambda: rt.snapshot("t1").counters.completed == 1)
        assert any("fake agent." in t for t in rt.chat.texts("t1", "text"))
        assert rt.statistics("t1").listener_starts == 1  # abort never stops the listener
        assert rt.snapshot("t1").counters.aborts == 1


async def test_a_message_during_a_slow_stream_is_handled_after_it(tmp_path, autojump) -> None:
    async with running(tmp_path) as rt:
        chat = Chat(rt, "t1", str(tmp_path))
        await chat.start()
        await chat.say("SLOW please")
        await until(lambda: any("chunk3" in t for t in rt.chat.texts("t1", "text")))
        await chat.queue("after the stream")
        assert rt.snapshot("t1").queue[0].text == "after the stream"
        await until(lambda: rt.snapshot("t1").counters.completed == 2)
        first_text = rt.chat.outputs["t1/r1/0"].text
        assert first_text == "".join(f"chunk{i} " for i in range(20))  # not cut short
        effects = rt.chat.of_thread("t1")
        footer_r1 = next(i for i, e in enumerate(effects) if getattr(e, "key", "") == "t1/r1/1")
        first_r2 = next(i for i, e in enumerate(effects) if getattr(e, "run_id", None) == "r2")
        assert footer_r1 < first_r2
        assert [t for _, t in rt.agents.delivered] == ["SLOW please", "after the stream"]


async def test_a_burst_of_three_plus_a_later_one_leaves_no_stuck_queue(tmp_path, autojump) -> None:
    async with running(tmp_path) as rt:
        chat = Chat(rt, "t1", str(tmp_path))
        await chat.start()
        async with trio.open_nursery() as nursery:
            for n in range(3):
                nursery.start_soon(chat.queue, f"burst {n}")
        await trio.sleep(5)
        await chat.queue("later")
        await until(lambda: idle_and_empty(rt) and rt.snapshot("t1").counters.runs == 4)
        assert sorted(t for _, t in rt.agents.delivered) == [
            "burst 0",
            "burst 1",
            "burst 2",
            "later",
        ]
        assert rt.snapshot("t1").counters.completed == 4
        assert rt.snapshot("t1").queue == ()


async def test_a_failing_effect_is_reported_and_the_thread_goes_on(tmp_path, autojump) -> None:
    async with running(tmp_path) as rt:
        chat = Chat(rt, "t1", str(tmp_path))
        await chat.start()
        rt.chat.fail_next = 1  # the next chat call fails
        await chat.say("one")
        await until(lambda: rt.snapshot("t1").counters.completed == 1)
        failures = logged(rt, "t1", "effect_failed")
        assert len(failures) == 1 and isinstance(failures[0], EffectFailed)
        assert "injected failure" in failures[0].reason
        await chat.say("two")
        await until(lambda: rt.snapshot("t1").counters.completed == 2)
        assert rt.get("t1").running


async def test_an_agent_crash_respawns_the_listener_and_resumes_the_session(
    tmp_path, autojump
) -> None:
    async with running(tmp_path) as rt:
        chat = Chat(rt, "t1", str(tmp_path))
        await chat.start()
        await chat.say("please CRASH")
        await until(lambda: rt.agents.serve_calls == 2 and rt.agents.serving == 1)
        state = rt.snapshot("t1")
        assert state.run is None and state.counters.failed == 1
        assert any("exited during the run" in t for t in rt.chat.texts("t1", "notice"))
        # Restarted after the first backoff step, resuming the session it had.
        assert rt.agents.serve_times[1] - rt.agents.serve_times[0] >= 0.5
        assert rt.agents.starts[1].session_id == "sess-1"
        await chat.say("still there?")
        await until(lambda: rt.snapshot("t1").counters.completed == 1)
        assert rt.statistics("t1").counters.listener_starts == 2


async def test_restarts_back_off_exponentially_and_are_capped(tmp_path, autojump) -> None:
    async with running(tmp_path) as rt:
        chat = Chat(rt, "t1", str(tmp_path))
        rt.agents.fail_start = 1  # the very first start fails
        await chat.start()
        await until(lambda: rt.agents.serving == 1)
        for _ in range(6):  # then it keeps dying right after it starts
            await until(lambda: rt.agents.serving == 1)
            rt.agents.crash_all()
            await trio.sleep(0.01)
        await until(lambda: rt.agents.serve_calls >= 8, timeout=600)
        times = rt.agents.serve_times
        gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
        # 0.5 s doubling ... (each gap also holds the 0.05 s fake start)
        assert gaps[0] >= 0.5 and gaps[1] >= 1.0 and gaps[2] >= 2.0 and gaps[3] >= 4.0
        assert all(g <= 30 + 60 + 1 for g in gaps)
        # never more than 5 starts in any 60 s window
        for i in range(len(times) - 5):
            assert times[i + 5] - times[i] >= 60 - 1e-6


async def test_stale_events_of_an_old_run_change_nothing(tmp_path, autojump) -> None:
    async with running(tmp_path) as rt:
        chat = Chat(rt, "t1", str(tmp_path))
        await chat.start()
        await chat.say("hello")
        await until(lambda: rt.snapshot("t1").counters.completed == 1)
        before = rt.snapshot("t1")
        stale = AgentEventReceived(
            thread_id="t1",
            action_id="x1",
            at=trio.current_time(),
            run_id="r1",
            session_id="sess-1",
            event=E.TextDelta(text="late"),
        )
        effects_before = len(rt.chat.effects)
        await (await rt.post(stale)).durable()
        await rt.wait_quiet("t1")
        after = rt.snapshot("t1")
        assert after.counters.stale_drops == before.counters.stale_drops + 1
        assert len(rt.chat.effects) == effects_before


async def test_effects_are_applied_only_after_their_action_is_durable(tmp_path, autojump) -> None:
    on_disk_at_post: dict[str, int] = {}  # output key -> rows on disk when it was posted
    on_disk_at_prompt: dict[str, int] = {}  # run id -> rows on disk when it was sent

    def rows_on_disk() -> int:
        # A second connection sees only committed transactions.
        with sqlite3.connect(tmp_path / "events.sqlite3") as reader:
            return reader.execute("SELECT COUNT(*) FROM actions WHERE thread_id='t1'").fetchone()[0]

    # Flushes wait 50 ms to batch: an effect applied too early would be seen at once.
    async with running(tmp_path, log_options={"batch_window_s": 0.05}) as rt:
        rt.chat.on_post = lambda thread, key: on_disk_at_post.setdefault(key, rows_on_disk())
        rt.agents.on_prompt = lambda p: on_disk_at_prompt.setdefault(p.run_id, rows_on_disk())
        chat = Chat(rt, "t1", str(tmp_path))
        await chat.start()
        await rt.post(
            UserMessage(
                thread_id="t1", action_id="m1", at=trio.current_time(), author_id="u", text="TOOL"
            )
        )
        await until(lambda: rt.snapshot("t1").counters.completed == 1)
        await rt.wait_quiet("t1")
        entries = list(rt.log.read("t1"))
    produced_by: dict[str, int] = {}
    for seq, _, result in replay_actions((e.seq, e.action) for e in entries):
        for effect in result.effects:
            key = getattr(effect, "key", None) or getattr(effect, "run_id", None)
            if isinstance(effect, (*KEYED_POSTS, PromptAgent)):
                produced_by.setdefault(key, seq)
    assert on_disk_at_post and on_disk_at_prompt
    for key, rows in {**on_disk_at_post, **on_disk_at_prompt}.items():
        assert rows >= produced_by[key], f"{key} applied before its action {produced_by[key]}"


async def test_notes_are_logged_with_thread_run_and_action(tmp_path, autojump, caplog) -> None:
    caplog.set_level("INFO", logger="spindle")
    async with running(tmp_path) as rt:
        chat = Chat(rt, "t1", str(tmp_path))
        await chat.start()
        await chat.abort()  # nothing to abort: the core notes why it did nothing
        await rt.wait_quiet("t1")
    notes = [r for r in caplog.records if r.name == "spindle.actor"]
    assert any(
        r.thread_id == "t1" and r.action == "abort" and "abort while idle" in r.getMessage()
        for r in notes
    )
    assert all(hasattr(r, "run") for r in notes)


async def test_an_agent_that_never_gets_ready_is_given_up(tmp_path, autojump) -> None:
    class Hanging(ScriptedAgent):
        async def serve(self, start, emit, task_status=trio.TASK_STATUS_IGNORED) -> None:
            await trio.sleep_forever()

    async with running(
        tmp_path, adapter_factory=lambda start, thread_id: Hanging(AgentOptions())
    ) as rt:
        chat = Chat(rt, "t1", str(tmp_path))
        await chat.start()
        await chat.say("hello?")
        await until(lambda: rt.snapshot("t1").run is None, timeout=600)
        await rt.wait_quiet("t1")
        notices = rt.chat.texts("t1", "notice")
        assert any("within 60 s" in t for t in notices), notices
        assert rt.snapshot("t1").counters.failed == 1
    assert rt.statistics("t1").listener_running is False


async def test_a_pending_question_holds_the_queue_until_it_is_answered(tmp_path, autojump) -> None:
    async with running(tmp_path) as rt:
        chat = Chat(rt, "t1", str(tmp_path))
        await chat.start()
        await chat.say("QUESTION first")
        await until(lambda: bool(rt.snapshot("t1").blockers))
        await chat.queue("waits for the answer")
        await trio.sleep(300)  # however long it takes, nothing is dispatched meanwhile
        assert [t for _, t in rt.agents.delivered] == ["QUESTION first"]
        assert rt.snapshot("t1").queue[0].text == "waits for the answer"
        blocker = rt.snapshot("t1").blockers[0]
        await chat.send(
            QuestionAnswered(
                thread_id="t1",
                action_id="qa1",
                at=trio.current_time(),
                request_id=blocker.request_id,
                answer="b",
            )
        )
        await until(lambda: rt.snapshot("t1").counters.completed == 2)
        await rt.wait_quiet("t1")
        assert rt.agents.answers == [("q1", "b")]
        assert rt.chat.outputs[blocker.key].dismissed == "Answered: b"
        assert [t for _, t in rt.agents.delivered] == ["QUESTION first", "waits for the answer"]


async def test_a_slow_agent_start_does_not_hold_the_chat(tmp_path, autojump) -> None:
    class SlowStart(ScriptedAgent):
        async def serve(self, start, emit, task_status=trio.TASK_STATUS_IGNORED) -> None:
            await trio.sleep(5)  # a CLI that takes its time to come up
            await super().serve(start, emit, task_status)

    agents = FakeAgentWorld()
    factory = lambda start, thread_id: SlowStart(AgentOptions(), world=agents)  # noqa: E731
    async with running(tmp_path, agents=agents, adapter_factory=factory) as rt:
        chat = Chat(rt, "t1", str(tmp_path))
        started = trio.current_time()
        await chat.start()
        await until(lambda: rt.chat.keys("t1") != [], step=0.01)
        assert trio.current_time() - started < 1  # the reply did not wait for the agent
        await chat.say("hello")
        await until(lambda: rt.snapshot("t1").counters.completed == 1)
        assert agents.serve_calls == 1  # the prompt waited for that same start
