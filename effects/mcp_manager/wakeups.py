"""The agent's own wake-up: the MCP tool ``schedule_wakeup`` ("check the CI again in 20
minutes") becomes a ``ScheduleAdded`` with ``wakeup`` set, posted to the runtime for the
calling thread. The core keeps it like any schedule (durable in the log); a message from a
person in that thread cancels it (the person is there now)."""

from __future__ import annotations

import itertools
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

from pydantic import BaseModel

from threadspindle.runtime.core.actions import Action, ScheduleAdded

__all__ = ["MAX_WAKEUP_MINUTES", "WakeupResult", "Wakeups", "WakeupsUnavailable"]

MAX_WAKEUP_MINUTES = 7 * 24 * 60  # a week: further out is a /schedule for a person to make
MAX_PROMPT_CHARS = 4000


class WakeupsUnavailable(Exception):
    """No runtime is attached (``spindle mcp`` alone): nothing could wake the agent."""


class WakeupResult(BaseModel):
    thread_id: str
    due_at: str  # ISO 8601, UTC
    note: str


Post = Callable[[Action], Awaitable[object]]


class Wakeups:
    """Where the tool sends wake-ups: the runtime's ``post``, attached once it runs."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._post: Post | None = None
        self._clock = clock
        self._ids = itertools.count(1)
        self._boot = f"{int(clock() * 1000):x}"

    def attach(self, post: Post | None) -> None:
        self._post = post

    async def request(self, thread_id: str, in_minutes: float, prompt: str) -> WakeupResult:
        if self._post is None:
            raise WakeupsUnavailable("wake-ups need Spindle's runtime (not `spindle mcp` alone)")
        now = self._clock()
        due_at = now + in_minutes * 60
        await self._post(
            ScheduleAdded(
                thread_id=thread_id,
                action_id=f"wake-{self._boot}-{next(self._ids)}",
                at=now,
                author_id="agent",
                author_name="wake-up",
                text=prompt[:MAX_PROMPT_CHARS],
                due_at=due_at,
                label=f"in {in_minutes:g} min",
                wakeup=True,
            )
        )
        return WakeupResult(
            thread_id=thread_id,
            due_at=datetime.fromtimestamp(due_at, UTC).isoformat(timespec="seconds"),
            note=(
                "The prompt will be sent to you in this thread then, unless someone writes "
                "in the thread before (that cancels it)."
            ),
        )
