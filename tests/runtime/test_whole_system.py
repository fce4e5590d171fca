"""The whole system under a randomized interleaving: hypothesis picks user messages,
/queue, /abort, permission answers, agent crashes, failed agent starts, failing chat calls,
pauses and runtime restarts on the same log; everything runs in one trio run (MockClock)
through the real actor, reactor, listener, SQLite log and core. End to end, the invariants
of the state machine hold and the run never hangs."""

from __future__ import annotations

import itertools
import json
import tempfile
from pathlib import Path

import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from runtime_harness import Chat, running

from threadspindle.runtime.core import actions as A
from threadspindle.runtime.live.replay import effect_lines, replay_actions
from threadspindle.testkit.fake_agent import FakeAgentWorld
from threadspindle.testkit.fake_chat import RenderWorld

TEXTS = ["hi", "SLOW", "TOOL", "PERMISSION", "CRASH"]
CHAT_TYPES = {
    "post_output",
    "append_output",
    "edit_output",
    "seal_output",
    "typing",
    "show_permission",
    "show_question",
    "dismiss_prompt",
    "reply",
}

THREADS = ("t1", "t2")

ops = st.lists(
    st.tuples(
        st.sampled_from(THREADS),
        st.one_of(
            st.tuples(st.just("say"), st.sampled_from(TEXTS)),
            st.tuples(st.just("queue"), st.sampled_from(TEXTS)),
            st.tuples(st.just("abort")),
            st.tuples(st.just("answer"), st.booleans()),
            st.tuples(st.just("crash")),
            st.tuples(st.just("fail_start")),
            st.tuples(st.just("fail_chat"), st.integers(1, 3)),
            st.tuples(st.just("wait"), st.sampled_from([0.0, 0.02, 0.3, 2.0, 40.0])),
            st.tuples(st.just("restart")),
        ),
    ),
    min_size=1,
    max_size=25,
)


async def drive(tmp: Path, steps: list[tuple]) -> None:
    counter = itertools.count(1)
    agents, chat_world = FakeAgentWorld(), RenderWorld()
    remaining = list(steps)
    first_life = True
    stops_at_shutdown = 0  # adapter stops done by shutting a runtime down (allowed)
    while True:
        async with running(tmp, agents=agents, chat=chat_world) as rt:
            serve_calls_before = agents.serve_calls
            chats = {t: Chat(rt, t, str(tmp)) for t in THREADS}
            if first_life:
                for chat in chats.values():
                    await chat.start()
                first_life = False
            restart = False
            while remaining and not restart:
                thread_id, op = remaining.pop(0)
                restart = await apply_op(rt, chats[thread_id], op, counter)
            if restart:
                stops = agents.stops
                # leaving the block disposes every thread: a clean shutdown, then a restart
            else:
                await settle(rt, chats)
                check_invariants(rt, serve_calls_before, stops_at_shutdown)
                return
        stops_at_shutdown += agents.stops - stops


async def apply_op(rt, chat: Chat, op: tuple, counter) -> bool:
    """Apply one generated operation; True when it asks for a runtime restart."""
    kind = op[0]
    if kind == "say":
        await chat.say(f"{op[1]} #{next(counter)} @{chat.thread_id}")
    elif kind == "queue":
        await chat.queue(f"{op[1]} #{next(counter)} @{chat.thread_id}")
    elif kind == "abort":
        await chat.abort()
    elif kind == "answer":
        for blocker in rt.snapshot(chat.thread_id).blockers:
            await chat.allow(blocker.request_id, op[1])
    elif kind == "crash":
        rt.agents.crash_all()
    elif kind == "fail_start":
        rt.agents.fail_start += 1
    elif kind == "fail_chat":
        rt.chat.fail_next = op[1]
    elif kind == "restart":
        return True
    else:
        await trio.sleep(op[1])
    return False


async def settle(rt, chats: dict[str, Chat]) -> None:
    """Answer whatever is still asked until every thread is quiet at the same moment;
    everything must settle (in mock time) soon.

    The threads are judged together, after every task has done what it can at this
    instant (``wait_all_tasks_blocked``): a thread found quiet before another one's wait
    may have been restarting its agent meanwhile, and a crash is only seen once the
    listener has run."""
    rt.chat.fail_next = 0
    with trio.fail_after(5_000):
        while True:
            await trio.testing.wait_all_tasks_blocked()
            quiet = [await _quiet(rt, chat) for chat in chats.values()]
            if all(quiet):
                return
            await trio.sleep(0.5)


