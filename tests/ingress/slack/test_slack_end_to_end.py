"""The whole Slack app through the real slack-bolt against the fake Slack: runtime on a real
SQLite log, stream renderer over SlackPlatform, scripted fake agent. What is Slack's own is
here; what every platform must do is tests/platforms/test_platform_contract.py."""

from __future__ import annotations

import time
from pathlib import Path

import trio

from threadspindle.effects.slack_platform import slack_thread_id
from threadspindle.ingress.slack.bot import NO_LONGER_PENDING, REFUSAL
from threadspindle.runtime.core.agent_events import TextDelta
from threadspindle.testkit.fake_agent import Step
from threadspindle.testkit.fake_discord.harness import wait_for
from threadspindle.testkit.fake_discord.stack import SCRIPT
from threadspindle.testkit.fake_slack.stack import (
    SlackStack,
    SlackWorld,
    is_footer,
    slack_stack,
)
from threadspindle.testkit.fake_slack.world import BOT_USER


def _delivered(stack: SlackStack) -> list[str]:
    return [text for _, text in stack.agents.delivered]


def _queue(stack: SlackStack, thread: str) -> list[str]:
    state = stack.runtime.snapshot(thread)
    return [item.text for item in state.queue] if state is not None else []


async def test_a_thread_answers_with_one_footer_and_every_envelope_is_acked(
    sl: SlackWorld, tmp_path: Path
) -> None:
    async with slack_stack(sl, tmp_path) as stack:
        thread = await stack.start_thread()
        sl.say(thread, "hi")
        messages = await stack.until_footers(thread, 1)
        assert "Hello from fake agent." in [m.shown for m in messages]
        assert _delivered(stack) == ["hi"]
        await wait_for(lambda: not sl.fake.unacked())
        acked = {a["envelope_id"] for a in sl.fake.acks()}
        assert set(sl.fake.delivered()) <= acked
        assert all(not m.problems for m in sl.bot_messages(thread))


async def test_a_top_level_message_in_a_project_channel_starts_its_own_thread(
    sl: SlackWorld, tmp_path: Path
) -> None:
    async with slack_stack(sl, tmp_path) as stack:
        ts = sl.fake.send_message(sl.project, sl.alice, "fix the login page\nit crashes")
        thread = slack_thread_id(sl.project, ts)
        await stack.until_footers(thread, 1)
        state = stack.runtime.snapshot(thread)
        assert state is not None and state.conversation is not None
        assert state.conversation.agent == "codex"
        assert _delivered(stack) == ["fix the login page\nit crashes"]
        # Talk in the dev channel that names no one is left alone.
        sl.fake.send_message(sl.dev, sl.alice, "lunch?")
        await trio.sleep(0.5)
        assert sl.fake.bot_messages(sl.dev) == []


async def test_an_envelope_delivered_again_is_dropped(sl: SlackWorld, tmp_path: Path) -> None:
    """Slack delivers an envelope again when its ack was lost: no second prompt, no second
    thread."""
    async with slack_stack(sl, tmp_path) as stack:
        ts = sl.fake.send_message(sl.project, sl.alice, "only once")
        thread = slack_thread_id(sl.project, ts)
        await stack.until_footers(thread, 1)
        sl.fake.redeliver(sl.fake.envelope_of(ts))
        await wait_for(lambda: not sl.fake.unacked())
        await trio.sleep(0.5)
        assert _delivered(stack) == ["only once"]
        assert sum(map(is_footer, sl.bot_messages(thread))) == 1


async def test_editing_and_deleting_queued_messages_reconcile_the_queue(
    sl: SlackWorld, tmp_path: Path
) -> None:
    async with slack_stack(sl, tmp_path) as stack:
        thread = await stack.start_thread()
        channel, _ = sl.where(thread)
        sl.say(thread, "SLOW work")
        await wait_for(lambda: _delivered(stack))
        first = sl.say(thread, "first. queue")
        second = sl.say(thread, "second. queue")
        third = sl.say(thread, "third. queue")
        await wait_for(lambda: _queue(stack, thread) == ["first.", "second.", "third."])
        queued = stack.runtime.snapshot(thread).queue
        assert {item.author_name for item in queued} == {"alice"}  # Slack's user_profile
        sl.fake.edit_message(channel, first, "first, edited. queue")
        sl.fake.delete_message(channel, second)
        sl.fake.edit_message(channel, third, "third, no longer queued")  # suffix gone
        await wait_for(lambda: _queue(stack, thread) == ["first, edited."])
        await stack.until_footers(thread, 2)
        assert _delivered(stack) == ["SLOW work", "first, edited."]


