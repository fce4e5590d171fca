"""Gateway events and slash commands -> runtime actions, through the real discord.py
client against the fake Discord, into a sink that folds them with the real transition."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import trio

from threadspindle.ingress.discord.bot import REFUSAL
from threadspindle.runtime.core.actions import (
    AbortRequested,
    ConversationEnded,
    ConversationResumed,
    ConversationStarted,
    ModelChanged,
    PermissionAnswered,
    QuestionAnswered,
    QueueCleared,
    QueueCommand,
    QueuedItemRemoved,
    SourceMessageDeleted,
    SourceMessageEdited,
    StatusRequested,
    UserMessage,
    WorkdirSet,
)
from threadspindle.testkit.fake_discord.harness import SinkRuntime, World, running_bot, wait_for


async def _start_thread(world: World, runtime: SinkRuntime, user: int | None = None) -> int:
    """``/claude start <workdir>`` in the channel; returns the new thread's id."""
    world.fake.run_command(
        world.channel, user or world.alice, "claude start", workdir=world.workdir
    )
    started = await wait_for(lambda: runtime.of_kind("conversation_started"))
    return int(started[-1].thread_id)


async def test_start_opens_a_thread_and_starts_the_conversation_there(world: World) -> None:
    runtime = SinkRuntime()
    async with running_bot(world, runtime):
        thread = await _start_thread(world, runtime)
        assert world.fake.threads(world.channel) == [thread]
        (start,) = runtime.of_kind("conversation_started")
        assert isinstance(start, ConversationStarted)
        assert start.agent == "claude"
        assert start.resolved_workdir == os.path.realpath(world.workdir)
        # The interaction was deferred at once (type 5), before any action was applied.
        interaction = world.fake.interaction(int(start.action_id.removeprefix("int-")))
        assert [kind for kind, _ in interaction.callbacks] == [5]


async def test_thread_messages_interrupt_queue_edit_and_delete(world: World) -> None:
    runtime = SinkRuntime()
    async with running_bot(world, runtime):
        thread = await _start_thread(world, runtime)
        plain = world.fake.send_message(thread, world.alice, "fix the bug")
        queued = world.fake.send_message(thread, world.alice, "then add tests. queue")
        other = world.fake.send_message(thread, world.alice, "and docs queue")
        await wait_for(lambda: runtime.of_kind("user_message"), lambda m: len(m) == 3)
        first, second, third = runtime.of_kind("user_message")
        assert isinstance(first, UserMessage) and first.interrupt and first.text == "fix the bug"
        assert first.source_message_id == str(plain)
        assert isinstance(second, UserMessage) and not second.interrupt
        assert second.text == "then add tests."
        assert isinstance(third, UserMessage) and not third.interrupt

        world.fake.edit_message(queued, "then add more tests. queue")
        world.fake.edit_message(other, "and docs")  # the suffix edited away: withdrawn
        world.fake.delete_message(plain)
        await wait_for(lambda: runtime.actions, lambda a: len(a) >= 7)
        edited, withdrawn, deleted = runtime.actions[4:7]
        assert isinstance(edited, SourceMessageEdited)
        assert edited.text == "then add more tests." and edited.source_message_id == str(queued)
        assert isinstance(withdrawn, SourceMessageDeleted)
        assert withdrawn.source_message_id == str(other)
        assert isinstance(deleted, SourceMessageDeleted)
        assert deleted.source_message_id == str(plain)


async def test_messages_outside_conversations_and_from_bots_are_ignored(world: World) -> None:
    runtime = SinkRuntime()
    async with running_bot(world, runtime):
        stray = world.fake.create_thread(world.channel, "chit-chat", world.alice)
        world.fake.send_message(stray, world.alice, "no agent here")
        world.fake.send_message(world.channel, world.alice, "top-level chatter")
        thread = await _start_thread(world, runtime)
        world.fake.send_message(thread, world.other_bot, "beep")
        world.fake.send_message(thread, world.alice, "real prompt")
        messages = await wait_for(lambda: runtime.of_kind("user_message"))
        assert [m.text for m in messages] == ["real prompt"]  # type: ignore[attr-defined]


