"""The sliding window the fake chat servers count a rate limit with (``fake_telegram.limits``,
``fake_slack.limits``): the times of the requests a limit let through, oldest first."""

from __future__ import annotations

from collections import deque

__all__ = ["free_at"]


def free_at(times: deque[float], limit: int, window: float, now: float) -> float:
    """When one more request fits in the window of ``limit`` per ``window`` seconds (``now``:
    at once). Drops the times that have left the window."""
    while times and times[0] <= now - window:
        times.popleft()
    if len(times) < limit:
        return now
    return times[len(times) - limit] + window
