"""``Inbox`` (runtime/live/inbox.py) behaves as the trio channel pair it replaces, the way
the actor's mailbox and the reactor's lanes use it: order, hand-over to a parked receiver,
close (queued items first, then the end), cancellation, one receiver, a long backlog."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from threadspindle.runtime.live.inbox import Inbox


async def test_order_handover_close_and_cancellation() -> None:
    inbox: Inbox[int] = Inbox()
    with pytest.raises(trio.WouldBlock):
        inbox.receive_nowait()
    for i in range(3):
        inbox.send_nowait(i)
    assert len(inbox) == 3
    assert [await inbox.receive() for _ in range(2)] == [0, 1]
    assert inbox.receive_nowait() == 2 and len(inbox) == 0

    got: list[int] = []

    async def receiver() -> None:
        async for item in inbox:
            got.append(item)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(receiver)
        await trio.testing.wait_all_tasks_blocked()
        # Parked: a second receiver is refused, an item is handed over directly.
        with pytest.raises(trio.BusyResourceError):
            await inbox.receive()
        inbox.send_nowait(7)
        assert len(inbox) == 0  # handed over, not queued
        await trio.testing.wait_all_tasks_blocked()
        assert got == [7]
        inbox.send_nowait(8)
        inbox.close()  # what was queued is still received, then the loop ends
    assert got == [7, 8]
    with pytest.raises(trio.ClosedResourceError):
        inbox.send_nowait(9)
    with pytest.raises(trio.EndOfChannel):
        inbox.receive_nowait()

    # A cancelled receive leaves no receiver behind: the next one is welcome.
    other: Inbox[str] = Inbox()
    with trio.move_on_after(0.01):
        await other.receive()
    other.send_nowait("after")
    assert await other.receive() == "after"

    # An item waiting is received at a checkpoint: a cancelled receive does not take it.
    with trio.CancelScope() as scope:
        scope.cancel()
        other.send_nowait("kept")
        with pytest.raises(trio.Cancelled):
            await other.receive()
    assert other.receive_nowait() == "kept"


async def test_a_long_backlog_comes_out_in_order_and_the_list_shrinks() -> None:
    inbox: Inbox[int] = Inbox()
    for i in range(5_000):
        inbox.send_nowait(i)
    out = [inbox.receive_nowait() for _ in range(3_000)]
    assert len(inbox._items) < 5_000  # received items are dropped from the head
    for i in range(5_000, 6_000):
        inbox.send_nowait(i)
    out += [inbox.receive_nowait() for _ in range(len(inbox))]
    assert out == list(range(6_000))
    assert inbox._items == [] and inbox._head == 0  # drained: nothing held
