"""effects.request_budget: the shared budget of one connection, alone, in trio's mock time
(``autojump_clock``): windows, priorities, reserves, round-robin, per-channel rules,
holds, typing, refunds, cancellation; asserted on grant times and ``statistics()``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from functools import partial

import pytest
import trio

from threadspindle.effects.request_budget import (
    DISCORD_BUDGET,
    TELEGRAM_BUDGET,
    TELEGRAM_CHAT_RULE,
    BudgetLimits,
    BudgetStatistics,
    CallKind,
    ChannelRule,
    Priority,
    RequestBudget,
    request_answered,
    request_sent,
    telegram_scope,
)

SMALL = BudgetLimits(requests=5, window_s=1.0, margin_s=0.0, reserve=1)


@pytest.fixture
async def budget() -> AsyncIterator[RequestBudget]:
    async with trio.open_nursery() as nursery:
        budget = RequestBudget(SMALL)
        await nursery.start(budget.run)
        yield budget
        nursery.cancel_scope.cancel()


async def start_budget(
    nursery: trio.Nursery, limits: BudgetLimits, **kwargs: object
) -> RequestBudget:
    budget = RequestBudget(limits, **kwargs)  # type: ignore[arg-type]
    await nursery.start(budget.run)
    return budget


class Grants:
    """Who got a token when: (label, trio time)."""

    def __init__(self) -> None:
        self.log: list[tuple[str, float]] = []

    async def ask(
        self,
        budget: RequestBudget,
        label: str,
        channel: str,
        priority: Priority = Priority.EDIT,
        kind: CallKind = "edit",
        latency: float = 0.0,
        *,
        final: bool = False,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Use with ``await nursery.start(...)``: it is in line before ``start`` returns
        (trio runs tasks started with ``start_soon`` in no promised order). The "request"
        takes ``latency`` seconds, then its token is released."""
        task_status.started()
        await budget.acquire(priority, channel, kind, final=final)
        self.log.append((label, trio.current_time()))
        await trio.sleep(latency)
        budget.release(channel, kind)

    def labels(self) -> list[str]:
        return [label for label, _ in self.log]

    def at(self, label: str) -> float:
        return next(t for name, t in self.log if name == label)


def most_in_any_window(times: list[float], span: float) -> int:
    times = sorted(times)
    return max(sum(1 for t in times if start <= t < start + span) for start in times)


async def test_no_window_of_the_servers_length_holds_more_than_the_limit(
    budget: RequestBudget, autojump_clock: object
) -> None:
    grants = Grants()
    async with trio.open_nursery() as nursery:
        for n in range(23):
            await nursery.start(grants.ask, budget, f"e{n}", f"c{n}", Priority.URGENT, "send")
    times = [t for _, t in grants.log]
    assert len(times) == 23
    # Whatever the phase of a fixed window of 1 s on the server, it holds at most 5 grants.
    assert most_in_any_window(times, 1.0) == 5
    assert max(times) == pytest.approx(4.0)  # 23 tokens: 5 at 0, 1, 2, 3 and 3 at 4
    stats = budget.statistics()
    assert isinstance(stats, BudgetStatistics)
    assert stats.granted == 23 and stats.waiting == 0
    with pytest.raises(ValueError):
        stats.granted = 0  # type: ignore[misc]  # frozen


async def test_an_urgent_call_goes_before_every_waiting_edit_and_finds_the_reserve(
    budget: RequestBudget, autojump_clock: object
) -> None:
    grants = Grants()
    async with trio.open_nursery() as nursery:
        for n in range(12):
            await nursery.start(grants.ask, budget, f"edit{n}", f"c{n}")
        await trio.sleep(0.1)
        # The edits left the last 2 tokens of the window (reserve 1 per class above them).
        assert len(grants.log) == 3
        await nursery.start(grants.ask, budget, "reply", "c0", Priority.URGENT, "reply")
        await nursery.start(grants.ask, budget, "post", "c1", Priority.POST, "send")
        await trio.sleep(0.01)
        assert grants.at("reply") == pytest.approx(0.1)  # at once, from the reserve
    # The post had to wait for the next window (the reply took POST's share), and went
    # before every waiting edit; the edits in the order they asked.
    assert grants.at("post") == pytest.approx(1.0)
    labels = grants.labels()
    # At 1.0 the three edits' tokens came back, the reply's (0.1) not yet: the post took
    # one, an edit one, and the last two of the window are the reserve.
    at_one = [label for label in labels if label.startswith("edit") and grants.at(label) == 1.0]
    assert len(at_one) == 1
    edits = [label for label in labels if label.startswith("edit")]
    assert edits[:3] == ["edit0", "edit1", "edit2"]
    assert [grants.at(f"edit{n}") for n in range(3, 12)] == sorted(
        grants.at(f"edit{n}") for n in range(3, 12)
    )
    stats = budget.statistics()
    assert stats.granted_by_priority == (1, 1, 12)