async def test_mention_commands_in_a_thread_and_the_slash_command_in_a_channel(
    sl: SlackWorld, tmp_path: Path
) -> None:
    async with slack_stack(sl, tmp_path) as stack:
        thread = await stack.start_thread()
        channel, thread_ts = sl.where(thread)
        sl.command(thread, "status")
        status = await wait_for(lambda: sl.fake.ephemerals(sl.alice))
        assert "claude" in status[-1].shown and status[-1].thread_ts == thread_ts
        sl.command(thread, "queue later please")
        await wait_for(lambda: _delivered(stack) == ["later please"])
        # A slash command carries no thread: it says how to write it in one.
        envelope = sl.fake.slash(channel, sl.alice, "abort")
        await wait_for(lambda: envelope in {a["envelope_id"] for a in sl.fake.acks()})
        (ack,) = [a for a in sl.fake.acks() if a["envelope_id"] == envelope]
        assert "@Spindle abort" in ack["payload"]["text"]
        # A stranger's slash command: refused, in an answer only they see.
        refused = sl.fake.slash(channel, sl.mallory, "claude start")
        await wait_for(lambda: refused in {a["envelope_id"] for a in sl.fake.acks()})
        (ack,) = [a for a in sl.fake.acks() if a["envelope_id"] == refused]
        assert ack["payload"]["text"] == REFUSAL


async def test_a_stranger_is_told_alone_and_a_stale_click_changes_nothing(
    sl: SlackWorld, tmp_path: Path
) -> None:
    async with slack_stack(sl, tmp_path) as stack:
        thread = await stack.start_thread()
        channel, _ = sl.where(thread)
        sl.say(thread, "let me in", sl.mallory)
        (told,) = await wait_for(lambda: sl.fake.ephemerals(sl.mallory))
        assert told.shown == REFUSAL
        sl.say(thread, "PERMISSION please")
        buttons = await wait_for(
            lambda: [(m.ts, b) for m in sl.bot_messages(thread) for b in m.buttons()]
        )
        ts, accept = next((ts, b) for ts, b in buttons if b["text"]["text"] == "Accept")
        sl.fake.click(channel, ts, accept["action_id"], sl.mallory)  # a stranger's click
        await trio.sleep(0.5)
        assert stack.agents.answers == []
        seen = sl.fake.message(channel, ts)
        sl.fake.click(channel, ts, accept["action_id"], sl.alice)
        await wait_for(lambda: stack.agents.answers)
        await wait_for(lambda: not sl.fake.message(channel, ts).buttons())  # dismissed
        # A client that has not refreshed yet: the same button, pressed again.
        sl.fake.click(channel, ts, accept["action_id"], sl.alice, as_seen=seen)
        said = await wait_for(
            lambda: [m for m in sl.fake.ephemerals(sl.alice) if m.shown == NO_LONGER_PENDING]
        )
        assert len(said) == 1 and len(stack.agents.answers) == 1


def _markup_script(prompt: str) -> list[Step]:
    if "MARKUP" in prompt:
        text = (
            "if a < b && c > d then **bold** and `x <y>` & <https://example.com/?a=1&b=2>\n"
            "```python\nprint(1 < 2 & 3)\n```\n-# a note"
        )
        return [Step("event", TextDelta(text=text))]
    return SCRIPT(prompt)


async def test_agent_text_is_escaped_and_a_refused_message_goes_again_as_plain_text(
    sl: SlackWorld, tmp_path: Path
) -> None:
    async with slack_stack(sl, tmp_path) as stack:
        stack.agents.script = _markup_script
        thread = await stack.start_thread()
        sl.say(thread, "MARKUP please")
        messages = await stack.until_footers(thread, 1)
        shown = "\n".join(m.shown for m in messages)
        assert "if a < b && c > d then bold and x <y> &" in shown
        assert "print(1 < 2 & 3)" in shown and "a note" in shown
        assert all(not m.problems for m in sl.bot_messages(thread))
        # Slack refuses the blocks of the next message: it goes again as plain text.
        sl.fake.inject_fault(200, method="chat.postMessage", error="invalid_blocks")
        sl.say(thread, "hi")
        await stack.until_footers(thread, 2)
        assert "Hello from fake agent." in [m.shown for m in sl.bot_messages(thread)]
        assert stack.app.slack is not None and stack.app.slack.platform.markup_fallbacks == 1


