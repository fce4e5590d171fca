"""Catching up on messages posted while Spindle was away (stopped, or reconnected without
a RESUME): the whole bot through the real discord.py client against the fake Discord, on
a real SQLite log, with the scripted fake agent (``testkit.fake_discord.stack``)."""

from __future__ import annotations

from pathlib import Path

import trio

from threadspindle.ingress.discord.catchup import LoggedHistory, catch_up_notice, discord_id
from threadspindle.runtime.core.actions import OutputPosted, StatusRequested, UserMessage
from threadspindle.runtime.core.model import Conversation, Policy, ThreadState
from threadspindle.runtime.core.transitions import transition
from threadspindle.runtime.live.log import EventLog
from threadspindle.testkit.fake_discord import GeneratedBytes
from threadspindle.testkit.fake_discord.harness import SinkRuntime, World, running_bot, wait_for
from threadspindle.testkit.fake_discord.stack import Stack, discord_stack, is_footer
from threadspindle.testkit.fake_discord.store import FakeMessage

NOTICE_TWO = "2 messages sent while Spindle was offline are queued."


def _delivered(stack: Stack) -> list[str]:
    return [text for _, text in stack.agents.delivered]


def _contents(messages: list[FakeMessage]) -> list[str]:
    return [m.content for m in messages]


async def test_messages_sent_while_stopped_are_answered_once_in_order(
    world: World, tmp_path: Path
) -> None:
    async with discord_stack(world, tmp_path) as stack:
        thread = await stack.start_thread()
        world.fake.send_message(thread, world.alice, "hi")
        await stack.until_footers(thread, 1)
    # Spindle is stopped: Discord keeps these, but no session will ever deliver them.
    world.fake.send_message(thread, world.alice, "first while down")
    world.fake.send_message(thread, world.mallory, "let me in")  # not on the allow-list
    world.fake.send_message(thread, world.bob, "second while down. queue")  # by role
    async with discord_stack(world, tmp_path) as stack:
        messages = await stack.until_footers(thread, 3, timeout=30)
        assert _delivered(stack) == ["first while down", "second while down."]
        texts = _contents(messages)
        assert texts.count(NOTICE_TWO) == 1
        # Said before either was answered, and neither interrupted the other.
        assert texts.index(NOTICE_TWO) < texts.index("» bob: second while down.")
        assert sum(map(is_footer, messages)) == 3
        assert stack.bot.caught_up == 2 and stack.bot.refusals >= 1
        state = stack.runtime.snapshot(str(thread))
        assert state is not None and state.counters.interrupts == 0
    before = _contents(world.fake.messages(thread))
    async with discord_stack(world, tmp_path) as stack:
        # Nothing twice: a live message is the only thing this process answers. (Posted
        # before the catch-up has read the thread, it would be read back too, and queued
        # with a notice: still one prompt.)
        await wait_for(lambda: stack.bot.catch_ups)
        world.fake.send_message(thread, world.alice, "still here?")
        messages = await stack.until_footers(thread, 4, timeout=30)
        assert _delivered(stack) == ["still here?"]
        assert stack.bot.caught_up == 0
        assert _contents(messages)[: len(before)] == before
        assert _contents(messages).count(NOTICE_TWO) == 1


async def test_a_reconnect_that_cannot_resume_catches_up_without_interrupting(
    world: World, tmp_path: Path
) -> None:
    async with discord_stack(world, tmp_path) as stack:
        thread = await stack.start_thread()
        world.fake.send_message(thread, world.alice, "SLOW work")
        await wait_for(lambda: _delivered(stack))
        # The session is lost (not resumable) and the bot stays offline for a moment.
        world.fake.invalidate_session(hold=True)
        world.fake.send_message(thread, world.alice, "one")
        world.fake.send_message(thread, world.alice, "two")
        world.fake.release_gateway()
        messages = await stack.until_footers(thread, 3, timeout=30)
        assert _delivered(stack) == ["SLOW work", "one", "two"]
        texts = _contents(messages)
        assert texts.count(NOTICE_TWO) == 1
        assert any("slow9" in t for t in texts)  # the run went on to its end
        counts = world.fake.gateway_counts()
        assert counts["identifies"] == 2 and counts["invalid_sessions"] == 1
        # And again: only what is new since the last catch-up.
        world.fake.invalidate_session(hold=True)
        world.fake.send_message(thread, world.alice, "three")
        world.fake.release_gateway()
        messages = await stack.until_footers(thread, 4, timeout=30)
        assert _delivered(stack) == ["SLOW work", "one", "two", "three"]
        assert "1 message sent while Spindle was offline is queued." in _contents(messages)


