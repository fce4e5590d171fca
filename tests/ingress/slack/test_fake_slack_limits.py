"""The fake Slack's documented method tiers (``testkit.fake_slack.limits``, opt-in): alone
(time given), and over HTTP with the real slack-sdk: unbudgeted calls get Slack's 429s, and
the shared ``RequestBudget`` (Slack's figures, ``SLACK_BUDGET``) sends many threads' posts
and edits in several channels through without one, a 429's ``Retry-After`` holding every
channel's edits."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio
import trio_asyncio
from slack_sdk.web.async_client import AsyncWebClient

from threadspindle.effects.asyncio_loop import open_asyncio_loop
from threadspindle.effects.platform import PlatformError
from threadspindle.effects.request_budget import (
    SLACK_BUDGET,
    ChannelRule,
    RequestBudget,
    slack_scope,
)
from threadspindle.effects.retrying_platform import RetryingPlatform
from threadspindle.effects.slack_platform import SLACK_LIMITS, SlackPlatform, slack_thread_id
from threadspindle.testkit.fake_slack.limits import SlackRateLimits
from threadspindle.testkit.fake_slack.server import FakeSlack
from threadspindle.testkit.fake_slack.stack import slack_stack, slack_world

pytestmark = pytest.mark.timeout(120)


def test_the_limits_as_slack_documents_them() -> None:
    limits = SlackRateLimits()
    # chat.postMessage: about one a second in a channel, a short burst: 5 in any 5 s
    for at in (10.0, 10.2, 10.4, 10.6, 10.8):
        assert limits.check("chat.postMessage", "C1", at) is None
    assert limits.check("chat.postMessage", "C1", 10.9) == 5  # whole seconds, rounded up
    assert limits.check("chat.postMessage", "C2", 10.9) is None  # another channel
    assert limits.check("chat.postMessage", "C1", 15.0) is None
    # chat.update: Tier 3, 50 a minute for the whole workspace, whatever the channel
    for n in range(50):
        assert limits.check("chat.update", f"C{n % 5}", 100.0 + n * 0.1) is None
    assert limits.check("chat.update", "C9", 106.0) == 54  # until the first is a minute old
    assert limits.check("chat.update", "C9", 160.0) is None
    # chat.postEphemeral: Tier 4, 100 a minute
    for _ in range(100):
        assert limits.check("chat.postEphemeral", "C1", 200.0) is None
    assert limits.check("chat.postEphemeral", "C1", 200.0) == 60
    # methods whose limits Slack does not publish are not limited
    for _ in range(200):
        assert limits.check("assistant.threads.setStatus", "C1", 300.0) is None
    assert limits.statistics() == {
        "calls": 8 + 52 + 101,
        "429": 3,
        "429 chat.postEphemeral": 1,
        "429 chat.postMessage": 1,
        "429 chat.update": 1,
    }


@pytest.fixture
def fake() -> Iterator[FakeSlack]:
    with FakeSlack() as started:
        yield started


async def test_the_budget_keeps_many_threads_in_several_channels_within_slacks_limits(
    fake: FakeSlack,
) -> None:
    alice = fake.add_user("alice")
    channels = [fake.add_channel(f"dev{n}") for n in range(4)]
    random = fake.add_channel("random")
    elsewhere = slack_thread_id(random, fake.send_message(random, alice, "not budgeted"))
    threads = _threads(fake, alice, channels, 5)
    async with open_asyncio_loop():
        client = await _client(fake)
        # Edits paced by the budget, not by the platform's own per-channel interval.
        platform = SlackPlatform(client, SLACK_LIMITS.model_copy(update={"min_edit_interval_s": 0}))
        # The tier's shape in a shorter window (20 a 4 s, not 50 a minute), the same on both
        # sides, so that the budget's waits show within a test.
        limits = fake.enforce_rate_limits(SlackRateLimits(tier3_limit=20, tier_window_s=4.0))

        # Unbudgeted, a burst in one channel is refused as Slack refuses it.
        for text in ("one", "two", "three", "four", "five"):
            await platform.send(elsewhere, text)
        with pytest.raises(PlatformError) as refused:
            await platform.send(elsewhere, "six")
        assert refused.value.retry_after is not None and 1 <= refused.value.retry_after <= 5
        assert fake.rate_limit_statistics()["429 chat.postMessage"] == 1

        budget_limits = SLACK_BUDGET.model_copy(
            update={
                "channel_rules": (
                    ChannelRule(kinds=("send", "reply"), limit=5, per_s=5.0),
                    ChannelRule(kinds=("edit",), limit=20, per_s=4.0, across_channels=True),
                )
            }
        )
        async with trio.open_nursery() as nursery:
            budget = RequestBudget(budget_limits, scope_of=slack_scope)
            await nursery.start(budget.run)
            retrying = RetryingPlatform(platform, budget=budget)
            # A 429 the budget could not foresee: its Retry-After holds every channel's edits.
            fake.inject_fault(429, method="chat.update", retry_after=1)
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

    stats = fake.rate_limit_statistics()
    assert stats["429"] == 1, stats  # the unbudgeted post only
    assert statistics.holds == 1  # the injected 429 went to the budget
    assert retrying.statistics().rate_limited == 1
    assert limits.calls == 6 + len(threads) * 3 + 1  # the injected 429 was never counted
    # 40 edits at 19 an intermediate window of 4 s (the 20th is left to final texts).
    assert elapsed >= 2 * 4.0
    assert len(shown) == len(threads)
    for thread, (message_id, text) in shown.items():
        channel = thread.split(":")[1]
        assert fake.message(channel, message_id).text == text


def _threads(fake: FakeSlack, user: str, channels: list[str], each: int) -> list[str]:
    """``each`` Slack threads in every channel (a parent message each), as thread ids."""
    return [
        slack_thread_id(channel, fake.send_message(channel, user, f"topic {n}"))
        for channel in channels
        for n in range(each)
    ]


async def _client(fake: FakeSlack) -> AsyncWebClient:
    """slack-sdk's client of the fake, made on the asyncio side (inside the loop)."""
    return await trio_asyncio.aio_as_trio(  # type: ignore[no-any-return]
        lambda: _made(AsyncWebClient(token=fake.bot_token, base_url=fake.base_url))
    )()


