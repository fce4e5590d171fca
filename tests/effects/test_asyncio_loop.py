"""The batching trio-asyncio loop (effects/asyncio_loop.py): the upstream internals it
relies on are still there, and asyncio's semantics hold with callbacks run in batches."""

from __future__ import annotations

import asyncio
import hashlib
import inspect
from importlib.metadata import version

import trio
import trio_asyncio
from trio_asyncio._async import TrioEventLoop
from trio_asyncio._base import BaseTrioEventLoop
from trio_asyncio._handles import AsyncHandle
from trio_asyncio._loop import open_loop

from threadspindle.effects.asyncio_loop import BatchingTrioEventLoop, open_asyncio_loop

# sha256 of trio-asyncio 0.16.0's ``BaseTrioEventLoop._main_loop_one`` source, which
# ``BatchingTrioEventLoop._main_loop_one`` re-implements in batches: if upstream changes it,
# read the change and carry it over before updating this digest (and the version pin).
UPSTREAM_MAIN_LOOP_ONE = "cbe727d658663f0749012b72fedbce5efc7dfde7261f4358536c261e327d71a1"


def test_the_trio_asyncio_internals_it_relies_on_are_unchanged() -> None:
    assert version("trio-asyncio") == "0.16.0", (
        "trio-asyncio moved: check effects/asyncio_loop.py against its _base.py, then the pin"
    )
    source = inspect.getsource(BaseTrioEventLoop._main_loop_one)
    digest = hashlib.sha256(source.encode()).hexdigest()
    assert digest == UPSTREAM_MAIN_LOOP_ONE, (
        "trio-asyncio's _main_loop_one changed: carry the change into "
        f"effects/asyncio_loop.py, then record {digest}"
    )
    # every round looks the method up on the instance (so the switched class takes over)
    assert "await self._main_loop_one()" in inspect.getsource(BaseTrioEventLoop._main_loop)
    # open_loop builds a plain TrioEventLoop (the class open_asyncio_loop switches from)
    assert "TrioEventLoop(queue_len=queue_len)" in inspect.getsource(open_loop)
    init = inspect.getsource(BaseTrioEventLoop.__init__)
    assert "self._q_send, self._q_recv = trio.open_memory_channel(" in init
    assert "self._timers = []" in init
    assert "_started" in AsyncHandle.__slots__
    assert BatchingTrioEventLoop.__mro__[1] is TrioEventLoop


async def _rounds_to_run(opener: object, count: int) -> tuple[int, list[int]]:
    """Trio scheduling rounds a busy trio task sees while ``count`` callbacks queued at once
    run; and the order they ran in."""
    ran: list[int] = []
    async with opener() as loop:  # type: ignore[operator]
        rounds = 0
        done = trio.Event()

        async def busy() -> None:
            nonlocal rounds
            while not done.is_set():
                await trio.lowlevel.checkpoint()
                rounds += 1

        async with trio.open_nursery() as nursery:
            nursery.start_soon(busy)
            await trio.sleep(0.01)
            rounds = 0
            for n in range(count):
                loop.call_soon(ran.append, n)
            loop.call_soon(done.set)
            await done.wait()
    return rounds, ran


async def test_ready_callbacks_run_in_batches_in_order() -> None:
    rounds, ran = await _rounds_to_run(open_asyncio_loop, 300)
    assert ran == list(range(300))
    assert rounds <= 20, rounds  # 301 callbacks in batches of 64: ~5 rounds
    upstream_rounds, upstream_ran = await _rounds_to_run(trio_asyncio.open_loop, 300)
    assert upstream_ran == list(range(300))
    # what the batching is for: upstream runs one callback per round
    assert upstream_rounds >= 300 > 10 * rounds, (upstream_rounds, rounds)


async def test_asyncio_semantics_hold() -> None:
    order: list[str] = []
    async with open_asyncio_loop(batch=4) as loop:
        assert type(loop) is BatchingTrioEventLoop
        assert asyncio.get_event_loop() is loop

        def first() -> None:
            order.append("a")
            loop.call_soon(order.append, "later")  # after the ones already queued

        loop.call_soon(first)
        for name in "bcdef":  # more than one batch of 4
            loop.call_soon(order.append, name)
        # timers: earliest first, a cancelled one never runs, whatever the queue order
        loop.call_later(0.06, order.append, "t2")
        loop.call_later(0.03, order.append, "t1")
        loop.call_later(0.04, order.append, "never").cancel()
        await trio.sleep(0.15)
        assert order == ["a", "b", "c", "d", "e", "f", "later", "t1", "t2"]

        # coroutines both ways: an asyncio one from trio, a trio one from asyncio
        async def aio_side(x: int) -> int:
            await asyncio.sleep(0.01)
            return x + await trio_asyncio.trio_as_aio(trio_side)(x)

        async def trio_side(x: int) -> int:
            await trio.sleep(0.01)
            return x * 10

        assert await trio_asyncio.aio_as_trio(aio_side)(4) == 44
        gathered = await trio_asyncio.aio_as_trio(
            lambda: asyncio.gather(*(aio_side(n) for n in range(50)))
        )()
        assert gathered == [11 * n for n in range(50)]

        # an asyncio task cancelled from trio's side
        async def forever() -> None:
            await asyncio.sleep(3600)

        with trio.move_on_after(0.05) as scope:
            await trio_asyncio.aio_as_trio(forever)()
        assert scope.cancelled_caught

        # callbacks queued as the block exits still run before the loop closes
        late: list[int] = []
        for n in range(100):
            loop.call_soon(late.append, n)
    assert late == list(range(100))
    assert loop.is_closed()
