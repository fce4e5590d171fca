"""``TokenWindow``: one window of a request budget (``effects.request_budget``), a sliding
log of the tokens it holds: the requests in flight and the times the recent ones count
from. A window of the server's length never holds more than ``limit`` of them, whatever
its phase (the budget's module docstring says why not a refilling bucket)."""

from __future__ import annotations

import math
from bisect import insort
from collections import deque

__all__ = ["TokenWindow"]


class TokenWindow:
    """At most ``limit`` tokens held at once, a token being held from its grant until
    ``span`` seconds after its request left (or completed, unstamped): the requests in
    flight and the times of the recent ones."""

    __slots__ = ("flying", "limit", "span", "times")

    def __init__(self, limit: int, span: float) -> None:
        self.limit = limit
        self.span = span
        self.flying = 0
        self.times: deque[float] = deque()

    def free_at(self, now: float, spare: int = 0) -> float:
        """When a grant leaves ``spare`` tokens unspent (``now``: at once; ``inf``: not
        before a request in flight completes)."""
        times = self.times
        while times and times[0] <= now - self.span:
            times.popleft()
        over = self.flying + len(times) + spare - self.limit
        if over < 0:
            return now
        if over >= len(times):
            return math.inf  # only a completion can make room
        return times[over] + self.span

    def take(self) -> None:
        self.flying += 1

    def complete(self, now: float) -> None:
        """A request in flight counts from ``now`` (may be later than the clock: an
        upper bound of when it arrived; ``times`` is kept in order)."""
        if self.flying > 0:
            self.flying -= 1
            insort(self.times, now)

    def restamp(self, then: float, now: float) -> None:
        """A request counted from ``then`` counts from ``now`` instead."""
        try:
            self.times.remove(then)
        except ValueError:
            return  # ``then`` fell out of the window: its token is back already
        insort(self.times, now)

    def count(self, now: float) -> None:
        """A request that took no token of its own (a client's retry of it): counted."""
        insort(self.times, now)

    def give_back(self) -> None:
        if self.flying > 0:
            self.flying -= 1
