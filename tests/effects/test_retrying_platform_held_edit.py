"""``RetryingPlatform.hold_edit``: an ``EDIT`` token the renderer's background task was
granted while the renderer was busy (settling a seal) goes to the edit being made there,
one already waiting for a token included, instead of that edit waiting a whole round of
every thread for its own and the background task's token being refunded unused. In trio's
mock time over the recording platform."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio

from threadspindle.effects.request_budget import BudgetLimits, Priority, RequestBudget
from threadspindle.effects.retrying_platform import RetryingPlatform
from threadspindle.testkit.recording_platform import RecordingPlatform

LIMITS = BudgetLimits(requests=3, window_s=1.0, margin_s=0.0, reserve=0)


@asynccontextmanager
async def budgeted() -> AsyncIterator[tuple[RecordingPlatform, RequestBudget, RetryingPlatform]]:
    """A retrying platform over the recording one, drawing from a running budget."""
    platform = RecordingPlatform()
    budget = RequestBudget(LIMITS)
    async with trio.open_nursery() as nursery:
        await nursery.start(budget.run)
        yield platform, budget, RetryingPlatform(platform, budget=budget)
        nursery.cancel_scope.cancel()


async def test_a_waiting_edit_takes_the_token_the_background_task_holds(
    autojump_clock: object,
) -> None:
    async with budgeted() as (platform, budget, retrying), trio.open_nursery() as nursery:
        message_id = await retrying.send("t", "first")  # token 1
        await budget.acquire(Priority.URGENT, "other", "reply")  # token 2
        budget.release("other", "reply")
        await retrying.acquire("t", "edit", Priority.EDIT)  # token 3: the background task's
        done = trio.Event()

        async def seal() -> None:
            await retrying.edit("t", message_id, "final", final=True)
            done.set()

        nursery.start_soon(seal)
        await trio.sleep(0.1)
        assert not done.is_set()  # the window is spent: it waits
        assert budget.statistics().waiting_by_priority == (0, 0, 1)
        retrying.hold_edit()  # the background task's token, held while it waits
        await done.wait()
        assert trio.current_time() < 1.0  # at once, not when the window turns
        assert retrying.take_held_edit() is False  # the seal took it: nothing to refund
        stats = budget.statistics()
        assert stats.granted == 3 and stats.waiting == 0 and stats.refunded == 0
        assert platform.texts("t") == ["final"]


async def test_an_edit_made_while_a_token_is_held_uses_it_without_asking(
    autojump_clock: object,
) -> None:
    async with budgeted() as (platform, budget, retrying):
        message_id = await retrying.send("t", "first")
        await retrying.acquire("t", "edit", Priority.EDIT)
        retrying.hold_edit()
        await retrying.edit("t", message_id, "second", final=True)
        assert budget.statistics().granted == 2  # the held token, no new one
        assert retrying.take_held_edit() is False
        # Nothing held: an edit asks the budget again.
        await retrying.edit("t", message_id, "third")
        assert budget.statistics().granted == 3
        assert platform.texts("t") == ["third"]