async def test_queued_prompts_edited_or_deleted_while_stopped_follow_their_messages(
    world: World, tmp_path: Path
) -> None:
    async with discord_stack(world, tmp_path) as stack:
        thread = await stack.start_thread()
        world.fake.send_message(thread, world.alice, "SLOW work")
        await wait_for(lambda: _delivered(stack))
        world.fake.send_message(thread, world.alice, "SLOW again. queue")
        edited = world.fake.send_message(thread, world.alice, "add tests. queue")
        deleted = world.fake.send_message(thread, world.alice, "add docs. queue")
        await wait_for(
            lambda: stack.runtime.snapshot(str(thread)),
            lambda s: s is not None and len(s.queue) == 3,
        )
    # Stopped mid-run with three prompts queued; two of their messages change meanwhile.
    world.fake.edit_message(edited, "add more tests. queue")
    world.fake.delete_message(deleted)
    async with discord_stack(world, tmp_path) as stack:
        messages = await stack.until_footers(thread, 2, timeout=30)
        assert _delivered(stack) == ["SLOW again.", "add more tests."]
        texts = _contents(messages)
        assert "1 queued prompt edited while Spindle was offline is updated." in "\n".join(texts)
        assert "1 queued prompt deleted while Spindle was offline is removed from the queue." in (
            "\n".join(texts)
        )
        # Remembered now: a live delete after the restart still withdraws its prompt.
        world.fake.send_message(thread, world.alice, "SLOW third. queue")
        gone = world.fake.send_message(thread, world.alice, "never mind this. queue")
        await wait_for(
            lambda: stack.runtime.snapshot(str(thread)),
            lambda s: s is not None and any(q.text == "never mind this." for q in s.queue),
        )
        world.fake.delete_message(gone)
        await stack.until_footers(thread, 3, timeout=30)
        assert _delivered(stack) == ["SLOW again.", "add more tests.", "SLOW third."]


async def test_a_project_channel_message_sent_while_stopped_opens_its_thread(
    world: World, tmp_path: Path
) -> None:
    async with discord_stack(world, tmp_path) as stack:
        world.fake.send_message(world.project_channel, world.alice, "hello project")
        (first,) = await wait_for(lambda: world.fake.threads(world.project_channel))
        await stack.until_footers(first, 1)
    world.fake.send_message(world.project_channel, world.alice, "while you were out")
    world.fake.send_message(world.project_channel, world.mallory, "me too")  # refused
    async with discord_stack(world, tmp_path) as stack:
        threads = await wait_for(
            lambda: world.fake.threads(world.project_channel), lambda t: len(t) == 2
        )
        second = threads[-1]
        messages = await stack.until_footers(second, 1, timeout=30)
        assert _contents(messages)[0] == "1 message sent while Spindle was offline is queued."
        assert _delivered(stack) == ["while you were out"]
        state = stack.runtime.snapshot(str(second))
        assert state is not None and state.conversation is not None
        assert state.conversation.agent == "codex"
    async with discord_stack(world, tmp_path) as stack:
        await wait_for(lambda: stack.bot.catch_ups)
        world.fake.send_message(world.project_channel, world.alice, "a live one")
        threads = await wait_for(
            lambda: world.fake.threads(world.project_channel), lambda t: len(t) == 3
        )
        await stack.until_footers(threads[-1], 1, timeout=30)
        assert _delivered(stack) == ["a live one"]  # none reopened
        assert len(world.fake.threads(world.project_channel)) == 3


