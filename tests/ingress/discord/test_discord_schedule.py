"""``/schedule add|list|cancel`` and ``/verbosity`` through the real discord.py client against
the fake Discord, into a sink that folds them with the real transition."""

from __future__ import annotations

import time
from pathlib import Path

from test_discord_ingress import _start_thread

from threadspindle.runtime.core.actions import (
    ScheduleAdded,
    ScheduleCancelled,
    SchedulesListed,
    VerbositySet,
)
from threadspindle.testkit.fake_discord.harness import SinkRuntime, World, running_bot, wait_for
from threadspindle.testkit.fake_discord.stack import discord_stack


async def test_schedule_and_verbosity_commands_become_their_actions(world: World) -> None:
    runtime = SinkRuntime()
    async with running_bot(world, runtime):
        thread = await _start_thread(world, runtime)
        fake = world.fake
        before = time.time()
        fake.run_command(thread, world.alice, "schedule add", when="in 2h", prompt="check CI")
        fake.run_command(
            thread, world.alice, "schedule add", when="*/30 * * * *", prompt="poll the queue"
        )
        fake.run_command(thread, world.alice, "schedule list")
        fake.run_command(thread, world.alice, "schedule cancel", id="s1")
        fake.run_command(thread, world.alice, "verbosity", level="tools")
        actions = await wait_for(lambda: runtime.actions, lambda a: len(a) >= 6)
        once, cron, listed, cancelled, verbosity = actions[1:6]
        assert isinstance(once, ScheduleAdded) and once.text == "check CI"
        assert before + 7200 <= once.due_at <= time.time() + 7200 and once.cron is None
        assert once.author_id == str(world.alice) and once.label == "in 2h"
        assert isinstance(cron, ScheduleAdded) and cron.cron == "*/30 * * * *"
        assert isinstance(listed, SchedulesListed)
        assert isinstance(cancelled, ScheduleCancelled) and cancelled.schedule_id == "s1"
        assert isinstance(verbosity, VerbositySet) and verbosity.verbosity == "tools"
        state = runtime.snapshot(str(thread))
        assert [s.id for s in state.schedules] == ["s2"] and state.verbosity == "tools"


async def test_a_when_that_is_no_time_is_answered_to_the_user_alone(world: World) -> None:
    runtime = SinkRuntime()
    async with running_bot(world, runtime):
        thread = await _start_thread(world, runtime)
        asked = world.fake.run_command(
            thread, world.alice, "schedule add", when="sometime", prompt="x"
        )
        interaction = await wait_for(
            lambda: world.fake.interaction(asked), lambda i: bool(i.callbacks)
        )
        kind, data = interaction.callbacks[0]
        assert kind == 4 and "no time, delay or cron expression" in data["content"]
        assert data["flags"] & 64  # ephemeral
        assert runtime.of_kind("schedule_added") == []


async def test_verbosity_tools_shows_one_line_per_tool_end_to_end(
    world: World, tmp_path: Path
) -> None:
    async with discord_stack(world, tmp_path) as stack:
        thread = await stack.start_thread()
        world.fake.run_command(thread, world.alice, "verbosity", level="tools")
        await wait_for(lambda: stack.runtime.snapshot(str(thread)).verbosity == "tools")
        world.fake.send_message(thread, world.alice, "TOOLS please")
        messages = await stack.until_footers(thread, 1)
        shown = "\n".join(m.content for m in messages)
        assert "All done." in shown
        assert "Bash(ls) ✓" in shown and "Bash(pytest -q) ✓" in shown
        assert "ok 1" not in shown and "ok 3" not in shown  # no tool output
        world.fake.run_command(thread, world.alice, "verbosity", level="text")
        await wait_for(lambda: stack.runtime.snapshot(str(thread)).verbosity == "text")
        world.fake.send_message(thread, world.alice, "TOOLS again")
        before = {m.id for m in messages}
        messages = await stack.until_footers(thread, 2)
        second = "\n".join(m.content for m in messages if m.id not in before)
        assert "All done." in second and "🔧" not in second  # only the answer


async def test_a_command_still_being_acknowledged_at_shutdown_is_answered_first(
    world: World,
) -> None:
    """The acknowledgement goes out beside the action, not before it (``SpindleBot._defer``),
    so a bot can be told to stop while one is on its way. Closing the HTTP session under it
    failed it, and the error handler's own answer then raised "Session is closed" out of the
    asyncio loop (a CI failure): close() now lets it land."""
    runtime = SinkRuntime()
    async with running_bot(world, runtime):
        thread = await _start_thread(world, runtime)
        world.fake.rest.callback_delay_s = 0.5
        asked = world.fake.run_command(thread, world.alice, "verbosity", level="tools")
        await wait_for(lambda: runtime.of_kind("verbosity_set"), bool)
        assert world.fake.interaction(asked).callbacks == []  # still on its way
    kind, _ = world.fake.interaction(asked).callbacks[0]
    assert kind == 5  # deferred ("thinking..."), before the client closed