async def _made(client: AsyncWebClient) -> AsyncWebClient:
    return client


async def test_many_threads_streaming_in_one_channel_get_no_429_from_slack(
    tmp_path: Path,
) -> None:
    """The whole app (``slack_stack``) against the fake Slack enforcing Slack's documented
    tiers: six threads of one project channel answer at once, each streamed answer and
    footer exactly right, and Slack never answers 429."""
    with slack_world(tmp_path) as sl:
        limits = sl.fake.enforce_rate_limits()
        async with slack_stack(sl, tmp_path) as stack:
            threads = [
                slack_thread_id(sl.project, sl.fake.send_message(sl.project, sl.alice, "SLOW"))
                for _ in range(6)
            ]
            for thread in threads:
                await stack.until_footers(thread, 1, timeout=60.0)
            answers = {
                thread: [m.shown for m in sl.bot_messages(thread) if "slow" in m.shown]
                for thread in threads
            }
    assert limits.statistics()["429"] == 0, limits.statistics()
    expected = " ".join(f"slow{i}" for i in range(10))
    for thread in threads:
        assert [text.strip() for text in answers[thread]] == [expected], answers[thread]
    assert limits.calls > 6 * 3  # posts and edits of every thread went through the limits


async def _working_lines(fake: FakeSlack, *, counted: bool) -> tuple[dict[str, int], object]:
    """Six threads in two channels of a workspace where the app is no assistant app: each
    shows its "working…" line (typing), then posts and edits, three times, against a tier
    of 8 calls a 4 s (fake and budget alike). ``counted``: the platform asks the budget
    before each working-line call (``on_inside_call``), as ``ThreadRenderers`` wires it."""
    fake.world.assistant = False
    alice = fake.add_user("alice")
    channels = [fake.add_channel(f"ops{n}") for n in range(2)]
    threads = _threads(fake, alice, channels, 3)
    async with open_asyncio_loop():
        client = await _client(fake)
        platform = SlackPlatform(
            client,
            SLACK_LIMITS.model_copy(update={"min_edit_interval_s": 0, "typing_refresh_s": 0.2}),
        )
        fake.enforce_rate_limits(SlackRateLimits(tier3_limit=8, tier_window_s=4.0))
        budget_limits = SLACK_BUDGET.model_copy(
            update={
                "channel_rules": (
                    ChannelRule(kinds=("send", "reply"), limit=5, per_s=5.0),
                    ChannelRule(kinds=("edit",), limit=8, per_s=4.0, across_channels=True),
                    ChannelRule(kinds=("delete",), limit=8, per_s=4.0, across_channels=True),
                )
            }
        )
        async with trio.open_nursery() as nursery:
            budget = RequestBudget(budget_limits, scope_of=slack_scope)
            await nursery.start(budget.run)
            if counted:
                platform.on_inside_call = budget.try_inside
            retrying = RetryingPlatform(platform, budget=budget)

            async def work(thread: str) -> None:
                for round_ in range(3):
                    for _ in range(2):  # the line is posted, then edited
                        try:
                            await retrying.typing(thread)
                        except PlatformError:
                            pass  # typing is tried once: a refusal is no failure of the run
                        await trio.sleep(0.3)
                    message = await retrying.send(thread, f"{thread} r{round_}")
                    await retrying.edit(thread, message, f"{thread} r{round_} done")

            async with trio.open_nursery() as workers:
                for thread in threads:
                    workers.start_soon(work, thread)
            statistics = budget.statistics()
            nursery.cancel_scope.cancel()
    return fake.rate_limit_statistics(), statistics


async def test_the_working_lines_calls_go_only_with_a_token_to_spare(fake: FakeSlack) -> None:
    stats, budget = await _working_lines(fake, counted=True)
    assert stats["429"] == 0, stats
    assert budget.inside > 0  # the working lines' posts, edits and deletes were counted
    assert any(c.params.get("text") == "_working…_" for c in fake.calls("chat.postMessage"))


async def test_uncounted_working_lines_run_into_slacks_limits(fake: FakeSlack) -> None:
    """The case above without the budget asked: the working lines' calls pass the tier."""
    stats, _ = await _working_lines(fake, counted=False)
    assert stats["429"] > 0, stats
