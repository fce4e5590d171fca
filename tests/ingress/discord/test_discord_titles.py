"""The thread follows the agent's session title: the fake agent reports three titles in a
row (``TITLE``), the fake Discord records the renames (PATCH /channels/<thread>), paced by
the renames window and coalesced to the latest title."""

from __future__ import annotations

from pathlib import Path

from threadspindle.effects.platform import PlatformLimits
from threadspindle.testkit.fake_discord.harness import World, wait_for
from threadspindle.testkit.fake_discord.stack import discord_stack


async def test_the_thread_is_renamed_after_the_agents_title(world: World, tmp_path: Path) -> None:
    limits = PlatformLimits(renames_per_window=2, rename_window_s=2.0)
    async with discord_stack(world, tmp_path, limits=limits) as stack:
        thread = await stack.start_thread()
        channel = world.fake.world.channels[thread]
        assert channel.name.startswith("claude: ")
        world.fake.send_message(thread, world.alice, "TITLE please")
        await stack.until_footers(thread, 1)
        # Titles 1 and 2 fill the window; 3 waits for it, then goes out.
        assert channel.name in ("Session title 2", "Session title 3")
        await wait_for(lambda: channel.name, lambda name: name == "Session title 3", 10)
        assert stack.runtime.snapshot(str(thread)).title == "Session title 3"
        renames = [
            c
            for c in world.fake.rest.calls
            if c.method == "PATCH" and c.path == f"/channels/{thread}"
        ]
        assert len(renames) == 3 and all(c.status == 200 for c in renames)
        assert renames[2].at - renames[0].at >= 1.5  # the third waited for the window
