"""The whole system under a randomized interleaving: hypothesis picks user messages,
/queue, /abort, permission answers, agent crashes, failed agent starts, failing chat calls,
pauses and runtime restarts on the same log; everything runs in one trio run (MockClock)
through the real actor, reactor, listener, SQLite log and core. End to end, the invariants
of the state machine hold and the run never hangs."""

from __future__ import annotations

import itertools
import json
import tempfile
from collections import Counter
from pathlib import Path

import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from runtime_harness import Chat, running

from runtime import actions as A
from runtime.replay import effect_lines, replay_actions
from testkit.fake_agent import FakeAgentWorld
from testkit.fake_chat import RenderWorld

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

ops = st.lists(
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
            chat = Chat(rt, "t1", str(tmp))
            if first_life:
                await chat.start()
                first_life = False
            restart = False
            while remaining and not restart:
                op = remaining.pop(0)
                restart = await apply_op(rt, chat, op, counter)
            if restart:
                stops = agents.stops
                # leaving the block disposes every thread: a clean shutdown, then a restart
            else:
                await settle(rt, chat)
                check_invariants(rt, serve_calls_before, stops_at_shutdown)
                return
        stops_at_shutdown += agents.stops - stops


async def apply_op(rt, chat: Chat, op: tuple, counter) -> bool:
    """Apply one generated operation; True when it asks for a runtime restart."""
    kind = op[0]
    if kind == "say":
        await chat.say(f"{op[1]} #{next(counter)}")
    elif kind == "queue":
        await chat.queue(f"{op[1]} #{next(counter)}")
    elif kind == "abort":
        await chat.abort()
    elif kind == "answer":
        for blocker in rt.snapshot("t1").blockers:
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


async def settle(rt, chat: Chat) -> None:
    """Answer whatever is still asked; everything must settle (in mock time) soon."""
    rt.chat.fail_next = 0
    with trio.fail_after(5_000):
        while True:
            state = rt.snapshot("t1")
            for blocker in state.blockers:
                await chat.allow(blocker.request_id)
            actor = rt.get("t1")
            quiet = actor is None or (
                actor.is_quiet()
                and (not actor.listener.running or actor.listener.adapter is not None)
            )
            if state.run is None and not state.queue and quiet:
                return
            await trio.sleep(0.5)


def check_invariants(rt, serve_calls_before: int, stops_at_shutdown: int) -> None:
    state = rt.snapshot("t1")
    c = state.counters
    # Idempotent output: no key posted twice.
    assert rt.chat.duplicate_keys == []
    keys = rt.chat.keys("t1")
    assert len(keys) == len(set(keys))
    # Every enqueued prompt was dispatched or explicitly removed; nothing is stuck.
    assert state.queue == () and state.run is None and not state.blockers
    assert c.queued == c.dequeued + c.removed
    assert c.runs == c.dequeued
    # Each prompt reached the agent at most once, under its own run id.
    delivered_runs = [r for r, _ in rt.agents.delivered]
    assert len(delivered_runs) == len(set(delivered_runs))
    texts = [t for _, t in rt.agents.delivered]
    assert len(texts) == len(set(texts))
    # Listener continuity: aborts and interrupts never stopped the agent (only shutdowns).
    assert rt.agents.stops == stops_at_shutdown
    stats = rt.statistics("t1")
    assert stats.listener_starts == rt.agents.serve_calls - serve_calls_before
    # The log is gapless and its replay is exactly what the runtime applied (minus the
    # chat calls that failed, each reported as EffectFailed).
    rt.log.flush()
    entries = list(rt.log.read("t1"))
    assert [e.seq for e in entries] == list(range(1, len(entries) + 1))
    replayed = [
        json.loads(line)["effect"]
        for line in effect_lines(replay_actions((e.seq, e.action) for e in entries))
    ]
    replayed_chat = [e for e in replayed if e["type"] in CHAT_TYPES]
    applied = [e.model_dump(mode="json") for e in rt.chat.of_thread("t1")]
    failed_chat = [
        e.action
        for e in entries
        if isinstance(e.action, A.EffectFailed) and e.action.effect in CHAT_TYPES
    ]
    assert len(replayed_chat) == len(applied) + len(failed_chat)
    it = iter(replayed_chat)
    assert all(any(a == r for r in it) for a in applied)  # applied is a subsequence
    # No prompt silently vanished: every run reached the agent or the thread says why.
    prompted = [e["run_id"] for e in replayed if e["type"] == "prompt_agent"]
    interrupted = {e["run_id"] for e in replayed if e["type"] == "interrupt_agent"}
    notices = Counter(k.split("/")[1] for k in keys if "/r" in k)
    for run_id in prompted:
        if run_id not in delivered_runs and run_id not in interrupted:
            assert (
                any(
                    o.key.startswith(f"t1/{run_id}/") and o.kind == "notice"
                    for o in rt.chat.outputs.values()
                )
                or notices[run_id] == 0
                and any(
                    isinstance(e.action, A.EffectFailed) and e.action.effect in CHAT_TYPES
                    for e in entries
                )
            ), f"run {run_id} was never delivered and no notice says why"


@settings(
    max_examples=int(__import__("os").environ.get("SPINDLE_WHOLE_SYSTEM_EXAMPLES", "40")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(steps=ops)
def test_random_interleavings_keep_the_invariants(steps: list[tuple]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        trio.run(drive, Path(tmp), steps, clock=trio.testing.MockClock(autojump_threshold=0))