async def test_no_more_is_caught_up_than_the_queue_holds(world: World, tmp_path: Path) -> None:
    async with discord_stack(world, tmp_path, queue_limit=2) as stack:
        thread = await stack.start_thread()
        world.fake.send_message(thread, world.alice, "hi")
        await stack.until_footers(thread, 1)
    for n in range(5):
        world.fake.send_message(thread, world.alice, f"backlog {n}")
    async with discord_stack(world, tmp_path, queue_limit=2) as stack:
        messages = await stack.until_footers(thread, 3, timeout=30)
        assert _delivered(stack) == ["backlog 0", "backlog 1"]
        texts = _contents(messages)
        assert "2 messages sent while Spindle was offline are queued." in "\n".join(texts)
        assert "3 messages sent while Spindle was offline did not fit in the queue." in (
            "\n".join(texts)
        )


async def test_a_project_message_delivered_twice_opens_one_thread(world: World) -> None:
    # Live and read back by a catch-up, or replayed by the gateway: one thread, one start.
    runtime = SinkRuntime()
    async with running_bot(world, runtime):
        message = world.fake.send_message(world.project_channel, world.alice, "open once")
        world.fake.redeliver_message(message)
        await wait_for(lambda: runtime.of_kind("user_message"))
        await trio.sleep(0.5)  # a second thread would be opened by now
        assert len(world.fake.threads(world.project_channel)) == 1
        assert len(runtime.of_kind("conversation_started")) == 1


def test_a_message_both_caught_up_and_delivered_live_is_one_prompt() -> None:
    # Posted while the catch-up read the history: it comes once from the history (queued)
    # and once live (interrupting). The action id, made from the message id, is the same:
    # the core drops the second delivery.
    state = ThreadState.new("t", Policy(allowed_roots=("/w",))).replace(
        conversation=Conversation(agent="claude", workdir="/w")
    )
    live = UserMessage(
        thread_id="t", action_id="msg-42", at=1.0, author_id="1", text="hi", source_message_id="42"
    )
    caught_up = live.replace(interrupt=False)
    first = transition(state, caught_up)
    second = transition(first.state, live.replace(at=2.0))
    assert second.effects == () and second.state.run == first.state.run
    assert second.state.queue == first.state.queue
    assert second.state.counters.duplicates == 1 and second.state.counters.interrupts == 0
    assert discord_id(live.action_id) == 42


def test_where_a_thread_left_off_is_its_newest_discord_id_in_the_log(tmp_path: Path) -> None:
    with EventLog(tmp_path / "log.sqlite3") as log:
        for action_id in ("int-100", "msg-180", "edit-170-2025", "cmp-150", "rt-boot-1"):
            log.append(StatusRequested(thread_id="777", action_id=action_id, at=1.0))
        log.append(
            UserMessage(thread_id="777", action_id="msg-200", at=2.0, author_id="u", text="x")
        )
        log.append(
            OutputPosted(thread_id="777", action_id="rt-2", at=3.0, key="k", message_ids=("999",))
        )
        log.flush()
        ended = ThreadState.new("ended")
        on = ThreadState.new("777").replace(conversation=Conversation(agent="claude", workdir="/w"))
        telegram = ThreadState.new("tg:-100:5").replace(conversation=on.conversation)
        states = {"777": on, "ended": ended, "tg:-100:5": telegram}
        history = LoggedHistory(log, lambda: states, last_alive=3.0)
        # The bot's own posts (999) are not what Spindle *saw*; an edit names an old message.
        assert history.last_seen("777") == 200
        assert history.last_seen("ended") is None
        # Another platform's thread in the same log is not Discord's to catch up.
        assert history.open_threads() == ["777"]
    assert [discord_id(a) for a in ("msg-5", "int-6", "cmp-7", "start-8", "del-9", "msg-x")] == [
        5,
        6,
        7,
        8,
        None,
        None,
    ]


