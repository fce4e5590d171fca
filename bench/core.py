"""Core speed: ``transition`` calls/s on a realistic mix, and actions/s through live actors.

The mix is what a busy thread sees: a prompt, a stream of text deltas, a few tool calls, a
completion, now and then a ``/queue``, a status request and a stale event. Actor throughput
posts agent text deltas for the active run of 1, 100 and 10,000 threads through the real
``Runtime`` (actor, commit, reactor, recording renderer), with the log in memory and in a
SQLite file, and counts actions per second until every effect is applied.
"""

from __future__ import annotations

import os
import tempfile
import time

import trio

from bench.common import bench_runtime, median_of, timed
from threadspindle.runtime.core import agent_events as E
from threadspindle.runtime.core.actions import AgentEventReceived
from threadspindle.runtime.core.model import Policy, ThreadState
from threadspindle.runtime.core.transitions import transition
from threadspindle.testkit.fake_agent import FakeAgentWorld, Step
from threadspindle.testkit.thread_script import ThreadScript

__all__ = ["realistic_actions", "run"]


def realistic_actions(runs: int, deltas_per_run: int = 60) -> list:
    s = ThreadScript("bench")
    actions = [s.start("claude", "/work/app", "/work/app"), s.connected("sess-1")]
    for r in range(1, runs + 1):
        run_id = f"r{r}"
        actions.append(s.user(f"prompt {r}"))
        actions.append(s.agent(run_id, E.SessionStarted(session_id="sess-1"), "sess-1"))
        for i in range(deltas_per_run):
            if i in (20, 40):
                actions.append(s.tool(run_id, f"t{r}-{i}", "Bash", "ls -la"))
                actions.append(s.tool_done(run_id, f"t{r}-{i}", "file\n" * 20))
            actions.append(s.text(run_id, f"word{i} "))
        if r % 5 == 0:
            actions.append(s.queue(f"queued {r}"))
            actions.append(s.status())
            actions.append(s.text("r0", "stale"))
        actions.append(s.done(run_id, session_id="sess-1"))
        actions.append(s.posted(f"bench/{run_id}/0", "m1"))
    return actions


def transition_rate(actions: list) -> float:
    state = ThreadState.new("bench", Policy(allowed_roots=("/work",), queue_limit=10_000))
    start = time.perf_counter()
    for action in actions:
        state = transition(state, action).state
    return len(actions) / (time.perf_counter() - start)


async def _actor_rate(threads: int, per_thread: int, log_path: str) -> float:
    world = FakeAgentWorld(script=lambda text: [Step("sleep", seconds=1e9)])  # a run that lasts
    async with bench_runtime(log_path, world=world) as (rt, _, _):
        scripts = [ThreadScript(f"t{i}") for i in range(threads)]
        for s in scripts:
            await rt.post(s.start("fake", "/tmp", "/tmp"))
            await rt.post(s.user("go"))
        await rt.wait_quiet()
        batches = [
            [
                AgentEventReceived(
                    thread_id=s.thread_id,
                    action_id=f"x{i}",
                    at=s.now,
                    run_id="r1",
                    session_id=None,
                    event=E.TextDelta(text="tok "),
                )
                for i in range(per_thread)
            ]
            for s in scripts
        ]
        start = time.perf_counter()
        for i in range(per_thread):
            for batch in batches:
                await rt.post(batch[i])
        await rt.wait_quiet()
        rt.log.flush()
        return threads * per_thread / (time.perf_counter() - start)


def actor_rate(threads: int, per_thread: int, durable: bool) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        cwd = os.getcwd()
        os.chdir(tmp)  # the in-memory log's lock file lands here
        try:
            path = os.path.join(tmp, "bench.db") if durable else ":memory:"
            return trio.run(_actor_rate, threads, per_thread, path)
        finally:
            os.chdir(cwd)


def run(quick: bool) -> dict:
    runs = 20 if quick else 300
    repeats = 1 if quick else 5
    actions = realistic_actions(runs)
    rate, samples = median_of(lambda: transition_rate(actions), repeats)
    result: dict = {
        "transition": {
            "actions": len(actions),
            "calls_per_s": round(rate),
            "runs": [round(x) for x in samples],
        },
        "actor": {},
    }
    shapes = [(1, 300), (100, 10), (10, 2)] if quick else [(1, 20_000), (100, 300), (10_000, 4)]
    for threads, per_thread in shapes:
        for durable in (False, True):
            label = f"{threads}_threads_{'sqlite' if durable else 'memory'}"
            with timed() as t:
                rate, samples = median_of(
                    lambda n=threads, k=per_thread, d=durable: actor_rate(n, k, d),
                    # 10,000 threads take a minute to set up each time: one run of those.
                    1 if quick or threads >= 10_000 else 3,
                )
            result["actor"][label] = {
                "threads": threads,
                "actions": threads * per_thread,
                "actions_per_s": round(rate),
                "runs": [round(x) for x in samples],
                "wall_s": round(t.wall, 2),
            }
    return result
