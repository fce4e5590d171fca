"""``/steer``, ``/btw`` and ``/fork`` through the real discord.py client against the fake
Discord, with the scripted fake agent (which steers and forks): a steer reaches the running
turn without interrupting it; ``/btw`` opens a new thread in the channel whose forked
conversation answers the question while the first thread's run goes on."""

from __future__ import annotations

from pathlib import Path

from threadspindle.ingress.thread_commands import COMMANDS as THREAD_COMMANDS
from threadspindle.testkit.fake_discord.harness import World, wait_for
from threadspindle.testkit.fake_discord.stack import discord_stack


async def test_steer_suffix_and_command_reach_the_running_turn(
    world: World, tmp_path: Path
) -> None:
    async with discord_stack(world, tmp_path) as stack:
        names = {c["name"] for c in world.fake.commands(world.guild)}
        # Discord's slash commands carry every thread command the text platforms read.
        discord_name = {"end": "conversation", "clear_queue": "clear-queue"}
        assert {discord_name.get(name, name) for name, _, _ in THREAD_COMMANDS} <= names
        thread = await stack.start_thread()
        world.fake.send_message(thread, world.alice, "LONGTOOL work")
        await wait_for(lambda: any("long tool" in m.content for m in world.fake.messages(thread)))
        world.fake.send_message(thread, world.alice, "also add tests steer")
        interaction = world.fake.run_command(thread, world.alice, "steer", message="and docs")
        await wait_for(lambda: len(stack.agents.steered) == 2)
        assert [t for _, t in stack.agents.steered] == ["also add tests", "and docs"]
        assert stack.agents.interrupts == []  # the turn was never interrupted
        assert [t for _, t in stack.agents.delivered] == ["LONGTOOL work"]
        await wait_for(lambda: world.fake.interaction_replies(interaction) is not None)
        await wait_for(
            lambda: "(added to this turn): also add tests" in world.fake.transcript(thread)
        )


async def test_btw_opens_a_forked_thread_beside_this_one(world: World, tmp_path: Path) -> None:
    async with discord_stack(world, tmp_path) as stack:
        thread = await stack.start_thread()
        world.fake.send_message(thread, world.alice, "hi")
        await stack.until_footers(thread, 1)
        world.fake.send_message(thread, world.alice, "LONGTOOL work")
        await wait_for(lambda: any("long tool" in m.content for m in world.fake.messages(thread)))
        before = set(world.fake.threads(world.channel))
        world.fake.run_command(thread, world.alice, "btw", question="what is foo?")
        (side,) = await wait_for(lambda: set(world.fake.threads(world.channel)) - before)
        await stack.until_footers(side, 1)
        assert "what is foo?" in [text for _, text in stack.agents.delivered]
        assert len(stack.agents.forks) == 1
        await wait_for(lambda: f"Forked into <#{side}>" in world.fake.transcript(thread))
        assert stack.agents.interrupts == []  # the run in the first thread goes on