async def test_a_lower_class_never_takes_the_higher_ones_reserve(autojump_clock: object) -> None:
    limits = BudgetLimits(requests=10, window_s=1.0, margin_s=0.0, reserve=2)
    async with trio.open_nursery() as nursery:
        budget = await start_budget(nursery, limits)
        grants = Grants()
        for n in range(10):  # the first window: all ten tokens, urgent
            await nursery.start(grants.ask, budget, f"u{n}", f"u{n}", Priority.URGENT, "reply")
        for n in range(10):
            await nursery.start(grants.ask, budget, f"e{n}", f"c{n}")
        for n in range(10):
            await nursery.start(grants.ask, budget, f"p{n}", f"d{n}", Priority.POST, "send")
        await trio.sleep(1.5)
        second_window = sorted(label for label, t in grants.log if 1.0 <= t < 2.0)
        # POST goes first, and only up to 8 of 10 (2 left to URGENT); EDIT would leave 4.
        assert second_window == sorted(f"p{n}" for n in range(8))
        await trio.sleep(1.0)
        third_window = sorted(label for label, t in grants.log if 2.0 <= t < 3.0)
        assert third_window == sorted(["p8", "p9", "e0", "e1", "e2", "e3"])
        nursery.cancel_scope.cancel()


async def test_channels_take_turns_for_the_edit_budget(
    budget: RequestBudget, autojump_clock: object
) -> None:
    grants = Grants()
    async with trio.open_nursery() as nursery:
        for n in range(6):  # one busy channel asks six times first
            await nursery.start(grants.ask, budget, f"busy{n}", "busy")
        await trio.sleep(0)
        for name in ("a", "b", "c"):
            await nursery.start(grants.ask, budget, name, name)
    # EDIT gets 3 tokens a window; the quiet channels need not wait for all of busy's.
    assert {grants.at(f"busy{n}") for n in range(3)} == {0.0}  # before a, b, c asked
    # Then by turns: busy once, a, b; then c, busy, busy (no one else is left).
    assert grants.at("busy3") == grants.at("a") == grants.at("b") == pytest.approx(1.0)
    assert grants.at("c") == grants.at("busy4") == grants.at("busy5") == pytest.approx(2.0)


def five_per_five_s(kind: CallKind) -> BudgetLimits:
    """Discord's shape of a channel rule (5 calls of ``kind`` per 5 s), global room to spare."""
    return BudgetLimits(
        requests=100,
        window_s=1.0,
        margin_s=0.0,
        channel_rules=(ChannelRule(kinds=(kind,), limit=5, per_s=5.0),),
    )


async def test_a_channel_rule_holds_only_its_own_channel(autojump_clock: object) -> None:
    async with trio.open_nursery() as nursery:
        budget = await start_budget(nursery, five_per_five_s("edit"))
        grants = Grants()
        for n in range(7):
            await nursery.start(grants.ask, budget, f"a{n}", "a")
        await trio.sleep(0.5)
        await nursery.start(grants.ask, budget, "b", "b")
        await nursery.start(grants.ask, budget, "a-send", "a", Priority.POST, "send")
        # A sealed output's final text (a POST edit) takes the token the paced edits left.
        await nursery.start(grants.ask, budget, "a-final", "a", Priority.POST, "edit")
        await trio.sleep(0.01)
        assert grants.at("b") == pytest.approx(0.5)  # another channel is not held
        assert grants.at("a-send") == pytest.approx(0.5)  # nor another kind in it
        assert grants.at("a-final") == pytest.approx(0.5)
        await trio.sleep(10)
        assert grants.at("a3") == 0.0  # intermediate edits: 4 of the channel's 5
        assert grants.at("a4") == pytest.approx(5.0)  # a window after the first of them
        assert grants.at("a6") == pytest.approx(5.0)
        nursery.cancel_scope.cancel()


