"""A flood of connections that never send a request, as any local process (an agent) can
open against Spindle's HTTP servers: how many of them the server kept open, to check its
cap (``effects/connection_cap.py``)."""

from __future__ import annotations

import trio

__all__ = ["Flood", "open_flood", "until_accepted"]


class Flood:
    """The connections a flood opened; ``kept`` are those the server did not close."""

    def __init__(self, kept: list[trio.SocketStream], closed: int) -> None:
        self.kept = kept
        self.closed = closed

    async def aclose(self) -> None:
        for stream in self.kept:
            await stream.aclose()
        self.kept = []


async def open_flood(host: str, port: int, count: int, *, settle_s: float = 1.5) -> Flood:
    """Open ``count`` connections at once and send nothing; after ``settle_s`` (well below
    hypercorn's 5 s keep-alive time, after which it drops an idle one anyway), those still
    open and how many the server closed."""
    streams = [await trio.open_tcp_stream(host, port) for _ in range(count)]
    closed: set[int] = set()

    async def watch(i: int, stream: trio.SocketStream) -> None:
        try:
            if await stream.receive_some() == b"":
                closed.add(i)
        except trio.BrokenResourceError:
            closed.add(i)

    with trio.move_on_after(settle_s):
        async with trio.open_nursery() as nursery:
            for i, stream in enumerate(streams):
                nursery.start_soon(watch, i, stream)
    kept = [s for i, s in enumerate(streams) if i not in closed]
    for i in closed:
        await streams[i].aclose()
    return Flood(kept, len(closed))


async def until_accepted(host: str, port: int, timeout: float = 10.0) -> None:
    """Return once the server keeps a new connection open again: it has let go of a
    flood's (hypercorn closes one that never sent a request when its keep-alive time,
    5 s, ends, even if its client closed it before). ``trio.TooSlowError`` after
    ``timeout``."""
    with trio.fail_after(timeout):
        while not (probe := await open_flood(host, port, 1, settle_s=0.2)).kept:
            await trio.sleep(0.05)
        await probe.aclose()
