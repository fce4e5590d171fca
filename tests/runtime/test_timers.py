"""runtime/live/timers.py: one timer task wakes every ticker's sleep, at its deadline or up
to one resolution later, never earlier; a cancelled sleeper is skipped; without the timer
task a sleep is a plain ``trio.sleep``."""

from __future__ import annotations

import trio
import trio.testing

from threadspindle.runtime.live.timers import Timers


async def test_sleepers_wake_at_their_deadline_rounded_up(
    autojump_clock: trio.testing.MockClock,
) -> None:
    timers = Timers(resolution_s=0.05)
    woke: dict[str, float] = {}

    async def sleeper(name: str, seconds: float) -> None:
        started = trio.current_time()
        await timers.sleep(seconds)
        woke[name] = trio.current_time() - started

    async with trio.open_nursery() as nursery:
        await nursery.start(timers.run)
        assert timers.running
        for name, seconds in [("a", 1.0), ("b", 0.33), ("c", 2.5), ("d", 0.01)]:
            nursery.start_soon(sleeper, name, seconds)
        await trio.sleep(3)
        nursery.cancel_scope.cancel()
    wanted = {"a": 1.0, "b": 0.33, "c": 2.5, "d": 0.01}
    assert set(woke) == set(wanted)
    for name, seconds in wanted.items():
        assert seconds <= woke[name] + 1e-9 < seconds + 0.05 + 1e-6, (name, woke[name])
    assert not timers.running


async def test_a_cancelled_sleeper_is_skipped_and_the_others_still_wake(
    autojump_clock: trio.testing.MockClock,
) -> None:
    timers = Timers(resolution_s=0.05)
    woke: list[str] = []

    async def sleeper(name: str, seconds: float) -> None:
        await timers.sleep(seconds)
        woke.append(name)

    async with trio.open_nursery() as nursery:
        await nursery.start(timers.run)
        with trio.move_on_after(0.5) as scope:
            await timers.sleep(1.0)  # cancelled before its deadline
        assert scope.cancelled_caught
        nursery.start_soon(sleeper, "later", 1.0)
        await trio.sleep(2)
        nursery.cancel_scope.cancel()
    assert woke == ["later"]


async def test_without_the_timer_task_it_is_a_plain_sleep(
    autojump_clock: trio.testing.MockClock,
) -> None:
    timers = Timers(resolution_s=10.0)
    started = trio.current_time()
    await timers.sleep(0.3)
    assert trio.current_time() - started == 0.3  # not rounded: trio.sleep
