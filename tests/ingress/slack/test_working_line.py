"""Slack's "working…" line: where Slack refuses the assistant status
(``assistant.threads.setStatus``), the status is a message in the thread, edited as the run
goes on and deleted when its output arrives or typing goes off; never left behind."""

from __future__ import annotations

import re
from pathlib import Path

from threadspindle.testkit.fake_discord.harness import wait_for
from threadspindle.testkit.fake_slack.stack import SlackWorld, is_footer, slack_stack
from threadspindle.testkit.fake_slack.world import BOT_USER, SlackMessage

WORKING = re.compile(r"^working…( (\d+s|\d+:\d\d))?$")


def _working(messages: list[SlackMessage]) -> list[SlackMessage]:
    return [m for m in messages if WORKING.match(m.shown)]


def _all_working(sl: SlackWorld, thread: str) -> list[SlackMessage]:
    """Every working line ever posted in the thread, deleted ones too."""
    channel, thread_ts = sl.where(thread)
    with sl.fake.world.lock:
        found = [
            m
            for m in sl.fake.world.messages.values()
            if m.channel == channel and m.thread_ts == thread_ts and m.bot
        ]
    return _working(found)


async def test_where_slack_refuses_the_status_a_working_line_shows_and_goes(
    sl: SlackWorld, tmp_path: Path
) -> None:
    sl.fake.world.assistant = False  # not an assistant app
    async with slack_stack(sl, tmp_path, typing_refresh_s=1.0) as stack:
        thread = await stack.start_thread()
        sl.say(thread, "SLOW work")
        await wait_for(lambda: _working(sl.bot_messages(thread)))  # shown while working
        await stack.until_footers(thread, 1)
        await wait_for(lambda: not _working(sl.bot_messages(thread)))
        shown = sl.bot_messages(thread)
        assert is_footer(shown[-1])  # nothing after the footer
        assert "slow9" in "".join(m.shown for m in shown)  # the answer is whole
        posted = _all_working(sl, thread)
        assert posted and all(m.deleted for m in posted)
        deleted = {c.params.get("ts") for c in sl.fake.calls("chat.delete") if c.status == 200}
        assert {m.ts for m in posted} <= deleted  # taken away by chat.delete
        # Refused once, then not asked again in that channel.
        assert len(sl.fake.calls("assistant.threads.setStatus")) == 1
        # Paced: one working line at a time, and no more of them than refreshes.
        assert len(posted) <= 3 / 1.0 + 1


async def test_the_working_line_is_edited_while_a_tool_runs_and_deleted_on_abort(
    sl: SlackWorld, tmp_path: Path
) -> None:
    sl.fake.world.assistant = False
    async with slack_stack(sl, tmp_path, typing_refresh_s=1.0) as stack:
        thread = await stack.start_thread()
        sl.say(thread, "LONGTOOL please")
        edited = await wait_for(
            lambda: [m for m in _working(sl.bot_messages(thread)) if m.edits],
            lambda ms: any(re.search(r"\d+s$", m.shown) for m in ms),
            timeout=20,
        )
        assert len(_working(sl.bot_messages(thread))) == 1  # one line, edited in place
        updates = [
            c.at
            for c in sl.fake.calls("chat.update")
            if c.params.get("ts") == edited[0].ts and c.status == 200
        ]
        # Paced as every edit in the channel (the stack's min_edit_interval_s is 0.3).
        assert all(b - a >= 0.29 for a, b in zip(updates, updates[1:], strict=False))
        sl.command(thread, "abort")
        await wait_for(
            lambda: stack.runtime.snapshot(thread), lambda s: s is not None and s.run is None
        )
        await wait_for(lambda: not _working(sl.bot_messages(thread)))  # typing off: gone
        assert all(m.deleted for m in _all_working(sl, thread))


async def test_a_working_line_slack_would_not_delete_is_deleted_later(
    sl: SlackWorld, tmp_path: Path
) -> None:
    sl.fake.world.assistant = False
    async with slack_stack(sl, tmp_path, typing_refresh_s=1.0) as stack:
        thread = await stack.start_thread()
        sl.fake.inject_fault(503, method="chat.delete", times=1)
        sl.say(thread, "SLOW work")
        await stack.until_footers(thread, 1)
        await wait_for(lambda: not _working(sl.bot_messages(thread)), timeout=15)
        assert all(m.deleted for m in _all_working(sl, thread))
        assert [c.status for c in sl.fake.calls("chat.delete")][:1] == [503]  # it was refused
        assert is_footer(sl.bot_messages(thread)[-1])


async def test_a_working_line_left_by_a_killed_spindle_is_deleted_at_the_restart(
    sl: SlackWorld, tmp_path: Path
) -> None:
    sl.fake.world.assistant = False
    async with slack_stack(sl, tmp_path) as stack:
        thread = await stack.start_thread()
        sl.say(thread, "hi")
        await stack.until_footers(thread, 1)
    channel, thread_ts = sl.where(thread)
    # What a Spindle killed mid-run leaves: its working line, with no process to take it away.
    left = sl.fake.post_quietly(channel, BOT_USER, "_working… 12s_", thread_ts=thread_ts)
    said = sl.fake.post_quietly(channel, BOT_USER, "_working… on it_", thread_ts=thread_ts)
    async with slack_stack(sl, tmp_path) as stack:
        await wait_for(lambda: sl.fake.message(channel, left).deleted)
        assert not sl.fake.message(channel, said).deleted  # not a working line: kept
        sl.say(thread, "hi again")
        await stack.until_footers(thread, 2)
