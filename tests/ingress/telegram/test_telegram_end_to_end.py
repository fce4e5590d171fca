"""The whole Telegram bot through the real python-telegram-bot against the fake Telegram:
runtime on a real SQLite log, stream renderer over TelegramPlatform, scripted fake agent
(``testkit.fake_discord.stack.SCRIPT`` says what each prompt word makes it do)."""

from __future__ import annotations

from pathlib import Path

from threadspindle.testkit.fake_telegram.stack import TelegramWorld, is_footer, telegram_stack


async def test_a_topic_is_started_and_answers_with_one_footer(
    tg: TelegramWorld, tmp_path: Path
) -> None:
    async with telegram_stack(tg, tmp_path) as stack:
        thread = await stack.start_topic()
        tg.say(thread, "hi")
        messages = await stack.until_footers(thread, 1)
        texts = [m.text for m in messages]
        assert "Hello from fake agent." in texts
        assert sum(map(is_footer, messages)) == 1
