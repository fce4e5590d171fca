"""What an idle thread keeps (issue 18: an idle actor ≤ 20 KB RSS).

An idle thread has one task besides its actor: the chat lane that showed its replies. The
agent lane starts with the first effect for an agent, the ticker runs only while a run is
active, and a thread keeps neither its last action nor its last effects while it waits.
The bytes an idle thread holds (tracemalloc, Python's allocations, 300 threads) stay well
under the target; ``python -m bench --only memory`` measures RSS and the breakdown."""

from __future__ import annotations

import gc
import tracemalloc

import pytest
import trio
from runtime_harness import Chat, running, until

from threadspindle.runtime.core import actions as A


@pytest.fixture
def autojump(autojump_clock: trio.testing.MockClock) -> trio.testing.MockClock:
    return autojump_clock


def _task_names(rt: object, thread_id: str) -> list[str]:
    actor = rt.get(thread_id)  # type: ignore[attr-defined]
    return sorted(task.name.rsplit(".", 1)[-1] for task in actor._nursery.child_tasks)


async def test_an_idle_thread_holds_one_task_and_few_bytes(tmp_path, autojump) -> None:
    async with running(tmp_path, tick_interval_s=1.0) as rt:
        # Warm up (first-use caches, the log's statements), then count what threads add.
        await Chat(rt, "warm", str(tmp_path)).send(A.StatusRequested(**Chat(rt, "warm")._base()))
        await rt.wait_quiet()
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            for i in range(300):
                chat = Chat(rt, f"idle{i}", str(tmp_path))
                await chat.send(A.StatusRequested(**chat._base()))
            await rt.wait_quiet()
            gc.collect()
            per_thread = (tracemalloc.get_traced_memory()[0] - before) / 300
        finally:
            tracemalloc.stop()
        # ~12.7 KB at 10,000 threads (docs/performance.md), 31.8 KB before issue 18 part 3;
        # this includes the recording fake chat's copy of every reply it showed.
        assert per_thread < 16_000, f"{per_thread:.0f} bytes per idle thread"
        assert _task_names(rt, "idle0") == ["_run_lane"]  # the chat lane only

        # A run: the agent lane, the listener and the ticker come, the ticker goes after.
        chat = Chat(rt, "busy", str(tmp_path))
        await chat.start()
        await chat.say("hello")
        actor = rt.get("busy")
        await until(lambda: actor._ticking and rt.snapshot("busy").run is not None)
        running_tasks = _task_names(rt, "busy")
        assert running_tasks.count("_run_lane") == 2 and "_ticker" in running_tasks
        await until(lambda: rt.snapshot("busy").run is None and actor.is_quiet())
        await trio.sleep(2.0)  # the ticker's next wake-up finds no run and ends
        assert not actor._ticking and "_ticker" not in _task_names(rt, "busy")
        # A second run starts it again.
        await chat.say("again")
        await until(lambda: actor._ticking)
        await until(lambda: rt.snapshot("busy").run is None and actor.is_quiet())
