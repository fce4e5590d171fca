"""``Inbox``: an unbounded queue with one receiving task, light enough for one per thread.

Each thread had three ``trio.open_memory_channel(math.inf)`` pairs (the actor's mailbox and
the reactor's two lanes). A pair is four objects, a deque, two ordered dicts and two sets,
and a task parked in ``receive`` adds its own bookkeeping: about 3.2 KB per channel of an
idle thread (tracemalloc over 10,000 idle actors, docs/performance.md "Memory"). An
``Inbox`` is one object of three slots and a list that is freed whenever it drains; its
receiving task parks with one reschedule.

It behaves as the channel pair did for the way the runtime uses one (one receiving task,
senders that never wait): ``send_nowait`` raises ``trio.ClosedResourceError`` once closed;
``receive`` is a checkpoint and hands items over in order; after ``close`` the items
still queued are received, then ``trio.EndOfChannel`` (and ``async for`` ends). The same
object is both ends, so ``send, recv = Inbox(), ...`` call sites keep their shape.
"""

from __future__ import annotations

from typing import Generic, TypeVar

import outcome
import trio

__all__ = ["Inbox"]

T = TypeVar("T")

_COMPACT_AT = 1024  # received items dropped from the list's head at once, at least


class Inbox(Generic[T]):
    __slots__ = ("_items", "_head", "_waiter", "_closed")

    def __init__(self) -> None:
        self._items: list[T] = []
        self._head = 0  # items before this index were received already
        self._waiter: trio.lowlevel.Task | None = None  # the receiver, parked in ``receive``
        self._closed = False

    def __len__(self) -> int:
        return len(self._items) - self._head

    @property
    def receiver_waiting(self) -> bool:
        """The receiving task is parked in ``receive`` (so it holds no item either)."""
        return self._waiter is not None

    def send_nowait(self, item: T) -> None:
        if self._closed:
            raise trio.ClosedResourceError("the inbox is closed")
        waiter = self._waiter
        if waiter is not None:
            # The receiver waits, so nothing is queued: hand the item over directly.
            self._waiter = None
            trio.lowlevel.reschedule(waiter, outcome.Value(item))
            return
        self._items.append(item)

    def receive_nowait(self) -> T:
        items, head = self._items, self._head
        if head < len(items):
            item = items[head]
            head += 1
            if head == len(items):
                self._items, self._head = [], 0  # drained: the list's memory goes back
            elif head >= _COMPACT_AT and head * 2 >= len(items):
                del items[:head]
                self._head = 0
            else:
                self._head = head
            return item
        if self._closed:
            raise trio.EndOfChannel
        raise trio.WouldBlock

    async def receive(self) -> T:
        await trio.lowlevel.checkpoint_if_cancelled()
        # (Tested, not tried: a receiver that parks raised and caught WouldBlock each time.)
        if self._head < len(self._items):
            item = self.receive_nowait()
            await trio.lowlevel.cancel_shielded_checkpoint()
            return item
        if self._closed:
            raise trio.EndOfChannel
        if self._waiter is not None:
            raise trio.BusyResourceError("another task is receiving from this inbox")
        self._waiter = trio.lowlevel.current_task()

        def abort(_: object) -> trio.lowlevel.Abort:
            self._waiter = None
            return trio.lowlevel.Abort.SUCCEEDED

        result: T = await trio.lowlevel.wait_task_rescheduled(abort)
        return result

    def close(self) -> None:
        """No more sends; the receiver gets what is queued, then ``trio.EndOfChannel``."""
        self._closed = True
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            trio.lowlevel.reschedule(waiter, outcome.Error(trio.EndOfChannel()))

    def __aiter__(self) -> Inbox[T]:
        return self

    async def __anext__(self) -> T:
        try:
            return await self.receive()
        except trio.EndOfChannel:
            raise StopAsyncIteration from None
