"""The fake Telegram's documented message limits (``testkit.fake_telegram.limits``, opt-in):
alone (time given), and over HTTP with the real python-telegram-bot: unbudgeted calls get
Telegram's 429s, and the shared ``RequestBudget`` (Telegram's documented figures) sends as
many threads' messages through without one, a 429's ``retry_after`` holding the budget."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import trio
import trio_asyncio
from telegram import Bot

from threadspindle.effects.asyncio_loop import open_asyncio_loop
from threadspindle.effects.platform import PlatformError
from threadspindle.effects.request_budget import (
    TELEGRAM_BUDGET,
    TELEGRAM_CHAT_RULE,
    RequestBudget,
    telegram_scope,
)
from threadspindle.effects.retrying_platform import RetryingPlatform
from threadspindle.effects.telegram_platform import TelegramPlatform, telegram_thread_id
from threadspindle.ingress.telegram.host import _anyio_sees_trio_asyncio
from threadspindle.testkit.fake_telegram import FakeTelegram, TelegramRateLimits

GROUP, PRIVATE = -1001, 42


def test_the_limits_as_telegram_documents_them() -> None:
    limits = TelegramRateLimits()
    # about one message a second in a chat, a short burst allowed: 3 in any 3 s; a refused
    # one counts against nothing
    for at in (10.0, 10.2, 10.4):
        assert limits.check("sendMessage", PRIVATE, at) is None
    assert limits.check("editMessageText", PRIVATE, 10.5) == 3  # whole seconds, rounded up
    assert limits.check("sendMessage", PRIVATE, 13.0) is None
    # methods that send no message are not counted
    for _ in range(50):
        assert limits.check("sendChatAction", PRIVATE, 11.1) is None
        assert limits.check("deleteMessage", PRIVATE, 11.1) is None
    # 20 a minute in a group (whatever its topics), one a second
    for n in range(20):
        assert limits.check("sendMessage", GROUP, 100.0 + n) is None
    assert limits.check("sendMessage", GROUP, 121.0) == 39  # until the first is a minute old
    assert limits.check("sendMessage", GROUP, 160.0) is None
    # 30 a second in all
    for chat in range(1000, 1030):
        assert limits.check("sendMessage", chat, 200.0) is None
    assert limits.check("sendMessage", 2000, 200.5) == 1
    assert limits.check("sendMessage", 2000, 201.0) is None
    assert limits.statistics() == {
        "requests": 59,
        "429_global": 1,
        "429_chat": 1,
        "429_group": 1,
    }


@pytest.fixture
def fake() -> Iterator[FakeTelegram]:
    with FakeTelegram() as started:
        yield started


async def test_the_budget_keeps_many_threads_within_telegrams_limits(fake: FakeTelegram) -> None:
    alice = fake.add_user("alice")
    group = fake.add_group("dev")
    topics = [fake.add_topic(group, f"topic {n}") for n in range(2)]
    privates = [fake.add_private_chat(fake.add_user(f"user{n}")) for n in range(36)]
    fake.add_private_chat(alice)
    threads = [telegram_thread_id(group, topic) for topic in topics]
    threads += [telegram_thread_id(chat) for chat in privates]
    _anyio_sees_trio_asyncio()
    async with open_asyncio_loop():
        bot: Bot = await trio_asyncio.aio_as_trio(
            lambda: _made(Bot(fake.token, base_url=fake.base_url))
        )()
        await trio_asyncio.aio_as_trio(bot.initialize)()
        platform = TelegramPlatform(bot)
        limits = fake.enforce_rate_limits()

        # Unbudgeted, a burst in one chat is refused as Telegram refuses it.
        for text in ("one", "two", "three"):
            await platform.send(telegram_thread_id(alice), text)
        with pytest.raises(PlatformError) as refused:
            await platform.send(telegram_thread_id(alice), "four")
        assert refused.value.retry_after is not None and 1 <= refused.value.retry_after <= 3
        assert fake.rate_limit_statistics()["429_chat"] == 1

        async with trio.open_nursery() as nursery:
            # Telegram's figures, the chat's one a second included (TELEGRAM_CHAT_RULE)
            limits_of_budget = TELEGRAM_BUDGET.model_copy(
                update={"channel_rules": (TELEGRAM_CHAT_RULE, *TELEGRAM_BUDGET.channel_rules)}
            )
            budget = RequestBudget(limits_of_budget, scope_of=telegram_scope)
            await nursery.start(budget.run)
            retrying = RetryingPlatform(platform, budget=budget)
            # A 429 that the budget could not foresee: its retry_after holds the chat.
            fake.inject_fault(429, method="sendMessage", retry_after=1)
            shown: dict[str, tuple[str, str]] = {}
            started = time.monotonic()

            async def stream(thread: str) -> None:
                message = await retrying.send(thread, f"{thread} w0")
                for word in range(1, 3):
                    await retrying.edit(thread, message, f"{thread} w{word}")
                shown[thread] = (message, f"{thread} w2")

            async with trio.open_nursery() as streams:
                for thread in threads:
                    streams.start_soon(stream, thread)
            elapsed = time.monotonic() - started
            statistics = budget.statistics()
            nursery.cancel_scope.cancel()
        await trio_asyncio.aio_as_trio(bot.shutdown)()

    stats = fake.rate_limit_statistics()
    assert stats["429_global"] == 0 and stats["429_group"] == 0, stats
    assert stats["429_chat"] == 1, stats  # the unbudgeted one only
    assert statistics.holds == 1  # the injected 429 went to the budget
    assert retrying.statistics().rate_limited == 1
    sent = 3 * len(threads)  # a send and two edits each
    assert limits.requests == 4 + sent
    assert elapsed >= (sent - 30) / 30  # 114 messages at 30 a second
    for thread, (message_id, text) in shown.items():
        chat = int(thread.split(":")[1])
        assert fake.message(chat, int(message_id)).text == text


async def _made(bot: Bot) -> Bot:
    return bot