async def test_typing_only_with_a_token_to_spare(
    budget: RequestBudget, autojump_clock: object
) -> None:
    assert budget.try_acquire("c")  # 5 tokens, 3 kept as reserve: 2 for typing
    assert budget.try_acquire("c")
    assert not budget.try_acquire("c")
    budget.release("c", "typing")
    budget.release("c", "typing")
    grants = Grants()
    async with trio.open_nursery() as nursery:
        for n in range(8):
            await nursery.start(grants.ask, budget, f"e{n}", f"c{n}")
        await trio.sleep(1.5)
        assert budget.statistics().waiting > 0
        assert not budget.try_acquire("c")  # someone waits: typing never goes first
    await trio.sleep(2)
    assert budget.try_acquire("c")
    budget.release("c", "typing")
    stats = budget.statistics()
    assert (stats.typing_granted, stats.typing_refused) == (3, 2)


async def test_a_global_429_holds_every_grant_a_channel_429_only_its_kind(
    budget: RequestBudget, autojump_clock: object
) -> None:
    grants = Grants()
    budget.hold(2.0)
    budget.hold(5.0, channel_id="x", kind="edit")
    async with trio.open_nursery() as nursery:
        await nursery.start(grants.ask, budget, "urgent", "c", Priority.URGENT, "reply")
        await nursery.start(grants.ask, budget, "x-edit", "x")
        await nursery.start(grants.ask, budget, "x-send", "x", Priority.POST, "send")
    assert grants.at("urgent") == pytest.approx(2.0)
    assert grants.at("x-send") == pytest.approx(2.0)
    assert grants.at("x-edit") == pytest.approx(5.0)
    assert budget.statistics().holds == 2


async def test_the_servers_headers_resize_a_rule(autojump_clock: object) -> None:
    limits = BudgetLimits(
        requests=100,
        margin_s=0.0,
        channel_rules=(ChannelRule(kinds=("edit",), limit=5, per_s=5.0),),
    )
    async with trio.open_nursery() as nursery:
        budget = await start_budget(nursery, limits)
        budget.observe("a", "edit", limit=2, reset_after_s=4.0)
        budget.observe("a", "edit", limit=2, reset_after_s=4.0)  # nothing new
        grants = Grants()
        for n in range(3):  # (final texts: the whole channel window, no edit's reserve)
            await nursery.start(grants.ask, budget, f"a{n}", "a", Priority.POST)
        await nursery.start(grants.ask, budget, "b", "b", Priority.POST)
        await trio.sleep(6)
        assert grants.at("a2") == pytest.approx(5.0)  # 2 per 5 s (the longer window kept)
        assert grants.at("b") == 0.0  # the documented rule still holds elsewhere
        assert budget.statistics().observed == 1
        nursery.cancel_scope.cancel()


async def test_a_refunded_token_goes_to_the_next_waiter(
    budget: RequestBudget, autojump_clock: object
) -> None:
    grants = Grants()
    async with trio.open_nursery() as nursery:
        for n in range(3):  # granted, and never used
            await budget.acquire(Priority.EDIT, f"c{n}", "edit")
        await nursery.start(grants.ask, budget, "e3", "c3")
        await trio.sleep(0.1)
        assert grants.log == []
        budget.refund("c0", "edit", Priority.EDIT)
        await trio.sleep(0.01)
        assert grants.at("e3") == pytest.approx(0.1)
    stats = budget.statistics()
    assert (stats.refunded, stats.granted) == (1, 3)


async def test_a_token_is_held_until_its_request_completes_and_a_window_after(
    budget: RequestBudget, autojump_clock: object
) -> None:
    """A request that leaves late (a busy process) or takes long still counts: its token
    comes back one window after it completed, not after it was granted."""
    grants = Grants()
    async with trio.open_nursery() as nursery:
        for n in range(3):  # the EDIT share of the window, each request taking 4 s
            await nursery.start(grants.ask, budget, f"slow{n}", f"c{n}", Priority.EDIT, "edit", 4.0)
        await nursery.start(grants.ask, budget, "next", "c9")
        await trio.sleep(0.1)
        assert budget.statistics().in_window == 3
    assert grants.at("next") == pytest.approx(5.0)  # completed at 4, back at 5


