"""The fake Discord's documented rate limits (``testkit.fake_discord.limits``, opt-in): the
global limit and the per-route buckets, their headers and 429s; alone (time given), over
HTTP, and the whole bot streaming into many threads under them without one 429."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from dataclasses import replace
from pathlib import Path

import trio

from threadspindle.effects.request_budget import DISCORD_BUDGET
from threadspindle.testkit.fake_discord import DiscordRateLimits
from threadspindle.testkit.fake_discord.harness import World
from threadspindle.testkit.fake_discord.limits import DISCORD_ROUTE_BUCKETS
from threadspindle.testkit.fake_discord.stack import discord_stack, is_footer

MESSAGES = "/channels/10/messages"


def test_the_global_limit_counts_every_route_but_interactions() -> None:
    limits = DiscordRateLimits(global_limit=3)
    assert limits.check("GET", "/users/@me", 100.0)[1] is None
    assert limits.check("POST", MESSAGES, 100.1)[1] is None
    assert limits.check("POST", "/interactions/1/tok/callback", 100.2)[1] is None  # exempt
    assert limits.check("POST", "/channels/11/typing", 100.3)[1] is None
    headers, retry_after = limits.check("GET", "/users/@me", 100.4)
    assert retry_after is not None and abs(retry_after - 0.6) < 1e-9
    assert headers["X-RateLimit-Global"] == "true" and headers["X-RateLimit-Scope"] == "global"
    assert limits.check("GET", "/users/@me", 101.0)[1] is None  # a new window
    assert limits.statistics() == {"requests": 6, "429_global": 1, "429_route": 0}


def test_a_route_bucket_counts_per_channel_with_its_headers() -> None:
    limits = DiscordRateLimits()
    for n in range(5):
        headers, retry_after = limits.check("PATCH", f"{MESSAGES}/{n}", 10.0 + n * 0.1)
        assert retry_after is None
        assert headers["X-RateLimit-Remaining"] == str(4 - n)
        assert headers["X-RateLimit-Limit"] == "5"
    headers, retry_after = limits.check("PATCH", f"{MESSAGES}/9", 11.0)
    assert retry_after is not None and abs(retry_after - 4.0) < 1e-9
    assert headers["X-RateLimit-Scope"] == "user" and headers["X-RateLimit-Remaining"] == "0"
    assert float(headers["X-RateLimit-Reset-After"]) == 4.0
    # Another channel, and another route in the same channel, have their own buckets.
    assert limits.check("PATCH", "/channels/11/messages/1", 11.0)[1] is None
    assert limits.check("POST", MESSAGES, 11.0)[1] is None
    assert limits.check("PATCH", f"{MESSAGES}/9", 15.0)[1] is None  # reset 5 s after the first
    assert limits.statistics()["429_route"] == 1


def _get(url: str) -> tuple[int, dict[str, str], dict[str, object]]:
    request = urllib.request.Request(url, headers={"Authorization": "Bot fake-token"})
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            return answer.status, dict(answer.headers), json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), json.loads(error.read())


def test_over_http_a_global_429_says_so_as_discord_does(world: World) -> None:
    world.fake.enforce_rate_limits(DiscordRateLimits(global_limit=5, global_window_s=30.0))
    url = f"{world.fake.rest_base}/users/@me"
    answers = [_get(url) for _ in range(6)]
    assert [status for status, _, _ in answers] == [200] * 5 + [429]
    _, headers, body = answers[-1]
    assert body["global"] is True and 0 < float(str(body["retry_after"])) <= 30
    assert headers["X-RateLimit-Global"] == "true" and "Via" in headers
    assert float(headers["Retry-After"]) > 0
    assert world.fake.rate_limit_statistics()["429_global"] == 1


async def test_the_bot_streams_into_many_threads_under_discords_limits_without_a_429(
    world: World, tmp_path: Path
) -> None:
    """Twelve threads answering a burst of 60 deltas each at once (20 a second): the
    shared budget keeps the bot inside the global limit and every channel's buckets, and
    learns the edit bucket's size from the server's headers (3 per 5 s here, stricter than
    the documented 5 the budget starts with)."""
    budget = DISCORD_BUDGET.model_copy(update={"requests": 20})  # as tight as the fake
    buckets = tuple(
        replace(bucket, limit=3) if bucket.name == "edit" else bucket
        for bucket in DISCORD_ROUTE_BUCKETS
    )
    async with discord_stack(world, tmp_path, budget=budget) as stack:
        threads = [await stack.start_thread() for _ in range(12)]
        await trio.sleep(0.5)
        limits = world.fake.enforce_rate_limits(DiscordRateLimits(global_limit=20, buckets=buckets))
        started = time.monotonic()
        for thread in threads:
            world.fake.send_message(thread, world.alice, "BURST")
        for thread in threads:
            messages = await stack.until_footers(thread, 1, timeout=90)
            answer = [m.content for m in messages[1:-1] if m.author_id == world.fake.bot_user_id]
            assert " ".join(answer).split() == [f"b{i}" for i in range(60)]  # exactly
            assert is_footer(messages[-1])
        elapsed = time.monotonic() - started
        stats = world.fake.rate_limit_statistics()
        assert stack.renderers.budget is not None
        learned = stack.renderers.budget.statistics()
    assert learned.observed >= 1 and learned.spent >= 1  # the headers reached the budget
    # Every budgeted request was stamped as it left (the aiohttp trace, across trio-asyncio):
    # its token counted from then, not from its answer.
    assert learned.stamped >= 12 * 2 and learned.unstamped == 0, learned
    assert stats["429_global"] == 0 and stats["429_route"] == 0, stats
    assert stats["requests"] <= 20 * (elapsed + 1) + 5 * 12  # never past the global rate
    assert limits.requests == stats["requests"]