async def test_a_429_waits_its_retry_after(sl: SlackWorld, tmp_path: Path) -> None:
    async with slack_stack(sl, tmp_path) as stack:
        thread = await stack.start_thread()
        sl.fake.inject_fault(429, method="chat.postMessage", retry_after=1)
        sl.say(thread, "hi")
        await stack.until_footers(thread, 1)
        posts = sl.fake.calls("chat.postMessage")
        limited = [c for c in posts if c.status == 429]
        assert len(limited) == 1
        after = [c for c in posts if c.at > limited[0].at]
        assert after and after[0].at - limited[0].at >= 0.9  # waited Retry-After: 1
        assert [m.shown for m in sl.bot_messages(thread)].count("Hello from fake agent.") == 1


async def test_a_status_line_while_working_where_the_app_is_an_assistant(
    sl: SlackWorld, tmp_path: Path
) -> None:
    """The assistant status where Slack allows it; where it refuses, the working line
    (``test_working_line.py``)."""
    async with slack_stack(sl, tmp_path) as stack:
        thread = await stack.start_thread()
        channel, thread_ts = sl.where(thread)
        sl.say(thread, "SLOW work")
        await stack.until_footers(thread, 1)
        assert (channel, thread_ts, "is working…") in sl.fake.statuses()
        assert not sl.fake.calls("chat.delete")  # no working line where the status shows


async def test_a_reconnect_asked_by_slack_loses_nothing(sl: SlackWorld, tmp_path: Path) -> None:
    async with slack_stack(sl, tmp_path) as stack:
        thread = await stack.start_thread()
        sl.fake.disconnect("refresh_requested")
        await wait_for(lambda: sl.fake.connections() >= 2, timeout=20)
        sl.say(thread, "hi")
        await stack.until_footers(thread, 1)
        assert _delivered(stack) == ["hi"]


async def test_messages_said_while_spindle_was_down_are_caught_up(
    sl: SlackWorld, tmp_path: Path
) -> None:
    async with slack_stack(sl, tmp_path) as stack:
        thread = await stack.start_thread()
        sl.say(thread, "before")
        await stack.until_footers(thread, 1)
    channel, thread_ts = sl.where(thread)
    # Said while no process ran, and Slack kept no event for it: only the history has it.
    time.sleep(0.01)
    sl.fake.post_quietly(channel, sl.alice, "while you were away", thread_ts=thread_ts)
    async with slack_stack(sl, tmp_path) as stack:
        await stack.until_footers(thread, 2, timeout=30)
        assert _delivered(stack) == ["while you were away"]  # and "before" not again
        assert stack.app.slack is not None and stack.app.slack.ingress.caught_up >= 1


async def test_a_long_absence_is_caught_up_a_page_at_a_time_and_within_the_limit(
    sl: SlackWorld, tmp_path: Path
) -> None:
    """More was said while Spindle was down than one catch-up reads: the oldest messages up
    to ``catch_up_limit`` go in (across Slack's pages), the rest are named, not held."""
    async with slack_stack(sl, tmp_path, queue_limit=10) as stack:
        thread = await stack.start_thread()
        sl.say(thread, "before")
        await stack.until_footers(thread, 1)
    channel, thread_ts = sl.where(thread)
    time.sleep(0.01)
    said = [f"away {i}" for i in range(250)]  # two pages of replies
    for text in said:
        sl.fake.post_quietly(channel, sl.alice, text, thread_ts=thread_ts)
    openers = [f"new work {i}" for i in range(450)]  # three pages of history
    for text in openers:
        sl.fake.post_quietly(sl.project, sl.alice, text)
    async with slack_stack(sl, tmp_path, queue_limit=10, catch_up_limit=3) as stack:
        (channel_note,) = await wait_for(
            lambda: [m for m in sl.fake.bot_messages(sl.project) if "catches up on" in m.shown]
        )
        await wait_for(lambda: len(_delivered(stack)) == 6, timeout=30)
        await trio.sleep(0.5)
        delivered = _delivered(stack)
        assert sorted(delivered) == sorted(said[:3] + openers[:3])
        assert [d for d in delivered if d.startswith("away")] == said[:3]  # in order
        state = stack.runtime.snapshot(thread)
        assert state is not None and state.counters.interrupts == 0  # queued, one by one
        thread_notes = [m for m in sl.bot_messages(thread) if "catches up on" in m.shown]
        assert len(thread_notes) == 1 and "first 3 messages" in thread_notes[0].shown
        assert "the 447 after them were not read" in channel_note.shown


async def test_a_mention_names_the_app_as_slack_shows_it(sl: SlackWorld, tmp_path: Path) -> None:
    async with slack_stack(sl, tmp_path) as stack:
        thread = await stack.start_thread()
        sl.command(thread, "help")
        (helped,) = await wait_for(lambda: sl.fake.ephemerals(sl.alice))
        assert "@Spindle" in helped.shown and "/spindle" in helped.shown
        assert BOT_USER not in helped.shown


