"""The fake Discord itself, driven by the real discord.py client: login, command sync,
messages, interactions, 429 handling by discord.py's rate limiter, gateway resume."""

from __future__ import annotations

import discord
import pytest
import trio
import trio_asyncio  # type: ignore[import-untyped]

from threadspindle.testkit.fake_discord.harness import SinkRuntime, World, running_bot, wait_for


async def test_client_logs_in_registers_commands_and_sees_the_guild(world: World) -> None:
    runtime = SinkRuntime()
    async with running_bot(world, runtime) as bot:
        guild = bot.get_guild(world.guild)
        assert guild is not None and guild.get_channel(world.channel) is not None
        names = {c["name"] for c in world.fake.commands(world.guild)}
        assert {"claude", "codex", "gemini", "opencode", "conversation", "workdir"} <= names
        assert {"status", "model", "queue", "clear-queue", "abort"} <= names
        claude = next(c for c in world.fake.commands(world.guild) if c["name"] == "claude")
        assert {o["name"] for o in claude["options"]} == {"start", "resume", "conversations"}
        assert world.fake.gateway_counts()["identifies"] == 1
    paths = [c.path for c in world.fake.rest_calls()]
    assert paths[:2] == ["/users/@me", "/oauth2/applications/@me"]


async def test_bot_messages_show_in_the_transcript_with_buttons(world: World) -> None:
    async with running_bot(world, SinkRuntime()) as bot:
        from threadspindle.runtime.core.effect_types import Button

        await bot.platform.send(
            str(world.channel),
            "pick one",
            buttons=(Button(label="Accept", action="permission:allow:r1"),),
        )
        world.fake.send_message(world.channel, world.alice, "hi bot")
        text = world.fake.transcript(world.channel)
        assert text == "spindle: pick one  [Accept]\nalice: hi bot"


async def test_429_is_slept_through_by_discord_py_and_the_message_arrives_once(
    world: World,
) -> None:
    async with running_bot(world, SinkRuntime()) as bot:
        world.fake.inject_fault(429, method="POST", path_contains="/messages", retry_after=0.3)
        started = trio.current_time()
        await bot.platform.send(str(world.channel), "after a rate limit")
        assert trio.current_time() - started >= 0.3
        assert [m.content for m in world.fake.messages(world.channel)] == ["after a rate limit"]
        statuses = [c.status for c in world.fake.rest_calls() if c.path.endswith("/messages")]
        assert statuses == [429, 200]


async def test_gateway_disconnect_resumes_and_replays_missed_events(world: World) -> None:
    runtime = SinkRuntime()
    async with running_bot(world, runtime) as bot:
        seen: list[str] = []
        original = bot.on_message

        async def spy(message):  # type: ignore[no-untyped-def]
            seen.append(message.content)
            await original(message)

        bot.on_message = spy  # type: ignore[method-assign]
        world.fake.disconnect_gateway()
        # Sent while the bot is offline: held by the session and replayed on RESUME.
        for n in range(3):
            world.fake.send_message(world.channel, world.alice, f"missed {n}")
        await wait_for(lambda: seen, lambda s: len(s) >= 3)
        assert seen == ["missed 0", "missed 1", "missed 2"]
        counts = world.fake.gateway_counts()
        assert counts["resumes"] == 1 and counts["identifies"] == 1


async def test_history_is_paged_after_a_message_like_discord(world: World) -> None:
    async with running_bot(world, SinkRuntime()) as bot:
        ids = [world.fake.send_message(world.channel, world.alice, f"m{n}") for n in range(230)]
        channel = bot.get_channel(world.channel)
        assert isinstance(channel, discord.TextChannel)

        async def read(**kwargs: object) -> list[str]:
            return [m.content async for m in channel.history(**kwargs)]  # type: ignore[arg-type]

        after = discord.Object(id=ids[9])
        everything = await trio_asyncio.aio_as_trio(read)(limit=None, after=after)
        assert everything == [f"m{n}" for n in range(10, 230)]  # oldest first, all pages
        newest = await trio_asyncio.aio_as_trio(read)(limit=3)
        assert newest == ["m229", "m228", "m227"]
        pages = [c for c in world.fake.rest_calls() if c.path.endswith("/messages")]
        gets = [c for c in pages if c.method == "GET"]
        assert len(gets) == 4  # 100 + 100 + 20 after m9, then the 3 newest


async def test_a_lost_session_cannot_resume_and_what_happened_meanwhile_is_lost(
    world: World,
) -> None:
    runtime = SinkRuntime()
    async with running_bot(world, runtime) as bot:
        seen: list[str] = []
        connects: list[int] = []
        original = bot.on_message

        async def spy(message):  # type: ignore[no-untyped-def]
            seen.append(message.content)
            await original(message)

        async def connected() -> None:
            connects.append(1)

        bot.on_message = spy  # type: ignore[method-assign]
        bot.on_connect = connected  # type: ignore[method-assign]
        world.fake.invalidate_session(hold=True)
        world.fake.send_message(world.channel, world.alice, "while offline")
        world.fake.release_gateway()
        await wait_for(lambda: connects)
        world.fake.send_message(world.channel, world.alice, "back online")
        await wait_for(lambda: seen)
        assert seen == ["back online"]  # no replay: the session was new
        counts = world.fake.gateway_counts()
        assert counts["identifies"] == 2 and counts["resumes"] == 0
        assert counts["invalid_sessions"] == 1


async def test_only_active_threads_come_with_the_guild_and_a_message_revives_one(
    world: World,
) -> None:
    archived = world.fake.create_thread(world.channel, "old", world.alice)
    active = world.fake.create_thread(world.channel, "new", world.alice)
    world.fake.archive_thread(archived)
    async with running_bot(world, SinkRuntime()) as bot:
        assert isinstance(bot.get_channel(active), discord.Thread)
        assert bot.get_channel(archived) is None  # as Discord: not sent with the guild
        world.fake.send_message(archived, world.alice, "hello again")
        thread = await wait_for(lambda: bot.get_channel(archived))
        assert isinstance(thread, discord.Thread) and not thread.archived


async def test_a_refused_token_fails_start_up_with_discord_py_s_login_error(world: World) -> None:
    world.fake.inject_fault(401, method="GET", path_contains="/users/@me")
    with pytest.raises(BaseException) as failed:
        async with running_bot(world, SinkRuntime()):
            raise AssertionError("the bot must not become ready")
    login_errors = [e for e in _leaves(failed.value) if isinstance(e, discord.LoginFailure)]
    assert login_errors and "token" in str(login_errors[0]).lower()


def _leaves(error: BaseException) -> list[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in _leaves(inner)]
    return [error]
