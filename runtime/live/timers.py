"""One timer task for every thread's ticker: sleeps that need no precision, woken together.

Each thread's ticker sleeps ``tick_interval_s`` between ``Tick``s while a run is active. With
``trio.sleep`` every such sleep costs a cancel scope and a ``Cancelled`` (~30 µs), and with
a thousand active threads the tickers woke the scheduler a thousand separate times a second.
``Timers.sleep_until`` instead parks the caller with one reschedule and rounds its deadline
up to ``resolution_s``, so the sleepers due in one window are woken together by the one
task ``run`` (a tick a few tens of milliseconds late changes nothing: the core's timeouts
are seconds). The timer task sleeps until the earliest deadline, never polls: a test on
trio's autojump clock sees the same deadlines as before.
"""

from __future__ import annotations

import heapq
import math

import trio

__all__ = ["Timers"]


class Timers:
    def __init__(self, resolution_s: float = 0.05) -> None:
        self.resolution_s = resolution_s
        self._due: list[tuple[float, int, trio.lowlevel.Task]] = []
        self._cancelled: set[int] = set()  # entries whose sleeper was cancelled meanwhile
        self._n = 0
        self._scope: trio.CancelScope | None = None  # the timer task's current sleep
        self.running = False

    async def sleep(self, seconds: float) -> None:
        await self.sleep_until(trio.current_time() + seconds)

    async def sleep_until(self, deadline: float) -> None:
        """Return at ``deadline`` or up to ``resolution_s`` later; cancellable like any
        sleep. Without the timer task running, this is ``trio.sleep_until``."""
        if not self.running:
            await trio.sleep_until(deadline)
            return
        res = self.resolution_s
        deadline = math.ceil(deadline / res) * res if res > 0 else deadline
        self._n += 1
        entry = self._n
        heapq.heappush(self._due, (deadline, entry, trio.lowlevel.current_task()))
        scope = self._scope
        if scope is not None and deadline < scope.deadline:
            scope.deadline = deadline

        def abort(_: object) -> trio.lowlevel.Abort:
            self._cancelled.add(entry)
            return trio.lowlevel.Abort.SUCCEEDED

        await trio.lowlevel.wait_task_rescheduled(abort)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Wake the sleepers as they come due, until cancelled."""
        due, cancelled = self._due, self._cancelled
        self.running = True
        task_status.started()
        try:
            while True:
                with trio.CancelScope(deadline=due[0][0] if due else math.inf) as scope:
                    self._scope = scope
                    await trio.sleep_forever()
                self._scope = None
                now = trio.current_time()
                while due and due[0][0] <= now:
                    _, entry, task = heapq.heappop(due)
                    if entry in cancelled:
                        cancelled.discard(entry)
                    else:
                        trio.lowlevel.reschedule(task)
        finally:
            self.running = False
            self._scope = None
            # Whoever still sleeps here is woken now (their own task ends or sleeps again
            # with trio.sleep): nobody is left parked for ever.
            while due:
                _, entry, task = heapq.heappop(due)
                if entry not in cancelled:
                    trio.lowlevel.reschedule(task)
            cancelled.clear()
