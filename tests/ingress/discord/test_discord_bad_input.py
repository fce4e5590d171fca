"""Bad input to the Discord bot, through the real discord.py client against the fake
Discord with the live runtime behind it (issue 19.4): every slash command is answered
whatever its options hold, a refused option says why (only to its author), autocomplete
survives anything typed, relative workdirs are taken from the conversation (or the default
workdir), and nothing the agent says can mention everyone."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from threadspindle.testkit.fake_discord.harness import (
    SinkRuntime,
    World,
    fake_world,
    running_bot,
    wait_for,
)
from threadspindle.testkit.fake_discord.stack import Stack, discord_stack, is_footer

EPHEMERAL = 64


async def _answer(stack: Stack, interaction: int) -> str:
    replies = await wait_for(lambda: stack.world.fake.interaction_replies(interaction))
    return "\n".join(m.content for m in replies)


async def test_a_nul_in_a_workdir_is_refused_to_its_author_and_the_bot_goes_on(
    world: World, tmp_path: Path
) -> None:
    async with discord_stack(world, tmp_path) as stack:
        fake = world.fake
        thread = await stack.start_thread()
        threads_before = fake.threads(world.channel)
        refused = {
            "workdir set": fake.run_command(thread, world.alice, "workdir set", path="a\0b"),
            "start in channel": fake.run_command(
                world.channel, world.alice, "claude start", workdir="a\0b"
            ),
            "start in thread": fake.run_command(
                thread, world.alice, "codex start", workdir="x" * 5000
            ),
            "resume": fake.run_command(thread, world.alice, "claude resume", id="a\0b"),
            "model": fake.run_command(thread, world.alice, "model", name="bad\x1bname"),
        }
        answers = {name: await _answer(stack, i) for name, i in refused.items()}
        assert "The workdir contains a NUL character" in answers["workdir set"]
        assert "The workdir contains a NUL character" in answers["start in channel"]
        assert "The workdir is longer than 4096 bytes" in answers["start in thread"]
        assert "The session id contains a NUL character" in answers["resume"]
        assert "The model name contains a control character" in answers["model"]
        for interaction in refused.values():
            (reply,) = fake.interaction_replies(interaction)
            assert reply.ephemeral  # only the author sees the refusal
        assert fake.threads(world.channel) == threads_before  # no thread for a refused start
        state = stack.runtime.snapshot(str(thread))
        assert state is not None and state.conversation is not None
        assert state.conversation.agent == "claude"  # nothing was applied
        # The bot, the runtime and the thread all go on.
        fake.send_message(thread, world.alice, "still there?")
        await stack.until_footers(thread, 1)


async def test_a_relative_start_workdir_is_taken_from_the_default_workdir(
    world: World, tmp_path: Path
) -> None:
    (Path(world.workdir) / "relative-sub").mkdir()
    async with discord_stack(world, tmp_path) as stack:
        fake = world.fake
        interaction = fake.run_command(
            world.channel, world.alice, "claude start", workdir="relative-sub"
        )
        assert "Started claude in" in await _answer(stack, interaction)
        (thread,) = fake.threads(world.channel)
        state = stack.runtime.snapshot(str(thread))
        assert state is not None and state.conversation is not None
        expected = os.path.realpath(os.path.join(world.workdir, "relative-sub"))
        assert state.conversation.workdir == expected
        # And /workdir set .. from there goes back up, relative to the conversation.
        moved = fake.run_command(thread, world.alice, "workdir set", path="..")
        assert "Workdir set to" in await _answer(stack, moved)
        state = stack.runtime.snapshot(str(thread))
        assert state is not None and state.conversation is not None
        assert state.conversation.workdir == os.path.realpath(world.workdir)


async def test_autocomplete_answers_whatever_is_typed(world: World) -> None:
    async with running_bot(world, SinkRuntime()):
        fake = world.fake
        for typed in ("~nobody\0/x", "a\0b", "\x1b[2J", "x" * 5000, "²"):
            interaction = fake.autocomplete(
                world.channel, world.alice, "workdir set", "path", path=typed
            )
            answered = await wait_for(
                lambda i=interaction: fake.suggestions(i), lambda s: s is not None
            )
            assert answered == []


async def test_agent_text_mentions_nobody(world: World) -> None:
    """Agent output may say @everyone, <@id> or <@&role>: every message the bot sends or
    edits carries allowed_mentions with nothing to parse, so Discord pings nobody."""
    channel = str(world.channel)
    async with running_bot(world, SinkRuntime()) as bot:
        text = f"@everyone @here <@{world.alice}> <@&{world.role}> look"
        sent = await bot.platform.send(channel, text)
        message = world.fake.message(int(sent))
        assert message.content == text
        assert message.allowed_mentions == {"parse": []}
        await bot.platform.edit(channel, sent, text + " again")
        assert world.fake.message(int(sent)).allowed_mentions == {"parse": []}


# --- any option, any message: always an answer ---------------------------------------------

NASTY = st.sampled_from(
    [
        "\0",
        "a\0b",
        "²",
        "٣",
        "\x1b[2J\x1b]0;t\x07",
        "\r\n",
        "~nobody\0/x",
        "../../..",
        "/",
        ".",
        "  queue",
        "\u202e",
        "@everyone",
        "x" * 6000,
    ]
)
TEXT = st.one_of(st.text(min_size=1, max_size=40), NASTY)
COMMAND = st.one_of(
    st.tuples(st.just("workdir set"), st.fixed_dictionaries({"path": TEXT})),
    st.tuples(st.just("claude start"), st.fixed_dictionaries({"workdir": TEXT})),
    st.tuples(st.just("codex resume"), st.fixed_dictionaries({"id": TEXT})),
    st.tuples(st.just("model"), st.fixed_dictionaries({"name": TEXT})),
    st.tuples(st.just("queue"), st.fixed_dictionaries({"message": TEXT})),
    st.tuples(
        st.just("clear-queue"),
        st.fixed_dictionaries({"position": st.integers(-(2**53), 2**53)}),
    ),
    st.tuples(st.sampled_from(["status", "abort", "conversation end"]), st.just({})),
    st.tuples(st.just("message"), st.fixed_dictionaries({"text": TEXT})),
    st.tuples(st.just("attachment"), st.fixed_dictionaries({"name": TEXT})),
)


def _answered_after(messages: list[Any], prompt: str) -> bool:
    """The prompt was posted and a footer (a completed run) came after it."""
    at = next((i for i, m in enumerate(messages) if m.content == prompt), None)
    return at is not None and any(is_footer(m) for m in messages[at + 1 :])


# 25 examples, each a whole bot and runtime: 12-15 s on a quiet machine, 45 s beside four
# CPU hogs, and once past the default 120 s in a 4-worker run on 2 cores.
@pytest.mark.timeout(400)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(COMMAND, min_size=1, max_size=6))
async def test_any_command_is_answered_and_the_bot_survives(
    commands: list[tuple[str, dict[str, Any]]],
) -> None:
    with tempfile.TemporaryDirectory() as tmp, fake_world(tmp) as world:
        async with discord_stack(world, Path(tmp)) as stack:
            fake = world.fake
            thread = await stack.start_thread()
            interactions = []
            for name, options in commands:
                if name == "message":
                    fake.send_message(thread, world.alice, options["text"])
                elif name == "attachment":
                    file = (options["name"], b"\x00bytes", "application/octet-stream")
                    fake.send_message(thread, world.alice, "see file", attachments=(file,))
                else:
                    interactions.append(fake.run_command(thread, world.alice, name, **options))
            for interaction in interactions:
                assert await _answer(stack, interaction)  # every command gets its answer
            # The bot and the runtime still work: a new conversation answers a prompt.
            await _answer(stack, fake.run_command(thread, world.alice, "conversation end"))
            fresh = fake.run_command(thread, world.alice, "claude start", workdir=world.workdir)
            assert "Started claude" in await _answer(stack, fresh)
            fake.send_message(thread, world.alice, "are you alive?")
            await wait_for(
                lambda: fake.messages(thread),
                lambda ms: _answered_after(ms, "are you alive?"),
                timeout=20,
            )
