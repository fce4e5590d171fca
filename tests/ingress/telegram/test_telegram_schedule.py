"""``/schedule`` and ``/verbosity`` in Telegram, through the real python-telegram-bot against
the fake Telegram and the live runtime (its schedule timer on the real clock)."""

from __future__ import annotations

from pathlib import Path

from threadspindle.testkit.fake_discord.harness import wait_for
from threadspindle.testkit.fake_telegram.stack import TelegramWorld, telegram_stack


async def test_a_scheduled_prompt_fires_in_its_topic(tg: TelegramWorld, tmp_path: Path) -> None:
    async with telegram_stack(tg, tmp_path) as stack:
        names = [c["command"] for c in tg.fake.commands()]
        assert "schedule" in names and "verbosity" in names
        thread = await stack.start_topic()
        tg.say(thread, "/schedule in 1s a prompt for later")
        tg.say(thread, "/schedule 0 9 * * 1-5 weekday standup")
        tg.say(thread, "/verbosity text")
        await wait_for(
            lambda: [text for _, text in stack.agents.delivered],
            lambda got: got == ["a prompt for later"],
            timeout=15,
        )
        await stack.until_footers(thread, 1)
        tg.say(thread, "/schedule list")
        listed = await wait_for(
            lambda: [m.text for m in tg.bot_messages(thread) if "Schedules (1)" in m.text]
        )
        assert "weekday standup" in listed[0] and "0 9 * * 1-5" in listed[0]
        texts = [m.text for m in tg.bot_messages(thread)]
        assert any("Scheduled s1" in t for t in texts)
        assert any("Schedule s1 is due" in t for t in texts)
        assert any("Verbosity: text" in t for t in texts)
        assert stack.runtime.snapshot(thread).verbosity == "text"
