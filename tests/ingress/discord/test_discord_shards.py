"""Sharded bots (``ShardedSpindleBot``, one per gateway node) against the fake Discord serving
two shards: each bot identifies with its ``[shard, 2]``, is told only of its shard's guild,
and receives only the events of that guild, as Discord routes them by
``(guild_id >> 22) % shard_count``."""

from __future__ import annotations

import time
from pathlib import Path

import trio
import trio_asyncio

from threadspindle.ingress.cluster_gateway import discord_shard
from threadspindle.ingress.discord.bot import ShardedSpindleBot
from threadspindle.ingress.discord.host import hosted_bot
from threadspindle.ingress.discord.settings import DiscordSettings, ProjectChannel
from threadspindle.testkit.fake_discord import FakeDiscord
from threadspindle.testkit.fake_discord.harness import SinkRuntime, wait_for


async def test_each_sharded_bot_gets_only_its_shards_guild(tmp_path: Path) -> None:
    with FakeDiscord() as fake:
        guilds: dict[int, int] = {}  # shard -> the first guild made in it
        made: list[int] = []
        while len(guilds) < 2:  # snowflakes carry their millisecond: one guild per shard
            guild = fake.add_guild(f"g{len(made)}")
            made.append(guild)
            guilds.setdefault(discord_shard(guild, 2), guild)
            time.sleep(0.002)
        project = {shard: fake.add_channel(guild, "project") for shard, guild in guilds.items()}
        alice = fake.add_user("alice")

        def settings(shard: int) -> DiscordSettings:
            return DiscordSettings(
                token="fake-token",
                rest_base_url=fake.rest_base,
                gateway_url=fake.gateway_url,
                guild_ids=tuple(guilds.values()),
                allowed_user_ids=(alice,),
                project_channels=tuple(
                    ProjectChannel(channel_id=channel, agent="echo", workdir=str(tmp_path))
                    for channel in project.values()
                ),
                default_workdir=str(tmp_path),
                guild_ready_timeout_s=0.05,
                shard_ids=(shard,),
                shard_count=2,
            )

        sinks = {0: SinkRuntime(), 1: SinkRuntime()}
        async with (
            trio_asyncio.open_loop(),
            hosted_bot(settings(0), sinks[0]) as bot0,
            hosted_bot(settings(1), sinks[1]) as bot1,
        ):
            bots = {0: bot0, 1: bot1}
            assert all(isinstance(bot, ShardedSpindleBot) for bot in bots.values())
            assert fake.gateway_counts()["identifies"] == 2
            for shard, bot in bots.items():
                assert bot.shard_ids == [shard] and bot.shard_count == 2
                # Every guild made while looking for one per shard exists: each bot is told
                # of exactly those of its shard.
                assert {g.id for g in bot.guilds} == {
                    g for g in made if discord_shard(g, 2) == shard
                }
            for shard in (0, 1):
                await trio.to_thread.run_sync(
                    fake.send_message, project[shard], alice, f"to shard {shard}"
                )
            for shard in (0, 1):
                prompts = await wait_for(
                    lambda shard=shard: sinks[shard].of_kind("user_message"), timeout=20
                )
                assert [p.text for p in prompts] == [f"to shard {shard}"]  # type: ignore[attr-defined]
                [thread] = fake.threads(project[shard])
                assert {a.thread_id for a in sinks[shard].actions} == {str(thread)}
