"""``RetryingPlatform``: the one door a renderer's platform calls go through, with the retry
policy for rate limits (429) and server errors (5xx, disconnects).

A ``ChatPlatform`` reports trouble as ``PlatformError`` (``effects.platform``):
``retry_after`` for a 429, ``retryable`` for a 5xx or a dropped connection, neither for a
permanent refusal. This wrapper is a ``ChatPlatform`` itself and keeps one policy for all
of them:

- **429**: wait exactly its ``retry_after`` (a negative one as 0) and call again, at most
  ``max_rate_limit_waits`` times for one call. Past that, a 429 counts as a retryable error.
- **5xx / disconnect**: call again after ``backoff_s * 2**n`` (capped at
  ``max_backoff_s``), at most ``max_server_retries`` times for one call.
- **Given up**: a permanent refusal, or the retries spent: the last ``PlatformError`` is
  raised unchanged; the caller decides what it means (the renderer: ``RenderError``).
- **Typing is tried once.** The indicator is cosmetic and its keep-alive shows it again
  at its next refresh; waiting out a 429 for it would only hold up the calls that matter.
- Any other exception is a platform breaking its contract: it passes through, untouched
  and uncounted.

Repeating a call is safe: an edit or delete says the same thing twice, a send carries the
caller's ``nonce`` (the platform drops a second send with the same one), and a reply
answers its command once. The waits are ``trio.sleep``: the caller's cancel scope ends them.

Why a wrapper and not a loop inside the renderer: it is the one place every platform call
passes, so a later issue can turn it into a per-connection request budget with priorities
(one instance shared by the renderers of a connection's channels, an edit of streamed text
yielding to a prompt) without touching the renderer.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import trio

from threadspindle.effects.platform import ChatPlatform, PlatformError, SelectMenu
from threadspindle.runtime.core.effect_types import Button
from threadspindle.runtime.core.frozen import Frozen

__all__ = ["RetryPolicy", "RetryStatistics", "RetryingPlatform"]

T = TypeVar("T")


class RetryPolicy(Frozen):
    max_rate_limit_waits: int = 8  # 429s waited out for one call
    max_server_retries: int = 5  # 5xx/disconnects retried for one call
    backoff_s: float = 0.5  # the first wait after a 5xx; doubles each time
    max_backoff_s: float = 8.0


class RetryStatistics(Frozen):
    attempts: int = 0  # calls made on the wrapped platform, repeats included
    retries: int = 0  # attempts repeated after a 429 or a retryable error
    rate_limited: int = 0  # of which after a 429
    gave_up: int = 0  # calls that ended in a PlatformError (typing included)


class RetryingPlatform:
    """A ``ChatPlatform`` that calls ``platform`` with the retry policy; see the module
    docstring. ``platform`` is looked up at each call, so it may be replaced."""

    def __init__(self, platform: ChatPlatform, policy: RetryPolicy | None = None) -> None:
        self.platform = platform
        self.limits = platform.limits
        self.policy = policy or RetryPolicy()
        self._attempts = self._retries = self._rate_limited = self._gave_up = 0

    @property
    def streams_append_only(self) -> bool:
        return self.platform.streams_append_only

    def statistics(self) -> RetryStatistics:
        return RetryStatistics(
            attempts=self._attempts,
            retries=self._retries,
            rate_limited=self._rate_limited,
            gave_up=self._gave_up,
        )

    # -- ChatPlatform ------------------------------------------------------------------------

    async def send(
        self,
        channel_id: str,
        text: str,
        *,
        buttons: tuple[Button, ...] = (),
        menu: SelectMenu | None = None,
        nonce: str | None = None,
    ) -> str:
        return await self._retrying(
            lambda: self.platform.send(channel_id, text, buttons=buttons, menu=menu, nonce=nonce)
        )

    async def edit(
        self,
        channel_id: str,
        message_id: str,
        text: str,
        *,
        buttons: tuple[Button, ...] | None = None,
    ) -> None:
        await self._retrying(
            lambda: self.platform.edit(channel_id, message_id, text, buttons=buttons)
        )

    async def delete(self, channel_id: str, message_id: str) -> None:
        await self._retrying(lambda: self.platform.delete(channel_id, message_id))

    async def rename_thread(self, channel_id: str, title: str) -> None:
        await self._retrying(lambda: self.platform.rename_thread(channel_id, title))

    async def typing(self, channel_id: str) -> None:
        """One attempt (see the module docstring); a failure is raised and counted."""
        self._attempts += 1
        try:
            await self.platform.typing(channel_id)
        except PlatformError:
            self._gave_up += 1
            raise

    async def reply(
        self,
        channel_id: str,
        action_id: str,
        text: str,
        *,
        ephemeral: bool = False,
        buttons: tuple[Button, ...] = (),
    ) -> str:
        return await self._retrying(
            lambda: self.platform.reply(
                channel_id, action_id, text, ephemeral=ephemeral, buttons=buttons
            )
        )

    # -- the policy --------------------------------------------------------------------------

    async def _retrying(self, call: Callable[[], Awaitable[T]]) -> T:
        policy = self.policy
        waits = retries = 0
        while True:
            self._attempts += 1
            try:
                return await call()
            except PlatformError as error:
                if error.retry_after is not None and waits < policy.max_rate_limit_waits:
                    waits += 1
                    self._rate_limited += 1
                    self._retries += 1
                    await trio.sleep(max(error.retry_after, 0.0))
                    continue
                if error.retryable and retries < policy.max_server_retries:
                    self._retries += 1
                    await trio.sleep(min(policy.backoff_s * 2**retries, policy.max_backoff_s))
                    retries += 1
                    continue
                self._gave_up += 1
                raise
