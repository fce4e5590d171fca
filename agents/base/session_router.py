"""Fan-out of one connection shared by many threads (``opencode serve``'s event bus) to the
thread that owns each session.

A thread's adapter ``subscribe``s to its session id and reads its own bounded channel; the
connection's reader ``route``s each message by session id without ever waiting, so one slow
thread cannot hold up the others: when a subscriber's buffer is full the message is dropped
for that subscriber and counted (the opencode adapter then resynchronises from the server's
state, see ``opencode/adapter.py``). Messages of no session or of a session nobody listens to
are counted as unrouted. ``close`` ends every subscription (the connection is gone): each
subscriber's channel closes exactly once.

The runtime has no demultiplexer of its own: every thread has its own adapter, and an adapter
of a shared server routes its server's messages here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

import trio

__all__ = ["RouterStatistics", "SessionRouter", "Subscription"]

T = TypeVar("T")
DEFAULT_BUFFER = 4096  # messages a slow thread may lag behind before some are dropped


@dataclass(frozen=True, slots=True)
class RouterStatistics:
    routed: int = 0  # deliveries (a message to two subscribers of a session counts twice)
    unrouted: int = 0  # messages of no session, or of a session nobody listens to
    dropped: int = 0  # a subscriber's buffer was full
    subscribers: int = 0


@dataclass(frozen=True, slots=True)
class Subscription(Generic[T]):
    """One subscriber's end: read ``receive``; ``unsubscribe`` with the whole object."""

    session_id: str
    send: trio.MemorySendChannel[T]
    receive: trio.MemoryReceiveChannel[T]


class SessionRouter(Generic[T]):
    def __init__(self, buffer: int = DEFAULT_BUFFER) -> None:
        self._buffer = buffer
        # session id -> its subscribers' channels (normally one thread per session; two
        # threads resuming the same session both hear it)
        self._subscribers: dict[str, list[trio.MemorySendChannel[T]]] = {}
        self._closed = False
        self._routed = 0
        self._unrouted = 0
        self._dropped = 0

    def subscribe(self, session_id: str) -> Subscription[T]:
        """Messages of ``session_id`` from now on; the channel is closed at once when the
        router already is."""
        send, receive = trio.open_memory_channel[T](self._buffer)
        if self._closed:
            send.close()
        else:
            self._subscribers.setdefault(session_id, []).append(send)
        return Subscription(session_id, send, receive)

    def unsubscribe(self, subscription: Subscription[T]) -> None:
        channels = self._subscribers.get(subscription.session_id, [])
        if subscription.send in channels:
            channels.remove(subscription.send)
        if not channels:
            self._subscribers.pop(subscription.session_id, None)
        subscription.send.close()

    def route(self, session_id: str | None, message: T) -> bool:
        """Hand ``message`` to every subscriber of ``session_id`` without waiting; False when
        nobody listens."""
        channels = self._subscribers.get(session_id, []) if session_id is not None else []
        if not channels:
            self._unrouted += 1
            return False
        for send in list(channels):
            try:
                send.send_nowait(message)
                self._routed += 1
            except trio.WouldBlock:
                self._dropped += 1
            except (trio.ClosedResourceError, trio.BrokenResourceError):
                channels.remove(send)
        return True

    def broadcast(self, make: Callable[[str], T]) -> None:
        """``make(session_id)`` to every subscriber (best effort: a full buffer skips it)."""
        for session_id, channels in self._subscribers.items():
            for send in list(channels):
                try:
                    send.send_nowait(make(session_id))
                except (trio.WouldBlock, trio.ClosedResourceError, trio.BrokenResourceError):
                    pass

    def close(self) -> None:
        """End every subscription; later ones are closed from the start."""
        self._closed = True
        for channels in self._subscribers.values():
            for send in channels:
                send.close()
        self._subscribers.clear()

    def statistics(self) -> RouterStatistics:
        return RouterStatistics(
            routed=self._routed,
            unrouted=self._unrouted,
            dropped=self._dropped,
            subscribers=sum(len(c) for c in self._subscribers.values()),
        )
