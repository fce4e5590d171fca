"""A local fake Telegram Bot API (HTTP on 127.0.0.1, long polling, forum topics, inline
keyboards, 429 ``retry_after`` and 5xx injection) that the real python-telegram-bot talks to."""

from threadspindle.testkit.fake_telegram.limits import TelegramRateLimits
from threadspindle.testkit.fake_telegram.server import TOKEN, FakeTelegram
from threadspindle.testkit.fake_telegram.world import BOT_ID, TgMessage

__all__ = ["BOT_ID", "TOKEN", "FakeTelegram", "TelegramRateLimits", "TgMessage"]