async def test_a_project_channel_message_starts_a_thread_with_the_channel_defaults(
    world: World,
) -> None:
    runtime = SinkRuntime()
    async with running_bot(world, runtime):
        world.fake.send_message(world.project_channel, world.alice, "build the parser")
        start, prompt = await wait_for(lambda: runtime.actions, lambda a: len(a) >= 2)
        (thread,) = world.fake.threads(world.project_channel)
        assert isinstance(start, ConversationStarted) and start.agent == "codex"
        assert start.thread_id == str(thread)
        assert start.resolved_workdir == os.path.realpath(world.workdir)
        assert isinstance(prompt, UserMessage) and prompt.thread_id == str(thread)
        assert prompt.text == "build the parser"


async def test_every_slash_command_becomes_its_action(world: World) -> None:
    runtime = SinkRuntime()
    async with running_bot(world, runtime):
        thread = await _start_thread(world, runtime)
        sub = os.path.join(world.workdir, "sub")
        os.mkdir(sub)
        fake = world.fake
        fake.run_command(thread, world.alice, "queue", message="later please")
        fake.run_command(thread, world.alice, "status")
        fake.run_command(thread, world.alice, "model", name="opus")
        fake.run_command(thread, world.alice, "clear-queue", position=1)
        fake.run_command(thread, world.alice, "clear-queue")
        fake.run_command(thread, world.alice, "abort")
        fake.run_command(thread, world.alice, "workdir set", path="sub")
        fake.run_command(thread, world.alice, "workdir set", path="/does/not/exist")
        fake.run_command(thread, world.alice, "conversation end")
        fake.run_command(thread, world.alice, "gemini resume", id="sess-42")
        actions = await wait_for(lambda: runtime.actions, lambda a: len(a) >= 11)
        kinds = [type(a) for a in actions[1:]]
        assert kinds == [
            QueueCommand,
            StatusRequested,
            ModelChanged,
            QueueCleared,
            QueueCleared,
            AbortRequested,
            WorkdirSet,
            WorkdirSet,
            ConversationEnded,
            ConversationResumed,
        ]
        queue, _, model, one, every, _, moved, missing, _, resumed = actions[1:]
        assert isinstance(queue, QueueCommand) and queue.text == "later please"
        assert isinstance(model, ModelChanged) and model.model == "opus"
        assert isinstance(one, QueueCleared) and one.position == 1
        assert isinstance(every, QueueCleared) and every.position is None
        assert isinstance(moved, WorkdirSet) and moved.resolved_workdir == os.path.realpath(sub)
        assert isinstance(missing, WorkdirSet) and missing.resolved_workdir is None
        assert isinstance(resumed, ConversationResumed)
        assert resumed.agent == "gemini" and resumed.session_id == "sess-42"
        assert {a.thread_id for a in actions} == {str(thread)}
        for action in actions:  # every command was acknowledged well within Discord's 3 s
            interaction = fake.interaction(int(action.action_id.removeprefix("int-")))
            assert interaction.acknowledged_at is not None
            assert interaction.acknowledged_at - interaction.created_at < 3.0


async def test_buttons_and_menus_become_answers(world: World) -> None:
    from threadspindle.effects.platform import SelectMenu
    from threadspindle.runtime.core.effect_types import Button

    runtime = SinkRuntime()
    async with running_bot(world, runtime) as bot:
        thread = await _start_thread(world, runtime)
        prompt_id = int(
            await bot.platform.send(
                str(thread),
                "May I run `rm -rf build`?",
                buttons=(
                    Button(label="Accept", action="permission:allow:req:7"),
                    Button(label="Deny", action="permission:deny:req:7"),
                ),
            )
        )
        menu_id = int(
            await bot.platform.send(
                str(thread),
                "Which database?",
                menu=SelectMenu(custom_id="question:q1", options=("sqlite", "postgres")),
            )
        )
        queued_id = int(
            await bot.platform.send(
                str(thread),
                "Queued (position 2).",
                buttons=(Button(label="Remove from queue", action="remove_queued:msg-9"),),
            )
        )
        world.fake.click_button(prompt_id, "permission:deny:req:7", world.alice)
        world.fake.choose_option(menu_id, "question:q1", ["postgres"], world.bob)
        world.fake.click_button(queued_id, "remove_queued:msg-9", world.alice)
        actions = await wait_for(lambda: runtime.actions, lambda a: len(a) >= 4)
        permission, answer, removed = actions[1:4]
        assert isinstance(permission, PermissionAnswered)
        assert permission.request_id == "req:7" and permission.allow is False
        assert isinstance(answer, QuestionAnswered) and answer.answer == "postgres"
        assert answer.author_id == str(world.bob)  # allowed through the role
        assert isinstance(removed, QueuedItemRemoved) and removed.item_id == "msg-9"


