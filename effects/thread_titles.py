"""Thread renames (``RenameThread``: the agent's session title) paced by the platform's
limit: at most ``limits.renames_per_window`` renames per ``limits.rename_window_s`` per
thread (Discord: 2 per 10 minutes). A title that comes while the window is full waits; a
newer one replaces it (coalesced to the latest), and it goes out when the window allows
(the stream renderer's background task asks ``deadline`` and calls ``flush_due``). A title
still waiting when the renderer closes is dropped: the thread keeps its last name.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable

from threadspindle.effects.platform import ChatPlatform

__all__ = ["TitlePacer"]


class TitlePacer:
    def __init__(
        self, platform: ChatPlatform, channel_id: str, *, clock: Callable[[], float]
    ) -> None:
        self._platform = platform
        self._channel_id = channel_id
        self._clock = clock
        self._limit = max(1, platform.limits.renames_per_window)
        self._window_s = platform.limits.rename_window_s
        self._recent: deque[float] = deque()  # when the last renames went (in the window)
        self._shown: str | None = None  # the title the thread has now (by our renames)
        self.pending: str | None = None  # the latest title waiting for the window
        self.renames = 0
        self.coalesced = 0  # titles replaced by a newer one before they could go out

    def _forget_old(self, now: float) -> None:
        while self._recent and now - self._recent[0] >= self._window_s:
            self._recent.popleft()

    def deadline(self) -> float:
        """When the waiting title may go out (``inf``: nothing waits)."""
        if self.pending is None:
            return math.inf
        if len(self._recent) < self._limit:
            return self._clock()
        return self._recent[0] + self._window_s

    async def request(self, title: str) -> None:
        """Rename now if the window allows, else keep ``title`` as the one to send."""
        if self.pending is not None and self.pending != title:
            self.coalesced += 1
        self.pending = title
        await self.flush_due(self._clock())

    async def flush_due(self, now: float) -> None:
        if self.pending is None:
            return
        if self.pending == self._shown:
            self.pending = None
            return
        self._forget_old(now)
        if len(self._recent) >= self._limit:
            return
        title = self.pending
        await self._platform.rename_thread(self._channel_id, title)
        self.pending = None
        self._shown = title
        self._recent.append(now)
        self.renames += 1