async def test_a_stamped_token_counts_from_when_its_request_reached_the_server(
    budget: RequestBudget, autojump_clock: object
) -> None:
    """With the HTTP client stamping when a request is written and answered
    (``request_sent``, ``request_answered`` inside ``sending``), its token counts from its
    answer, or from ``in_flight_s`` (0.25 s) after it left if it is slower, not from its
    release: however long the answer takes to reach the caller. The body written after
    the headers moves the stamp; a second request made under the same token (the client
    retrying on its own) counts as one more; a request nobody stamped counts from its
    release, as before."""

    async def call(
        channel: str,
        stamps: list[tuple[object, float]],
        answer_at: float,
        release_at: float,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        task_status.started()
        await budget.acquire(Priority.URGENT, channel, "send")
        with budget.sending(channel, "send"):
            start = trio.current_time()
            for request, after in stamps:  # (the request's handle, seconds after the grant)
                await trio.sleep_until(start + after)
                request_sent(request)
            if stamps:
                await trio.sleep_until(start + answer_at)
                request_answered(stamps[-1][0])
            await trio.sleep_until(start + release_at)

    body, other = object(), object()
    async with trio.open_nursery() as nursery:
        await nursery.start(call, "c0", [(object(), 0.0)], 0.1, 4.0)  # answered at 0.1
        await nursery.start(call, "c1", [(object(), 0.0)], 3.0, 4.0)  # slow: 0.25
        await nursery.start(call, "c2", [(body, 0.0), (body, 0.5)], 3.0, 4.0)  # 0.75
        await nursery.start(call, "c3", [], 0.0, 2.0)  # never stamped: released at 2
        await trio.sleep(0.05)
        stats = budget.statistics()
        assert (stats.stamped, stats.unstamped, stats.in_window) == (3, 0, 4)
        grants = Grants()
        for n in range(4):  # each holding its token until 10 s; one token is free now
            await nursery.start(
                grants.ask, budget, f"next{n}", f"n{n}", Priority.URGENT, "send", 10.0
            )
    # Back a window (1 s, no margin) after each reached the server, not after 4 s.
    assert [grants.at(f"next{n}") for n in range(4)] == pytest.approx([0.05, 1.1, 1.25, 1.75])
    stats = budget.statistics()
    assert (stats.stamped, stats.unstamped, stats.answered_early) == (3, 1 + 4, 1)

    # A client that retries by itself sends a second request on one token: counted.
    async with trio.open_nursery() as nursery:
        await trio.sleep_until(20.0)  # every token above is back
        await nursery.start(call, "c0", [(object(), 0.0), (other, 0.2)], 0.3, 0.3)
        await trio.sleep(0.5)
        assert budget.statistics().in_window == 2
    # Outside any ``sending`` (an ingress call), a stamp is nobody's and changes nothing.
    request_sent(object())
    request_answered(object())
    assert budget.statistics().stamped == 4


async def test_expedite_lifts_a_channels_waiting_posts_ahead_of_the_others(
    budget: RequestBudget, autojump_clock: object
) -> None:
    """A reply queued behind its own thread's first post: the post, waiting at ``POST``
    behind other threads' posts, goes at ``URGENT`` once ``expedite`` lifts it."""
    grants = Grants()
    async with trio.open_nursery() as nursery:
        for n in range(5):  # the window is spent
            await nursery.start(grants.ask, budget, f"u{n}", f"u{n}", Priority.URGENT, "send")
        for n in range(6):
            await nursery.start(grants.ask, budget, f"p{n}", f"p{n}", Priority.POST, "send")
        await nursery.start(grants.ask, budget, "mine", "me", Priority.POST, "send")
        await nursery.start(grants.ask, budget, "mine-edit", "me", Priority.EDIT, "edit")
        await trio.sleep(0.1)
        assert budget.expedite("me") == 1  # the post only: its edit stays an edit
        assert budget.expedite("nobody") == 0
        stats = budget.statistics()
        assert stats.waiting_by_priority == (1, 6, 1) and stats.expedited == 1
    # At 1 s the window comes back: the lifted post first (asked last, it would have gone
    # at 2 s: three posts a window, one token kept for URGENT), then the others in turn.
    assert grants.at("mine") == pytest.approx(1.0)
    assert sorted(grants.at(f"p{n}") for n in range(6)) == pytest.approx([1, 1, 1, 2, 2, 2])
    assert budget.statistics().granted_by_priority == (6, 6, 1)


async def test_a_cancelled_waiter_leaves_the_line_and_spends_nothing(
    budget: RequestBudget, autojump_clock: object
) -> None:
    grants = Grants()
    async with trio.open_nursery() as nursery:
        for n in range(3):
            await nursery.start(grants.ask, budget, f"e{n}", f"c{n}")
        await trio.sleep(0.1)
        with trio.move_on_after(0.2):
            await budget.acquire(Priority.EDIT, "gone", "edit")
        assert budget.statistics().waiting == 0
        await nursery.start(grants.ask, budget, "next", "c9")
    assert grants.at("next") == pytest.approx(1.0)
    assert budget.statistics().granted == 4


async def test_telegram_three_in_3_s_per_chat_and_a_groups_topics_share_20_a_minute(
    autojump_clock: object,
) -> None:
    limits = TELEGRAM_BUDGET.model_copy(
        update={"channel_rules": (TELEGRAM_CHAT_RULE, *TELEGRAM_BUDGET.channel_rules)}
    )
    assert telegram_scope("tg:-100:7") == ("tg:-100", True)
    assert telegram_scope("tg:42") == ("tg:42", False)
    async with trio.open_nursery() as nursery:
        budget = await start_budget(nursery, limits, scope_of=telegram_scope)
        grants = Grants()
        for n in range(21):
            topic = f"tg:-100:{n % 3}"
            await nursery.start(grants.ask, budget, f"g{n}", topic, Priority.POST, "send")
        for n in range(21):
            await nursery.start(grants.ask, budget, f"p{n}", "tg:42", Priority.POST, "send")
        await trio.sleep(70)
        group = sorted(t for label, t in grants.log if label.startswith("g"))
        private = [t for label, t in grants.log if label.startswith("p")]
        # three in any 3 s in the group (its topics together), no 21st within the minute
        assert len(group) == 21 and group[19] == pytest.approx(6 * 3.05) and group[20] >= 60.0
        assert most_in_any_window(group, 60.0) == 20 and most_in_any_window(group, 3.0) == 3
        # a private chat is not a group: three in 3 s, whatever the minute holds
        assert len(private) == 21 and max(private) == pytest.approx(6 * 3.05)
        assert most_in_any_window(private, 3.0) == 3
        nursery.cancel_scope.cancel()


async def test_an_exempt_kind_takes_no_global_token(autojump_clock: object) -> None:
    limits = SMALL.model_copy(update={"global_exempt": ("reply",)})
    async with trio.open_nursery() as nursery:
        budget = await start_budget(nursery, limits)
        grants = Grants()
        for n in range(5):
            await nursery.start(grants.ask, budget, f"u{n}", f"c{n}", Priority.URGENT, "send")
        await nursery.start(grants.ask, budget, "reply", "c0", Priority.URGENT, "reply")
        await trio.sleep(0.1)
        assert grants.at("reply") == 0.0  # the window is full, and it went all the same
        assert budget.statistics().in_window == 5
        nursery.cancel_scope.cancel()


def test_discords_documented_limits() -> None:
    # 50 a second, 1 of them left to the calls ingress makes outside the budget (counted
    # as they go out); no margin: a token counts from its answer.
    assert DISCORD_BUDGET.requests == 49 and DISCORD_BUDGET.window_s == 1.0
    assert DISCORD_BUDGET.margin_s == 0.0 and DISCORD_BUDGET.reserve == 1
    assert DISCORD_BUDGET.global_exempt == ("reply",)  # interaction followups
    rules = {rule.kinds: (rule.limit, rule.per_s) for rule in DISCORD_BUDGET.channel_rules}
    assert rules == {("send",): (5, 5.0), ("edit",): (5, 5.0)}


async def test_the_windows_of_quiet_channels_are_dropped(autojump_clock: object) -> None:
    limits = SMALL.model_copy(
        update={"channel_rules": (ChannelRule(kinds=("edit",), limit=5, per_s=5.0),)}
    )
    async with trio.open_nursery() as nursery:
        budget = await start_budget(nursery, limits)
        grants = Grants()
        for n in range(4):
            await nursery.start(grants.ask, budget, f"e{n}", f"c{n}")
        await trio.sleep(1.5)  # three at once, the fourth a window later
        assert budget.statistics().channel_windows == 4
        await trio.sleep(61)  # the next tidy-up finds them empty
        assert budget.statistics().channel_windows == 0
        nursery.cancel_scope.cancel()


async def test_a_final_edit_takes_its_channels_place_ahead_of_its_own_paced_edit(
    budget: RequestBudget,
    autojump_clock: object,
) -> None:
    """Channels a, b, c wait in that order with paced edits; c's final text comes later:
    it goes in c's turn (not at the back of the line, not ahead of a and b), before c's own
    paced edit."""
    grants = Grants()
    async with trio.open_nursery() as nursery:
        for n in range(5):  # the window, its tokens back one at a time from 1 s on
            await nursery.start(
                grants.ask, budget, f"fill{n}", f"f{n}", Priority.URGENT, "reply", n / 10
            )
        for channel in "abc":
            await nursery.start(grants.ask, budget, f"{channel}-paced", channel)
        await nursery.start(grants.ask, budget, "d-paced", "d")
        await nursery.start(partial(grants.ask, final=True), budget, "c-final", "c")
    order = ["a-paced", "b-paced", "c-final", "d-paced", "c-paced"]
    assert sorted(order, key=grants.at) == order
    assert len({grants.at(label) for label in order}) == 5  # one at a time: the order shows


async def test_a_final_edit_may_take_its_channels_last_token_of_a_rule(
    autojump_clock: object,
) -> None:
    """A paced edit leaves its channel's last token of the 5-per-5-s rule to the final text;
    the final edit takes it."""
    limits = SMALL.model_copy(
        update={
            "requests": 50,
            "channel_rules": (ChannelRule(kinds=("edit",), limit=3, per_s=5.0),),
        }
    )
    async with trio.open_nursery() as nursery:
        budget = await start_budget(nursery, limits)
        grants = Grants()
        for n in range(2):
            await nursery.start(grants.ask, budget, f"paced{n}", "a")
        await nursery.start(grants.ask, budget, "paced2", "a")  # held: the last token
        await nursery.start(partial(grants.ask, final=True), budget, "final", "a")
        await trio.sleep(0.1)
        assert grants.labels() == ["paced0", "paced1", "final"]
        nursery.cancel_scope.cancel()


async def test_expedite_lifts_a_final_edit_but_not_a_paced_one(
    budget: RequestBudget, autojump_clock: object
) -> None:
    grants = Grants()
    async with trio.open_nursery() as nursery:
        for n in range(5):  # the window, its tokens back one at a time from 1 s on
            await nursery.start(
                grants.ask, budget, f"fill{n}", f"f{n}", Priority.URGENT, "reply", n / 10
            )
        await nursery.start(grants.ask, budget, "other-post", "o", Priority.POST)
        await nursery.start(grants.ask, budget, "t-paced", "t")
        await nursery.start(partial(grants.ask, final=True), budget, "t-final", "t")
        assert budget.statistics().waiting_by_priority == (0, 1, 2)
        assert budget.expedite("t") == 1
        assert budget.statistics().waiting_by_priority == (1, 1, 1)
    assert grants.at("t-final") < grants.at("other-post") < grants.at("t-paced")


async def test_requests_the_budget_did_not_grant_are_counted_once_as_they_go_out(
    budget: RequestBudget,
    autojump_clock: object,
) -> None:
    """Ingress's own calls (no ticket): ``request_sent`` says so, ``count_outside`` counts
    each request once (headers and body are stamped apart), and the grants leave room."""
    request, other = object(), object()
    assert request_sent(request) is False  # no attempt of the budget's in this context
    budget.count_outside(request)
    budget.count_outside(request)  # its body, after its headers
    budget.count_outside(other)
    assert budget.statistics().outside == 2
    grants = Grants()
    async with trio.open_nursery() as nursery:
        for n in range(4):
            await nursery.start(grants.ask, budget, f"g{n}", f"c{n}", Priority.URGENT)
    # 5 a window: the two outside calls (counted until 1.25 s) leave 3; the fourth waits
    # for the first of those 3 to come back (without them all 4 would go at once).
    assert [t for _, t in grants.log] == [0.0, 0.0, 0.0, 1.0]


async def test_a_channel_is_short_while_a_send_there_would_wait(autojump_clock: object) -> None:
    """``channel_short``: what a renderer asks before joining finished tool cards."""
    async with trio.open_nursery() as nursery:
        budget = await start_budget(nursery, five_per_five_s("send"))
        grants = Grants()
        assert not budget.channel_short("a", "send")
        for n in range(5):
            await nursery.start(grants.ask, budget, f"a{n}", "a", Priority.POST, "send")
        await trio.sleep(0.1)
        assert budget.channel_short("a", "send")  # its five sends of the window are spent
        assert not budget.channel_short("b", "send")  # another channel's are not
        assert not budget.channel_short("a", "edit")  # nor another kind in it
        await nursery.start(grants.ask, budget, "a5", "a", Priority.POST, "send")
        await trio.sleep(5.0)
        assert grants.at("a5") == pytest.approx(5.0)
        await trio.sleep(5.1)
        assert not budget.channel_short("a", "send")  # a window later: tokens again
        budget.hold(2.0, channel_id="a", kind="send")  # a 429's Retry-After
        assert budget.channel_short("a", "send")
        nursery.cancel_scope.cancel()
