"""Workspace commands on Discord, through the real discord.py client against the fake
Discord: `!` is a shell command (refused here: nobody is on the shell allow-list), not a
prompt; /undo and /worktree are registered slash commands answered by the core."""

from __future__ import annotations

from pathlib import Path

from threadspindle.testkit.fake_discord.harness import World, wait_for
from threadspindle.testkit.fake_discord.stack import discord_stack


async def test_bang_and_workspace_slash_commands(world: World, tmp_path: Path) -> None:
    async with discord_stack(world, tmp_path) as stack:
        thread = await stack.start_thread()
        world.fake.send_message(thread, world.alice, "!touch made-by-shell")
        undo = world.fake.run_command(thread, world.alice, "undo")
        replies = await wait_for(lambda: world.fake.interaction_replies(undo))
        assert [r.content for r in replies] == ["Nothing to undo: no run was checkpointed here."]
        state = stack.runtime.snapshot(str(thread))
        assert state is not None and state.counters.rejected == 1  # the shell command
        assert stack.agents.delivered == []  # "!" is no prompt
        listing = world.fake.run_command(thread, world.alice, "worktree list")
        (reply,) = await wait_for(lambda: world.fake.interaction_replies(listing))
        assert reply.content == "Listing worktrees…"  # (run_command finds only registered ones)


async def test_a_project_channel_with_worktree_asks_for_one_before_the_first_prompt(
    world: World, tmp_path: Path
) -> None:
    from threadspindle.ingress.discord.settings import ProjectChannel

    project = ProjectChannel(
        channel_id=world.project_channel, agent="codex", workdir=world.workdir, worktree=True
    )
    # This stack has no workspace port: the worktree job answers "not available", and the
    # prompt that waited for it goes on in the project's workdir.
    async with discord_stack(world, tmp_path, project_channels=(project,)) as stack:
        world.fake.send_message(world.project_channel, world.alice, "fix the bug")
        await wait_for(lambda: stack.agents.delivered)
        (thread,) = [t for t in stack.runtime.snapshots() if t != str(world.project_channel)]
        state = stack.runtime.snapshot(thread)
        assert state is not None and state.conversation is not None
        assert f"worktree-{thread}" in state.recent_action_ids
        assert [text for _, text in stack.agents.delivered] == ["fix the bug"]
        messages = await wait_for(
            lambda: [m.content for m in world.fake.messages(int(thread))],
            lambda texts: any("workspaces are not available" in t for t in texts),
        )
        assert any(t.startswith("Creating worktree thread-") for t in messages)
