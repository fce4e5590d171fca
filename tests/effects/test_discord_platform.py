"""DiscordPlatform through the real discord.py client against the fake Discord: sends,
edits, deletes, typing, replies to deferred interactions, components, nonces, and how
HTTP failures become PlatformError."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from threadspindle.effects.discord_platform import DiscordPlatform, discord_nonce
from threadspindle.effects.platform import PlatformError, SelectMenu
from threadspindle.effects.render import StreamRenderer
from threadspindle.effects.render_pacing import RenderError
from threadspindle.effects.request_budget import DISCORD_BUDGET, RequestBudget
from threadspindle.runtime.core.effect_types import Button, PostOutput, SealOutput
from threadspindle.testkit.fake_discord.harness import (
    SinkRuntime,
    World,
    fake_world,
    running_bot,
    wait_for,
)

SUPPRESS_EMBEDS = 4
EPHEMERAL = 64


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    with fake_world(tmp_path) as built:
        yield built


async def test_send_edit_delete_and_typing(world: World) -> None:
    channel = str(world.channel)
    async with running_bot(world, SinkRuntime()) as bot:
        platform = bot.platform
        first = await platform.send(channel, "see https://example.org/x")
        second = await platform.send(channel, "second")
        await platform.edit(channel, first, "see <https://example.org/x> (edited)")
        await platform.delete(channel, second)
        await platform.delete(channel, second)  # deleting twice is not an error
        await platform.typing(channel)
        (message,) = world.fake.messages(world.channel)
        assert message.id == int(first)
        assert message.content == "see <https://example.org/x> (edited)"
        assert message.flags & SUPPRESS_EMBEDS  # link previews stay off after the edit
        assert len(world.fake.typing_times(world.channel)) == 1


async def test_a_repeated_nonce_posts_once(world: World) -> None:
    channel = str(world.channel)
    async with running_bot(world, SinkRuntime()) as bot:
        first = await bot.platform.send(channel, "only once", nonce="t/r1/0")
        again = await bot.platform.send(channel, "only once", nonce="t/r1/0")
        other = await bot.platform.send(channel, "another", nonce="t/r1/1")
        assert first == again != other
        assert [m.content for m in world.fake.messages(world.channel)] == ["only once", "another"]
        assert world.fake.message(int(first)).nonce == discord_nonce("t/r1/0")
        assert len(discord_nonce("x" * 500)) <= 25


async def test_a_repeated_nonce_with_newer_text_brings_the_message_to_it(world: World) -> None:
    """The nonce of a message a crashed process posted: Discord answers with that message,
    which still shows the old text; the send edits it to the text wanted now."""
    channel = str(world.channel)
    async with running_bot(world, SinkRuntime()) as bot:
        first = await bot.platform.send(channel, "w0 w1", nonce="t/r1/0#0")
        again = await bot.platform.send(channel, "w0 w1 w2 w3", nonce="t/r1/0#0")
        assert first == again
        assert [m.content for m in world.fake.messages(world.channel)] == ["w0 w1 w2 w3"]


async def test_a_renderer_made_again_after_a_crash_finishes_the_unrecorded_post(
    world: World,
) -> None:
    """A gateway dies after posting a streamed answer's first part and before recording
    the post: its successor's renderer (which knows nothing of that post) sends the same
    output again. The nonce (output key and the message's place in it, not the channel's
    message count) is the same, so the answer ends in the one message, whole."""
    channel = str(world.channel)
    async with running_bot(world, SinkRuntime()) as bot:
        dead = StreamRenderer(bot.platform, channel)
        await dead.apply(PostOutput(key="t/r0/0", kind="notice", text="Started."))
        # A post Discord refused for good: made, never posted, nothing to record; so the
        # dead renderer had made a message more than its successor knows of.
        world.fake.inject_fault(403, method="POST", path_contains="/messages")
        with pytest.raises(RenderError, match="t/r0/1"):
            await dead.apply(PostOutput(key="t/r0/1", kind="notice", text="refused"))
            await dead.flush()
        await dead.apply(PostOutput(key="t/r1/0", kind="text", text="w0 w1 w2"))
        await dead.flush()
        assert [m.content for m in world.fake.messages(world.channel)][-1] == "w0 w1 w2"
        # Its successor was seeded with what was recorded: not the answer's post.
        successor = StreamRenderer(bot.platform, channel)
        successor.known("t/r0/0", dead.message_ids("t/r0/0"))
        words = " ".join(f"w{i}" for i in range(40))
        await successor.apply(PostOutput(key="t/r1/0", kind="text", text=words))
        await successor.apply(SealOutput(key="t/r1/0"))
        await successor.flush()
        contents = [m.content for m in world.fake.messages(world.channel)]
        assert contents == ["Started.", words]
        assert successor.message_ids("t/r1/0") == dead.message_ids("t/r1/0")


async def test_buttons_and_menus_are_components_with_the_effect_ids(world: World) -> None:
    channel = str(world.channel)
    async with running_bot(world, SinkRuntime()) as bot:
        asked = await bot.platform.send(
            channel,
            "Run tests?",
            buttons=(
                Button(label="Accept", action="permission:allow:p1"),
                Button(label="Deny", action="permission:deny:p1"),
            ),
        )
        menu = await bot.platform.send(
            channel,
            "Which?",
            menu=SelectMenu(custom_id="question:q1", options=("a", "b", "c"), multiple=True),
        )
        buttons = world.fake.message(int(asked)).components[0]["components"]
        assert [(b["label"], b["custom_id"]) for b in buttons] == [
            ("Accept", "permission:allow:p1"),
            ("Deny", "permission:deny:p1"),
        ]
        (select,) = world.fake.message(int(menu)).components[0]["components"]
        assert select["custom_id"] == "question:q1" and select["max_values"] == 3
        assert [o["value"] for o in select["options"]] == ["a", "b", "c"]
        # An edit with buttons=() removes them (a dismissed prompt).
        await bot.platform.edit(channel, asked, "Run tests? (denied)", buttons=())
        assert world.fake.message(int(asked)).components == []


async def test_reply_answers_the_deferred_interaction_or_the_channel(world: World) -> None:
    runtime = SinkRuntime()
    async with running_bot(world, runtime) as bot:
        world.fake.run_command(world.channel, world.alice, "claude start", workdir=world.workdir)
        (start,) = await wait_for(lambda: runtime.of_kind("conversation_started"))
        interaction_id = int(start.action_id.removeprefix("int-"))
        await bot.platform.reply(start.thread_id, start.action_id, "Started claude.")
        await bot.platform.reply(
            start.thread_id,
            start.action_id,
            "Queued (position 1).",
            ephemeral=True,
            buttons=(Button(label="Remove from queue", action="remove_queued:x"),),
        )
        first, second = world.fake.interaction_replies(interaction_id)
        assert first.content == "Started claude." and not first.ephemeral
        assert second.ephemeral and second.components
        # A first answer that is ephemeral must not land in the public "thinking" message.
        status = world.fake.run_command(int(start.thread_id), world.alice, "status")
        (asked,) = await wait_for(lambda: runtime.of_kind("status"))
        await bot.platform.reply(asked.thread_id, asked.action_id, "Idle.", ephemeral=True)
        (only,) = world.fake.interaction_replies(status)
        assert only.content == "Idle." and only.ephemeral
        assert "Idle." not in world.fake.transcript(int(start.thread_id))
        # A command that came as a message (" queue" suffix) is answered in the channel.
        thread = int(start.thread_id)
        source = world.fake.send_message(thread, world.alice, "later. queue")
        await bot.platform.reply(start.thread_id, f"msg-{source}", "Queued (position 1).")
        assert world.fake.transcript(thread).endswith("spindle: Queued (position 1).")


async def test_http_failures_become_platform_errors(world: World) -> None:
    channel = str(world.channel)
    async with running_bot(world, SinkRuntime()) as bot:
        # Longer than max_ratelimit_timeout: discord.py gives up and we get retry_after.
        world.fake.inject_fault(429, path_contains="/messages", retry_after=60.0)
        with pytest.raises(PlatformError) as limited:
            await bot.platform.send(channel, "x")
        assert limited.value.retry_after == pytest.approx(60.0)
        assert limited.value.retryable

        world.fake.inject_fault(503, path_contains="/messages")
        with pytest.raises(PlatformError) as unavailable:
            await bot.platform.send(channel, "x")
        assert unavailable.value.retryable and unavailable.value.retry_after is None

        with pytest.raises(PlatformError) as missing:
            await bot.platform.edit(channel, "12345", "no such message")
        assert not missing.value.retryable

        await bot.platform.send(channel, "fine again")
        assert [m.content for m in world.fake.messages(world.channel)] == ["fine again"]


def test_rate_limit_headers_reach_the_budget() -> None:
    now = [100.0]
    budget = RequestBudget(DISCORD_BUDGET, clock=lambda: now[0])
    platform = DiscordPlatform(client=None)  # type: ignore[arg-type]  # no call is made
    platform.observe_response("PATCH", "/api/v10/channels/7/messages/9", 200, {})  # no budget
    platform.budget = budget
    edit = "/api/v10/channels/7/messages/9"
    # a bucket stricter than the documented one resizes the channel's rule
    platform.observe_response(
        "PATCH", edit, 200, {"X-RateLimit-Limit": "3", "X-RateLimit-Reset-After": "6.0"}
    )
    assert budget.statistics().observed == 1
    # a spent bucket holds the kind in that channel until it resets, nowhere else
    platform.observe_response(
        "PATCH",
        edit,
        200,
        {"X-RateLimit-Limit": "3", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset-After": "2"},
    )
    assert budget.statistics().spent == 1
    assert budget._channel_free_at("7", False, "edit", now[0]) == 102.0
    assert budget._channel_free_at("8", False, "edit", now[0]) == 100.0
    assert budget._channel_free_at("7", False, "send", now[0]) == 100.0
    # a 429 on a route holds that route's kind; a global one holds everything
    platform.observe_response("POST", "/api/v10/channels/8/messages", 429, {"Retry-After": "3"})
    assert budget._channel_free_at("8", False, "send", now[0]) == 103.0
    platform.observe_response(
        "GET", "/api/v10/users/@me", 429, {"Retry-After": "1.5", "X-RateLimit-Global": "true"}
    )
    assert budget.statistics().held_until == 101.5 and budget.statistics().holds == 2
    # other routes, and unreadable headers, change nothing
    platform.observe_response("GET", "/api/v10/gateway/bot", 200, {"X-RateLimit-Limit": "x"})
    platform.observe_response("PATCH", edit, 200, {"X-RateLimit-Limit": "x"})
    assert budget.statistics().observed == 1
