"""runtime/live/rounds.py: a callback runs once the task that asked for it has yielded (the
round is over), never inside that task's step, and never waits on I/O or time; a failing
callback does not stop the others; without the task running, nothing is taken."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from threadspindle.runtime.live.rounds import RoundEnd


async def test_callbacks_run_after_the_round_in_order(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    rounds = RoundEnd()
    assert not rounds.call_soon(lambda: None)  # not running: the caller acts at once
    seen: list[str] = []

    def boom() -> None:
        raise RuntimeError("boom")

    async with trio.open_nursery() as nursery:
        await nursery.start(rounds.run)
        started = trio.current_time()
        assert rounds.call_soon(lambda: seen.append("a"))
        assert rounds.call_soon(boom)
        assert rounds.call_soon(lambda: seen.append("b"))
        assert seen == []  # the asking task's step goes on: nothing has run yet
        await trio.lowlevel.checkpoint()  # the round ends once this task yields
        await trio.lowlevel.checkpoint()
        assert seen == ["a", "b"]
        assert trio.current_time() == started  # no time passed: nothing waited on a timer
        assert rounds.rounds == 1
        # Another round, from another task.
        nursery.start_soon(lambda: _ask(rounds, seen))
        await trio.testing.wait_all_tasks_blocked()
        assert seen == ["a", "b", "c"]
        # A callback asked for just before the task is cancelled still runs.
        rounds.call_soon(lambda: seen.append("d"))
        nursery.cancel_scope.cancel()
    assert seen == ["a", "b", "c", "d"]
    assert not rounds.running
    assert any("round-end callback raised" in r.message for r in caplog.records)


async def _ask(rounds: RoundEnd, seen: list[str]) -> None:
    rounds.call_soon(lambda: seen.append("c"))


async def test_the_hook_runs_after_each_step_of_callbacks(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """``after_calls`` (the runtime's log flush) runs in the same step, once the step's
    callbacks have run, and only in steps that ran some; one that raises is logged."""
    seen: list[str] = []

    def after() -> None:
        seen.append("flush")
        if len(seen) > 3:
            raise RuntimeError("flush failed")

    rounds = RoundEnd(after_calls=after)
    async with trio.open_nursery() as nursery:
        await nursery.start(rounds.run)
        await trio.testing.wait_all_tasks_blocked()
        assert seen == []  # no callbacks: no hook
        rounds.call_soon(lambda: seen.append("a"))
        rounds.call_soon(lambda: seen.append("b"))
        await trio.testing.wait_all_tasks_blocked()
        assert seen == ["a", "b", "flush"]
        rounds.call_soon(lambda: seen.append("c"))
        await trio.testing.wait_all_tasks_blocked()
        rounds.call_soon(lambda: seen.append("d"))
        await trio.testing.wait_all_tasks_blocked()
        assert seen == ["a", "b", "flush", "c", "flush", "d", "flush"]
        assert rounds.running  # the raising hook did not end it
        nursery.cancel_scope.cancel()
    assert any("round-end hook raised" in r.message for r in caplog.records)
