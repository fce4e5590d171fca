"""One task that runs callbacks once the scheduler round they were asked in is over.

An agent's reader hands over every line it read in one go before it waits for the pipe
again (a read yields to the scheduler). Deltas of one such read are worth one action, not
one each (``runtime/live/listener.py``), but the listener cannot tell which delta is the
last of a read. ``RoundEnd.call_soon`` answers that without waiting for anything: the
callback runs in this task's next step, which trio schedules only after every task that
is running now, the reader included, has yielded. So a callback runs after the read that
asked for it, at the latest one scheduler round later, and never waits on I/O or a timer.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import trio

__all__ = ["RoundEnd"]

logger = logging.getLogger("spindle.rounds")


class RoundEnd:
    def __init__(self, after_calls: Callable[[], object] | None = None) -> None:
        # Called once the callbacks of a step have run: the runtime flushes the log there,
        # so what they committed is durable and on its way to the lanes in this round,
        # not after the flusher's turn in the next one (a round is long under load).
        self._after_calls = after_calls
        self._calls: list[Callable[[], object]] = []
        self._task: trio.lowlevel.Task | None = None
        self._woken = False  # rescheduled and not yet running, or running the callbacks
        self.running = False
        self.rounds = 0  # steps that ran callbacks

    def call_soon(self, fn: Callable[[], object]) -> bool:
        """Run ``fn()`` once the current scheduler round is over; False (and nothing is
        done) when the task is not running: the caller then does it at once."""
        if not self.running or self._task is None:
            return False
        self._calls.append(fn)
        if not self._woken:
            self._woken = True
            trio.lowlevel.reschedule(self._task)
        return True

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the callbacks as their rounds end, until cancelled."""
        self._task = trio.lowlevel.current_task()
        self.running = True
        task_status.started()
        try:
            while True:
                self._woken = False
                await trio.lowlevel.wait_task_rescheduled(lambda _: trio.lowlevel.Abort.SUCCEEDED)
                self._woken = True  # a call_soon made by a callback joins this pass
                self.rounds += 1
                self._run_calls()
                if self._after_calls is not None:
                    try:
                        self._after_calls()
                    except Exception:
                        logger.exception("the round-end hook raised")
        finally:
            self.running = False
            self._run_calls()  # nothing asked for is left undone
            self._task = None

    def _run_calls(self) -> None:
        while self._calls:
            calls, self._calls = self._calls, []
            for fn in calls:
                try:
                    fn()
                except Exception:  # one caller's failure must not end every caller's rounds
                    logger.exception("a round-end callback raised")
