"""The topic follows the agent's session title (editForumTopic), paced by the platform's
window (two renames per ten minutes by default: the third title waits, coalesced)."""

from __future__ import annotations

from pathlib import Path

from threadspindle.testkit.fake_telegram.stack import TelegramWorld, telegram_stack


async def test_the_topic_is_renamed_after_the_agents_title(
    tg: TelegramWorld, tmp_path: Path
) -> None:
    async with telegram_stack(tg, tmp_path) as stack:
        thread = await stack.start_topic()
        chat, topic = tg.where(thread)
        tg.say(thread, "TITLE please")
        await stack.until_footers(thread, 1)
        assert tg.fake.topics(chat)[topic] == "Session title 2"
        renames = [name for c, t, name in tg.fake.world.topic_renames if (c, t) == (chat, topic)]
        assert renames == ["Session title 1", "Session title 2"]  # the third waits
        assert stack.runtime.snapshot(thread).title == "Session title 3"
