"""``open_asyncio_loop``: trio-asyncio's asyncio loop, running ready callbacks in batches.

Why: trio-asyncio (0.16, and every release since the queue-based loop) runs **one**
asyncio callback per trio scheduling round: ``BaseTrioEventLoop._main_loop_one`` awaits
its queue for each handle, and each ``await`` is a checkpoint that lets every ready trio
task run first. With 200 thread actors and renderers busy on the trio side, each of
discord.py's callbacks (a gateway frame, an HTTP response chunk, a future's wake-up) waited
a whole round, so a reply's round trip through discord.py took tens of seconds while the
fake Discord answered in milliseconds (the 200-thread ``chat_budget`` bench, issue 18).
Upstream has no knob for it (python-trio/trio-asyncio issue #44 discusses the per-callback
cost; nothing batches). asyncio's own loop runs every callback that is ready when an
iteration starts, then polls; this loop does the same, bounded:

- A round takes the callbacks queued **when it starts** (at most ``batch``), in order,
  then the timers that are due (at most ``batch``), earliest first, then checkpoints once.
  A callback scheduled by one of them (``call_soon`` from a callback) runs in the next
  round, as in asyncio; a stop request raised by a callback leaves the rest queued.
- An idle loop waits on its queue (or its next timer) exactly as upstream does.
- ``no_wait`` rounds (the loop's shutdown drain) are upstream's, unchanged.

It relies on trio-asyncio internals: ``_main_loop`` calling ``self._main_loop_one()`` for
every round, the ``_q_recv`` memory channel, the ``_timers`` heap of ``TimerHandle``, the
``_nursery`` and ``AsyncHandle._started``, and ``open_loop`` building a plain
``TrioEventLoop`` (whose class is switched to the batching one, as it starts). So the
version range is pinned in ``pyproject.toml``, and ``tests/effects/test_asyncio_loop.py``
fails loudly when any of these change (a new trio-asyncio release must be checked against
this module before the pin moves).
"""

from __future__ import annotations

import asyncio
import heapq
import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import trio
import trio_asyncio
from sniffio import thread_local as _sniffio_library
from trio_asyncio._async import TrioEventLoop
from trio_asyncio._handles import AsyncHandle

__all__ = ["DEFAULT_BATCH", "BatchingTrioEventLoop", "open_asyncio_loop"]

# Callbacks per round: enough that discord.py's burst of wake-ups (a response's chunks, its
# future, the awaiting task) finish in one round; few enough that a round stays short
# (a callback is typically 10-100 µs), so trio's tasks are not starved in turn.
DEFAULT_BATCH = 64


class BatchingTrioEventLoop(TrioEventLoop):  # type: ignore[misc]  # (trio_asyncio is untyped)
    """``TrioEventLoop`` whose rounds run up to ``batch`` ready callbacks (module docstring)."""

    batch: int = DEFAULT_BATCH

    async def _main_loop_one(self, no_wait: bool = False) -> None:
        if no_wait:
            await super()._main_loop_one(no_wait=True)
            return
        receive = self._q_recv
        queued = receive.statistics().current_buffer_used
        ran = 0
        if queued == 0 and not self._due(self.time()):
            # Nothing ready: wait for a callback or the next timer, as upstream does.
            timeout = self._timers[0]._when - self.time() if self._timers else math.inf
            first = None
            with trio.move_on_after(timeout):
                first = await receive.receive()
            if first is not None:
                # the callbacks queued behind it (as this round starts) run with it
                queued = receive.statistics().current_buffer_used
                await self._handle(first)
                ran += 1
        for _ in range(min(queued, self.batch - ran)):
            await self._handle(receive.receive_nowait())
            ran += 1
        now = self.time()
        timers = 0
        while timers < self.batch and self._due(now):
            await self._run(heapq.heappop(self._timers))
            timers += 1
        if ran or timers:
            # Let trio's tasks run before the next round (the loop runs shielded).
            await trio.lowlevel.cancel_shielded_checkpoint()

    def _due(self, now: float) -> bool:
        timers = self._timers
        return bool(timers) and timers[0]._when <= now

    async def _handle(self, obj: Any) -> None:
        if isinstance(obj, asyncio.TimerHandle):
            heapq.heappush(self._timers, obj)  # it runs when due
        else:
            await self._run(obj)

    async def _run(self, obj: Any) -> None:
        # As upstream's ``_main_loop_one``: a Trio function starts as a task in the loop's
        # nursery; a plain handle runs here, with sniffio saying "asyncio".
        if isinstance(obj, AsyncHandle):
            obj._context.run(self._nursery.start_soon, obj._run, name=obj._callback)
            await obj._started.wait()
        elif not obj._cancelled:
            previous, _sniffio_library.name = _sniffio_library.name, "asyncio"
            try:
                obj._run()
            finally:
                _sniffio_library.name = previous


@asynccontextmanager
async def open_asyncio_loop(batch: int = DEFAULT_BATCH) -> AsyncIterator[TrioEventLoop]:
    """``trio_asyncio.open_loop()`` with the batching loop (use it wherever that was)."""
    async with trio_asyncio.open_loop() as loop:
        if type(loop) is not TrioEventLoop:  # pragma: no cover - checked by the tests
            raise RuntimeError(f"trio_asyncio.open_loop() made a {type(loop)!r}")
        # Its main-loop task looks ``_main_loop_one`` up on each round, so the batching
        # rounds start with the next one.
        loop.__class__ = BatchingTrioEventLoop
        loop.batch = batch
        yield loop