def test_the_catch_up_notice_says_what_happened() -> None:
    assert catch_up_notice(queued=0) is None
    assert catch_up_notice(queued=1) == "1 message sent while Spindle was offline is queued."
    assert catch_up_notice(queued=2, not_queued=1, edited=2, removed=1) == (
        "2 messages sent while Spindle was offline are queued.\n"
        "1 message sent while Spindle was offline did not fit in the queue.\n"
        "2 queued prompts edited while Spindle was offline are updated.\n"
        "1 queued prompt deleted while Spindle was offline is removed from the queue."
    )


async def test_a_refused_attachment_sent_while_stopped_is_answered_and_the_rest_caught_up(
    world: World, tmp_path: Path
) -> None:
    """An attachment over the cap, read back by the catch-up, refuses its own message with
    a reply as a live one would; the catch-up goes on with the next message."""
    async with discord_stack(world, tmp_path, attachment_max_bytes=1024) as stack:
        thread = await stack.start_thread()
        world.fake.send_message(thread, world.alice, "hi")
        await stack.until_footers(thread, 1)
    big = world.fake.send_message(
        thread, world.alice, "too big", attachments=(("big.iso", GeneratedBytes(4096), None),)
    )
    world.fake.send_message(thread, world.alice, "after it")
    async with discord_stack(world, tmp_path, attachment_max_bytes=1024) as stack:
        messages = await stack.until_footers(thread, 2, timeout=30)
        assert _delivered(stack) == ["after it"]
        replies = [m for m in messages if m.reply_to == big]
        assert len(replies) == 1 and "big.iso" in replies[0].content
        assert "1 message sent while Spindle was offline is queued." in _contents(messages)


def test_every_kind_a_persons_message_or_command_becomes_counts_as_seen() -> None:
    # A kind missing here (a steer, a `!` command) was never counted as seen: each restart's
    # catch-up read those messages again and queued them once more.
    import typing

    from threadspindle.ingress.discord.catchup import INGRESS_KINDS
    from threadspindle.runtime.core.actions import Action

    made_by_the_runtime = {
        "agent_connected",
        "agent_event",
        "agent_exited",
        "checkpoint_taken",
        "conversation_rolled_back",
        "effect_failed",
        "output_posted",
        "runtime_recovered",
        "schedule_due",
        "shell_finished",
        "shell_output",
        "source_deleted",  # name an older message (del-<id>)
        "source_edited",
        "thread_forked",
        "thread_parked",
        "tick",
        "workspace_job_finished",
    }
    union = typing.get_args(typing.get_args(Action)[0])
    kinds = {cls.model_fields["kind"].default for cls in union}
    assert set(INGRESS_KINDS) == kinds - made_by_the_runtime


async def test_steers_and_shell_commands_are_not_caught_up_again_after_a_restart(
    world: World, tmp_path: Path
) -> None:
    async with discord_stack(world, tmp_path, plain_message="steer") as stack:
        thread = await stack.start_thread()
        world.fake.send_message(thread, world.alice, "hi steer")
        world.fake.send_message(thread, world.alice, "!true")
        await stack.until_footers(thread, 1)
        await wait_for(
            lambda: any("Shell commands" in m.content for m in world.fake.messages(thread))
        )
    async with discord_stack(world, tmp_path, plain_message="steer") as stack:
        await wait_for(lambda: stack.bot.catch_ups)
        await trio.sleep(0.5)
        assert stack.bot.caught_up == 0 and _delivered(stack) == []


async def test_a_shell_command_sent_while_stopped_is_one_not_a_prompt(
    world: World, tmp_path: Path
) -> None:
    # As a prompt, `!touch x` went to the agent without the shell allow-list's check.
    async with discord_stack(world, tmp_path) as stack:
        thread = await stack.start_thread()
    world.fake.send_message(thread, world.bob, "!touch OFFLINE")
    world.fake.send_message(thread, world.alice, "and this steer")
    async with discord_stack(world, tmp_path) as stack:
        await stack.until_footers(thread, 1, timeout=30)
        await wait_for(
            lambda: any(
                "Shell commands are not enabled" in m.content for m in world.fake.messages(thread)
            )
        )
        assert _delivered(stack) == ["and this"]  # the steer suffix is not the agent's
