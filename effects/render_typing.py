"""The typing indicator of one channel: shown while the agent works, kept alive, turned off.

Platforms expire the indicator after a few seconds (Discord: ~10 s) and a posted message
ends it at once. ``TypingIndicator`` therefore, while on, shows it again every
``limits.typing_refresh_s`` and ``after_post_s`` after each post. Turning it off stops the
refreshes and the platform lets it expire; a platform whose indicator is a message of its
own (Slack's "working…" line) is given ``stop`` to take it away.

It owns no task: ``deadline`` tells the renderer's background task when the next refresh
falls due, and ``refresh_if_due`` makes it. A failed call is not raised (typing is
cosmetic; the next refresh tries again); the retrying platform counts it.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable

from threadspindle.effects.platform import ChatPlatform, PlatformError
from threadspindle.effects.render_outputs import RenderTally

__all__ = ["TypingIndicator"]


class TypingIndicator:
    """See the module docstring. ``clock`` must tell trio's time."""

    def __init__(
        self,
        platform: ChatPlatform,
        channel_id: str,
        tally: RenderTally,
        *,
        clock: Callable[[], float],
        after_post_s: float,
        stop: Callable[[str], Awaitable[None]] | None = None,
    ) -> None:
        self._platform = platform
        self._channel_id = channel_id
        self._tally = tally
        self._clock = clock
        self._after_post_s = after_post_s
        self._stop = stop
        self.on = False
        self._due = math.inf

    async def turn_on(self) -> None:
        """Show it now, unless it is on already (its refreshes keep it shown)."""
        if not self.on:
            self.on = True
            await self._show()

    async def turn_off(self) -> None:
        """Stop the refreshes; ``stop`` (when given) takes a shown indicator away."""
        was_on = self.on
        self.on = False
        self._due = math.inf
        if was_on and self._stop is not None:
            try:
                await self._stop(self._channel_id)
            except PlatformError:
                pass  # cosmetic: the platform keeps what it could not remove and tries again

    def deadline(self) -> float:
        """When the next refresh falls due (``inf`` while off)."""
        return self._due if self.on else math.inf

    async def refresh_if_due(self, now: float) -> None:
        if self.on and self._due <= now:
            await self._show()

    def after_post(self) -> None:
        """A message was posted: posting ends the indicator on Discord, show it again soon."""
        if self.on:
            self._due = min(self._due, self._clock() + self._after_post_s)

    async def _show(self) -> None:
        self._due = self._clock() + self._platform.limits.typing_refresh_s
        try:
            await self._platform.typing(self._channel_id)
            self._tally.typing_calls += 1
        except PlatformError:
            pass  # cosmetic: counted by the retrying platform, tried again at the next due