async def test_a_user_not_on_the_allow_list_is_refused(world: World) -> None:
    runtime = SinkRuntime()
    async with running_bot(world, runtime) as bot:
        refused = world.fake.run_command(world.channel, world.mallory, "claude start")
        replies = await wait_for(lambda: world.fake.interaction_replies(refused))
        assert [r.content for r in replies] == [REFUSAL]
        assert replies[0].ephemeral  # only mallory sees it
        thread = await _start_thread(world, runtime)
        world.fake.send_message(thread, world.mallory, "let me in")
        world.fake.run_command(thread, world.mallory, "abort")
        world.fake.send_message(thread, world.alice, "ok")
        await wait_for(lambda: runtime.of_kind("user_message"))
        assert [a.kind for a in runtime.actions] == ["conversation_started", "user_message"]
        assert bot.refusals == 3
        assert REFUSAL not in world.fake.transcript(thread)


async def test_archiving_or_deleting_a_thread_disposes_its_actor(world: World) -> None:
    runtime = SinkRuntime()
    async with running_bot(world, runtime):
        first = await _start_thread(world, runtime)
        second = await _start_thread(world, runtime)
        world.fake.archive_thread(first)
        world.fake.delete_thread(second)
        disposed = await wait_for(lambda: runtime.disposed, lambda d: len(d) == 2)
        assert disposed == [str(first), str(second)]


async def test_attachments_are_inlined_or_saved_to_the_workdir(world: World) -> None:
    runtime = SinkRuntime()
    async with running_bot(world, runtime):
        thread = await _start_thread(world, runtime)
        image = b"\x89PNG\r\n\x1a\n" + bytes(range(256))
        world.fake.send_message(
            thread,
            world.alice,
            "look at these",
            attachments=(
                ("notes.md", b"# Notes\nuse trio", "text/markdown"),
                ("shot.png", image, "image/png"),
            ),
        )
        (message,) = await wait_for(lambda: runtime.of_kind("user_message"))
        assert isinstance(message, UserMessage)
        notes, shot = message.attachments
        assert notes.inline_text == "# Notes\nuse trio" and notes.path is None
        assert shot.inline_text is None and shot.path is not None
        assert shot.path.startswith(os.path.realpath(world.workdir))
        with open(shot.path, "rb") as saved:
            assert saved.read() == image


async def test_a_message_in_a_thread_the_client_never_saw_still_reaches_its_conversation(
    world: World,
) -> None:
    runtime = SinkRuntime()
    async with running_bot(world, runtime):
        hidden = world.fake.create_thread(world.channel, "old", world.alice, announce=False)
        await runtime.post(
            ConversationStarted(
                thread_id=str(hidden),
                action_id="start-old",
                at=0.0,
                agent="claude",
                requested_workdir=world.workdir,
                resolved_workdir=os.path.realpath(world.workdir),
            )
        )
        world.fake.send_message(hidden, world.alice, "are you there?")
        (message,) = await wait_for(lambda: runtime.of_kind("user_message"))
        assert message.thread_id == str(hidden)


