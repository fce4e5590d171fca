"""The ``schedule_wakeup`` tool through the official MCP client over HTTP: it posts the
calling thread's wake-up into the runtime, which fires it as a queued prompt; a message
from a person cancels it; without a runtime attached it is a tool error."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import trio
from mcp_kit import TOKEN, call, call_error, open_client

from threadspindle.effects.mcp_manager import ProcessManager
from threadspindle.runtime.core.actions import Action, ScheduleAdded

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "runtime"))
from runtime_harness import Chat, running, until  # noqa: E402

THREAD = {"X-Spindle-Thread": "thread-1"}


async def test_the_tool_posts_a_wakeup_for_the_calling_thread(manager: ProcessManager) -> None:
    posted: list[Action] = []

    async def post(action: Action) -> None:
        posted.append(action)

    manager.wakeups.attach(post)
    before = time.time()
    async with open_client(manager.url, TOKEN, THREAD) as client:
        result = await call(client, "schedule_wakeup", in_minutes=20, prompt="check the CI")
    (action,) = posted
    assert isinstance(action, ScheduleAdded) and action.wakeup
    assert action.thread_id == "thread-1" and action.text == "check the CI"
    assert before + 1200 <= action.due_at <= time.time() + 1200
    assert result["thread_id"] == "thread-1" and "cancels it" in result["note"]


async def test_without_a_runtime_or_a_thread_it_is_a_tool_error(manager: ProcessManager) -> None:
    async with open_client(manager.url, TOKEN, THREAD) as client:
        error = await call_error(client, "schedule_wakeup", in_minutes=5, prompt="x")
        assert "need Spindle's runtime" in error
        for too_soon in (0, 0.001, 0.99):  # a minute ahead at the soonest
            error = await call_error(client, "schedule_wakeup", in_minutes=too_soon, prompt="x")
            assert "in_minutes" in error and "greater than or equal to 1" in error
    manager.wakeups.attach(lambda action: trio.lowlevel.checkpoint())
    async with open_client(manager.url, TOKEN) as client:  # the operator, no thread
        error = await call_error(client, "schedule_wakeup", in_minutes=5, prompt="x")
        assert "belongs to a chat thread" in error


async def test_a_wakeup_fires_in_the_runtime_and_a_message_cancels_the_next(
    manager: ProcessManager, tmp_path: Path
) -> None:
    # A wake-up is a minute ahead at the soonest: the runtime's clock is moved on instead
    # of the test waiting (the tool's own clock, which dates the wake-up, is not).
    ahead = [0.0]
    async with running(
        tmp_path, clock=lambda: time.time() + ahead[0], schedule_interval_s=0.1
    ) as rt:
        manager.wakeups.attach(rt.post)
        chat = Chat(rt, "thread-1", str(tmp_path))
        await chat.start()
        async with open_client(manager.url, TOKEN, THREAD) as client:
            await call(client, "schedule_wakeup", in_minutes=1, prompt="wake: check CI")
            await until(lambda: len(rt.snapshot("thread-1").schedules) == 1)
            await trio.sleep(0.5)
            assert rt.agents.delivered == []
            ahead[0] = 61.0
            await until(lambda: rt.snapshot("thread-1").counters.completed == 1, timeout=20)
            assert [t for _, t in rt.agents.delivered] == ["wake: check CI"]
            await call(client, "schedule_wakeup", in_minutes=60, prompt="much later")
        await until(lambda: len(rt.snapshot("thread-1").schedules) == 1)
        await chat.say("I'm back")
        await until(lambda: rt.snapshot("thread-1").schedules == ())
        await rt.wait_quiet("thread-1")
        notices = rt.chat.texts("thread-1", "notice")
        assert any("Cancelled the agent's wake-up (s2)" in n for n in notices)
        assert any("The agent will be woken up" in n for n in notices)
