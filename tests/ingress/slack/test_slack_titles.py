"""The agent's session title on Slack: a Slack thread has no name, so the title goes to
``assistant.threads.setTitle`` (an assistant app's thread name), paced like every platform's
renames (coalesced to the latest); where Slack refuses it (not an assistant app) nothing is
shown and it is not asked again in that channel."""

from __future__ import annotations

from pathlib import Path

from threadspindle.testkit.fake_discord.harness import wait_for
from threadspindle.testkit.fake_slack.stack import SlackWorld, slack_stack


async def test_titles_set_the_assistant_thread_title(sl: SlackWorld, tmp_path: Path) -> None:
    async with slack_stack(sl, tmp_path) as stack:
        thread = await stack.start_thread()
        sl.say(thread, "TITLE please")  # the fake agent names its session three times
        await stack.until_footers(thread, 1)
        channel, thread_ts = sl.where(thread)
        titles = await wait_for(lambda: list(sl.fake.world.titles))
        # Two renames per window (the default pacing): the first, then the latest waits.
        assert titles[0] == (channel, thread_ts, "Session title 1")
        assert all(t[:2] == (channel, thread_ts) for t in titles)
        state = stack.runtime.snapshot(thread)
        assert state is not None and state.title == "Session title 3"


async def test_where_slack_refuses_titles_nothing_is_shown(sl: SlackWorld, tmp_path: Path) -> None:
    sl.fake.world.assistant = False  # not an assistant app
    async with slack_stack(sl, tmp_path) as stack:
        thread = await stack.start_thread()
        sl.say(thread, "TITLE please")
        await stack.until_footers(thread, 1)
        await wait_for(lambda: sl.fake.calls("assistant.threads.setTitle"))
        assert sl.fake.world.titles == []
        assert len(sl.fake.calls("assistant.threads.setTitle")) == 1  # refused once, then not
        shown = "".join(m.shown for m in sl.bot_messages(thread))
        assert "Session title" not in shown  # no message per title either
