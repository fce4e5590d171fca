"""effects.request_budget with a rule counted across channels (``ChannelRule.across_channels``)
and Slack's documented limits (``SLACK_BUDGET``), in trio's mock time: a method's tier is one
window for the whole workspace, and a 429 for it holds every channel."""

from __future__ import annotations

from functools import partial

import pytest
import trio

from tests.effects.test_request_budget import Grants, most_in_any_window, start_budget
from threadspindle.effects.request_budget import (
    ALL_CHANNELS,
    SLACK_BUDGET,
    BudgetLimits,
    ChannelRule,
    Priority,
    slack_scope,
)

ACROSS = BudgetLimits(
    requests=100,
    window_s=1.0,
    margin_s=0.0,
    reserve=1,
    channel_rules=(ChannelRule(kinds=("edit",), limit=4, per_s=10.0, across_channels=True),),
)


def test_slacks_documented_limits() -> None:
    rules = {rule.kinds: rule for rule in SLACK_BUDGET.channel_rules}
    # chat.update and chat.delete: Tier 3, 50+ a minute per workspace.
    assert (rules[("edit",)].limit, rules[("edit",)].per_s) == (50, 60.0)
    assert rules[("edit",)].across_channels
    assert (rules[("delete",)].limit, rules[("delete",)].per_s) == (50, 60.0)
    assert rules[("delete",)].across_channels
    # chat.postMessage: about one a second in a channel, short bursts.
    post = rules[("send", "reply")]
    assert (post.limit, post.per_s, post.across_channels) == (5, 5.0, False)
    # No limit across methods is published: the global window never binds.
    assert SLACK_BUDGET.requests >= 1000
    # A thread's posts count in its channel.
    assert slack_scope("sl:C1:1700000000.000100") == ("sl:C1", False)


async def test_edits_of_every_channel_share_one_window(autojump_clock: object) -> None:
    grants = Grants()
    async with trio.open_nursery() as nursery:
        budget = await start_budget(nursery, ACROSS)
        for n in range(8):
            await nursery.start(grants.ask, budget, f"edit{n}", f"c{n}")
        await trio.sleep(0.1)
        # Four a window for all the channels together, the last left to a final text.
        assert grants.labels() == ["edit0", "edit1", "edit2"]
        await nursery.start(partial(grants.ask, final=True), budget, "final", "c9")
        await trio.sleep(0.1)
        assert grants.at("final") == pytest.approx(0.1)
        await trio.sleep(30)
        times = [t for _, t in grants.log]
        assert most_in_any_window(times, 10.0) == 4
        assert len(times) == 9 and max(times) == pytest.approx(20.0)
        # One window for the connection, not one a channel.
        assert budget.statistics().channel_windows == 1
        assert all(key[0] == ALL_CHANNELS for key in budget._windows)
        nursery.cancel_scope.cancel()


async def test_a_429_for_a_kind_counted_across_channels_holds_every_channel(
    autojump_clock: object,
) -> None:
    grants = Grants()
    limits = ACROSS.model_copy(
        update={
            "channel_rules": (
                *ACROSS.channel_rules,
                ChannelRule(kinds=("send",), limit=3, per_s=3.0),
            )
        }
    )
    async with trio.open_nursery() as nursery:
        budget = await start_budget(nursery, limits)
        budget.hold(5.0, channel_id="c1", kind="edit")
        await nursery.start(grants.ask, budget, "edit-c2", "c2")
        await nursery.start(grants.ask, budget, "send-c2", "c2", Priority.POST, "send")
        budget.hold(5.0, channel_id="c3", kind="send")
        await nursery.start(grants.ask, budget, "send-c3", "c3", Priority.POST, "send")
        await nursery.start(grants.ask, budget, "send-c4", "c4", Priority.POST, "send")
        await trio.sleep(10)
        nursery.cancel_scope.cancel()
    # The edit in another channel waited out the hold; a send (counted per channel) did not,
    # and a send's 429 held only its own channel.
    assert grants.at("edit-c2") == pytest.approx(5.0)
    assert grants.at("send-c2") == pytest.approx(0.0)
    assert grants.at("send-c4") == pytest.approx(0.0)
    assert grants.at("send-c3") == pytest.approx(5.0)


async def test_slack_posts_five_in_5_s_in_a_channel_and_edits_fifty_a_minute_in_all(
    autojump_clock: object,
) -> None:
    grants = Grants()
    async with trio.open_nursery() as nursery:
        budget = await start_budget(nursery, SLACK_BUDGET)
        for n in range(7):
            await nursery.start(grants.ask, budget, f"post{n}", "C1", Priority.POST, "send")
        await nursery.start(grants.ask, budget, "other", "C2", Priority.POST, "send")
        for n in range(60):
            await nursery.start(grants.ask, budget, f"edit{n}", f"C{n % 7}")
        await trio.sleep(130)
        nursery.cancel_scope.cancel()
    posts = [grants.at(f"post{n}") for n in range(7)]
    assert posts[:5] == [0.0] * 5 and min(posts[5:]) >= 5.0
    assert grants.at("other") == 0.0
    edits = sorted(grants.at(f"edit{n}") for n in range(60))
    assert most_in_any_window(edits, 60.0) <= 50
    assert edits[48] == 0.0 and edits[49] >= 60.0  # the 50th of a minute is a final's