async def test_workdir_and_session_ids_are_autocompleted(
    world: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("api", "app", "docs", ".git"):
        os.mkdir(os.path.join(world.workdir, name))
    home = tmp_path / "home"
    sessions = home / ".claude" / "projects"
    async with running_bot(world, SinkRuntime()) as bot:
        typed = os.path.join(world.workdir, "ap")
        asked = world.fake.autocomplete(
            world.channel, world.alice, "claude start", "workdir", workdir=typed
        )
        choices = await wait_for(lambda: world.fake.suggestions(asked))
        assert [c["value"] for c in choices] == [typed + "i/", typed + "p/"]
        refused = world.fake.autocomplete(
            world.channel, world.mallory, "claude start", "workdir", workdir=typed
        )
        assert (
            await wait_for(lambda: world.fake.suggestions(refused), lambda c: c is not None) == []
        )
        # Session ids come from the CLI's own store (Claude Code: one file per session).
        slug = "".join(ch if ch.isalnum() else "-" for ch in os.path.realpath(world.workdir))
        (sessions / slug).mkdir(parents=True)
        (sessions / slug / "0b5e-session.jsonl").write_text(
            '{"type": "user", "message": {"role": "user", "content": "fix the parser"}}\n'
        )
        bot.settings = bot.settings.model_copy(
            update={"default_workdir": os.path.realpath(world.workdir)}
        )
        monkeypatch.setenv("HOME", str(home))
        asked = world.fake.autocomplete(world.channel, world.alice, "claude resume", "id", id="0b")
        choices = await wait_for(lambda: world.fake.suggestions(asked))
        assert [c["value"] for c in choices] == ["0b5e-session"]
        assert "fix the parser" in choices[0]["name"]
        listed = world.fake.run_command(world.channel, world.alice, "claude conversations")
        (reply,) = await wait_for(lambda: world.fake.interaction_replies(listed))
        assert reply.ephemeral and "`0b5e-session`  fix the parser" in reply.content


async def test_a_thread_that_cannot_be_opened_is_explained_and_posts_nothing(
    world: World,
) -> None:
    runtime = SinkRuntime()
    async with running_bot(world, runtime):
        world.fake.inject_fault(403, method="POST", path_contains="/threads")
        asked = world.fake.run_command(world.channel, world.alice, "claude start")
        (reply,) = await wait_for(lambda: world.fake.interaction_replies(asked))
        assert "Could not open a thread" in reply.content and reply.ephemeral
        world.fake.inject_fault(403, method="POST", path_contains="/threads")
        world.fake.send_message(world.project_channel, world.alice, "build it")
        await _start_thread(world, runtime)  # the bot carries on
        assert [a.kind for a in runtime.actions] == ["conversation_started"]
        assert len(world.fake.threads(world.channel)) == 1
        assert world.fake.threads(world.project_channel) == []


async def test_after_the_conversation_ends_the_thread_is_chatter_again(world: World) -> None:
    runtime = SinkRuntime()
    async with running_bot(world, runtime):
        thread = await _start_thread(world, runtime)
        world.fake.run_command(thread, world.alice, "conversation end")
        await wait_for(lambda: runtime.of_kind("conversation_ended"))
        world.fake.send_message(thread, world.alice, "thanks, bye")
        # A start the core refuses (no such workdir) leaves the new thread without one too.
        world.fake.run_command(world.channel, world.alice, "claude start", workdir="/nope")
        await wait_for(lambda: runtime.actions, lambda a: len(a) >= 3)
        refused_thread = int(runtime.actions[-1].thread_id)
        world.fake.send_message(refused_thread, world.alice, "hello?")
        world.fake.send_message(thread, world.alice, "one more thing")
        await wait_for(lambda: runtime.actions, lambda a: len(a) >= 3)
        await trio.sleep(0.3)
        assert [a.kind for a in runtime.actions] == [
            "conversation_started",
            "conversation_ended",
            "conversation_started",  # refused by the core: /nope does not exist
        ]


async def test_a_command_is_posted_beside_its_deferral_and_answered_after_it(
    world: World,
) -> None:
    """Discord is slow to take the deferral (a 429 on the callback, retried by discord.py
    a second later): the action reaches the runtime first, nothing behind it in the gateway
    waits for the deferral, and the reply still follows the acknowledgement."""
    runtime = SinkRuntime()
    async with running_bot(world, runtime) as bot:
        thread = await _start_thread(world, runtime)
        fake = world.fake
        fake.inject_fault(429, method="POST", path_contains="/callback", retry_after=1.0)
        slow = fake.run_command(thread, world.alice, "status")
        fake.send_message(thread, world.alice, "and then this")
        status, message = (await wait_for(lambda: runtime.actions, lambda a: len(a) >= 3))[1:]
        assert isinstance(status, StatusRequested) and isinstance(message, UserMessage)
        assert fake.interaction(slow).acknowledged_at is None  # posted before the deferral
        await bot.platform.reply(str(thread), status.action_id, "all quiet")
        interaction = fake.interaction(slow)
        assert interaction.acknowledged_at is not None
        assert interaction.followed_up_at and interaction.followed_up_at[0] >= (
            interaction.acknowledged_at
        )
        # it filled the deferral's "thinking..." message, as a followup after one does
        assert interaction.followup_ids == [interaction.original_message_id]
        assert fake.message(interaction.followup_ids[0]).content == "all quiet"