async def _quiet(rt, chat: Chat) -> bool:
    """Whether the thread has nothing left to do; answers what it still asks."""
    state = rt.snapshot(chat.thread_id)
    for blocker in state.blockers:
        await chat.allow(blocker.request_id)
    actor = rt.get(chat.thread_id)
    idle = actor is None or (
        actor.is_quiet() and (not actor.listener.running or actor.listener.adapter is not None)
    )
    return state.run is None and not state.queue and not state.blockers and idle


def check_invariants(rt, serve_calls_before: int, stops_at_shutdown: int) -> None:
    # Idempotent output: no key posted twice, in any thread.
    assert rt.chat.duplicate_keys == []
    keys = rt.chat.keys()
    assert len(keys) == len(set(keys))
    # Each prompt reached an agent at most once.
    texts = [t for _, t in rt.agents.delivered]
    assert len(texts) == len(set(texts))
    # Listener continuity: aborts and interrupts never stopped an agent (only shutdowns).
    assert rt.agents.stops == stops_at_shutdown
    starts = sum(rt.statistics(t).listener_starts for t in THREADS if rt.get(t) is not None)
    assert starts == rt.agents.serve_calls - serve_calls_before
    rt.log.flush()
    for thread_id in THREADS:
        check_thread(rt, thread_id)


def check_thread(rt, thread_id: str) -> None:
    state = rt.snapshot(thread_id)
    c = state.counters
    # Every enqueued prompt was dispatched or explicitly removed; nothing is stuck.
    assert state.queue == () and state.run is None and not state.blockers
    assert c.queued == c.dequeued + c.removed
    assert c.runs == c.dequeued
    # Session demux: only this thread's prompts ran here, each under its own run id.
    mine = [(r, t) for r, t in rt.agents.delivered if t.endswith(f"@{thread_id}")]
    delivered_runs = [r for r, _ in mine]
    assert len(delivered_runs) == len(set(delivered_runs))
    assert all(t.endswith(f"@{thread_id}") for t in rt.chat.texts(thread_id, "marker") if "@" in t)
    # The log is gapless and its replay is exactly what the runtime applied (minus the
    # chat calls that failed, each reported as EffectFailed).
    entries = list(rt.log.read(thread_id))
    assert [e.seq for e in entries] == list(range(1, len(entries) + 1))
    replayed = [
        json.loads(line)["effect"]
        for line in effect_lines(replay_actions((e.seq, e.action) for e in entries))
    ]
    replayed_chat = [e for e in replayed if e["type"] in CHAT_TYPES]
    applied = [e.model_dump(mode="json") for e in rt.chat.of_thread(thread_id)]
    failed_chat = [
        e.action
        for e in entries
        if isinstance(e.action, A.EffectFailed) and e.action.effect in CHAT_TYPES
    ]
    assert len(replayed_chat) == len(applied) + len(failed_chat)
    it = iter(replayed_chat)
    assert all(any(a == r for r in it) for a in applied)  # applied is a subsequence
    # No prompt silently vanished: every run reached the agent, was interrupted by the
    # user, or the thread says why (unless that very notice was a failed chat call).
    prompted = [e["run_id"] for e in replayed if e["type"] == "prompt_agent"]
    interrupted = {e["run_id"] for e in replayed if e["type"] == "interrupt_agent"}
    outputs = rt.chat.outputs.values()
    for run_id in prompted:
        if run_id in delivered_runs or run_id in interrupted:
            continue
        noticed = any(
            o.key.startswith(f"{thread_id}/{run_id}/") and o.kind == "notice" for o in outputs
        )
        notice_failed = any(
            e["type"] == "post_output" and e["run_id"] == run_id and e["kind"] == "notice"
            for e in replayed
        ) and bool(failed_chat)
        assert noticed or notice_failed, f"{thread_id} {run_id}: not delivered, no notice"


@settings(
    max_examples=int(__import__("os").environ.get("SPINDLE_WHOLE_SYSTEM_EXAMPLES", "40")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(steps=ops)
def test_random_interleavings_keep_the_invariants(steps: list[tuple]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        trio.run(drive, Path(tmp), steps, clock=trio.testing.MockClock(autojump_threshold=0))