async def test_a_long_answer_is_split_on_lines_with_code_blocks_whole(
    sl: SlackWorld, tmp_path: Path
) -> None:
    async with slack_stack(sl, tmp_path) as stack:
        thread = await stack.start_thread()
        sl.say(thread, "LONG answer please")
        await stack.until_footers(thread, 1, timeout=40)
        bodies = [m for m in sl.bot_messages(thread) if not is_footer(m)]
        assert len(bodies) >= 2  # ~6000 characters: more than one message
        for message in bodies:
            assert len(message.text) <= 4000 and message.text.count("```") % 2 == 0
            assert all(len(b["text"]["text"]) <= 3000 for b in message.blocks if "text" in b)
        shown = "\n".join(m.shown for m in bodies)
        for n in range(3):
            assert f"def part_{n}():" in shown
        assert stack.app.slack is not None and stack.app.slack.platform.markup_fallbacks == 0


async def test_edits_in_a_channel_are_paced(sl: SlackWorld, tmp_path: Path) -> None:
    async with slack_stack(sl, tmp_path) as stack:  # min_edit_interval_s = 0.3
        thread = await stack.start_thread()
        channel, _ = sl.where(thread)
        sl.say(thread, "BURST please")  # 60 deltas in 3 s
        await stack.until_footers(thread, 1, timeout=30)
        updates = [c.at for c in sl.fake.calls("chat.update") if c.params.get("channel") == channel]
        assert len(updates) >= 3  # the answer grew by edits
        gaps = [b - a for a, b in zip(updates, updates[1:], strict=False)]
        assert min(gaps) >= 0.25, gaps  # 0.3 s apart, less the fake's clock skew
        assert len(updates) < 60  # coalesced: far fewer edits than deltas


async def test_a_project_message_said_while_spindle_was_down_starts_its_thread(
    sl: SlackWorld, tmp_path: Path
) -> None:
    async with slack_stack(sl, tmp_path) as stack:
        ts = sl.fake.send_message(sl.project, sl.alice, "first")
        await stack.until_footers(slack_thread_id(sl.project, ts), 1)
    time.sleep(0.01)
    quiet = sl.fake.post_quietly(sl.project, sl.alice, "said while away")
    async with slack_stack(sl, tmp_path) as stack:
        thread = slack_thread_id(sl.project, quiet)
        await stack.until_footers(thread, 1, timeout=30)
        assert _delivered(stack) == ["said while away"]  # and "first" not again


async def test_a_dropped_socket_is_reconnected_and_unacked_envelopes_come_again(
    sl: SlackWorld, tmp_path: Path
) -> None:
    async with slack_stack(sl, tmp_path) as stack:
        thread = await stack.start_thread()
        sl.fake.drop_connections()
        sl.say(thread, "hi")  # waits in Slack until a socket is there again
        await wait_for(lambda: sl.fake.connections() >= 2, timeout=30)
        await stack.until_footers(thread, 1, timeout=30)
        assert _delivered(stack) == ["hi"]
        await wait_for(lambda: not sl.fake.unacked())


async def test_workspaces_and_channels_are_allow_listed_too(sl: SlackWorld, tmp_path: Path) -> None:
    # Allow-listed, in another workspace sharing the channel: Slack's envelope names the
    # app's workspace (as the fake's does), the event eve's.
    eve = sl.fake.add_user("eve", team="T0ELSEWHERE")
    elsewhere = sl.fake.add_channel("random")  # a channel the app does not serve
    async with slack_stack(sl, tmp_path, allowed_user_ids=(sl.alice, eve)) as stack:
        thread = await stack.start_thread()
        sl.say(thread, "from another workspace", eve)
        (told,) = await wait_for(lambda: sl.fake.ephemerals(eve))
        assert told.shown == REFUSAL
        refused = sl.fake.slash(elsewhere, sl.alice, "claude start")
        await wait_for(lambda: refused in {a["envelope_id"] for a in sl.fake.acks()})
        (ack,) = [a for a in sl.fake.acks() if a["envelope_id"] == refused]
        assert ack["payload"]["text"] == REFUSAL
        assert sl.fake.bot_messages(elsewhere) == []
        sl.say(thread, "hi")
        await stack.until_footers(thread, 1)
        assert _delivered(stack) == ["hi"]
    async with slack_stack(
        sl, tmp_path, allowed_user_ids=(sl.alice, eve), allowed_team_ids=("T0ELSEWHERE",)
    ) as stack:
        sl.say(thread, "now my workspace is allowed", eve)
        await stack.until_footers(thread, 2)
        assert _delivered(stack) == ["now my workspace is allowed"]
