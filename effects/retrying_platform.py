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

**The budget.** With a ``RequestBudget`` (``effects.request_budget``: one per connection,
shared by the renderers of its channels) every attempt first waits for a token of its
call's priority (a reply ``URGENT``, a send ``POST`` or, with buttons, ``URGENT``, an edit
``EDIT`` unless told otherwise), a typing call is made only with a token to spare
(``typing_skipped``), and a 429 holds the budget (the channel's kind, or everything for a
global one) for its ``retry_after``; each attempt's token is released when it is
answered (``RequestBudget.sending``: counted from when its request left, if the platform's
HTTP client says so). ``prepaid``: the caller already holds the first
attempt's token (an edit waits for its token before it reads its text; ``refund`` gives
one back unused). Without a budget it calls at once, as before.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import trio

from threadspindle.effects.platform import ChatPlatform, PlatformError, SelectMenu
from threadspindle.effects.request_budget import CallKind, Priority, RequestBudget
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
    typing_skipped: int = 0  # typing calls not made: the budget had no token to spare


class RetryingPlatform:
    """A ``ChatPlatform`` that calls ``platform`` with the retry policy; see the module
    docstring. ``platform`` is looked up at each call, so it may be replaced."""

    def __init__(
        self,
        platform: ChatPlatform,
        policy: RetryPolicy | None = None,
        budget: RequestBudget | None = None,
    ) -> None:
        self.platform = platform
        self.limits = platform.limits
        self.policy = policy or RetryPolicy()
        self.budget = budget
        # Urgent effects of this channel waiting behind the one being applied (a command
        # reply queued in the thread's chat lane): until they are out, what would ask at
        # ``POST`` asks at ``URGENT`` (priority inheritance: ``StreamRenderer.expedite``).
        self.urgent = 0
        # An ``EDIT`` token the renderer's background task was granted and holds while it
        # waits for the renderer (``hold_edit``): an edit made meanwhile (a seal's final
        # text) takes it rather than waiting for a turn of its own, the background task's
        # edit having nothing left to show.
        self._held_edit = False
        self._edit_waiting: trio.CancelScope | None = None  # an edit waiting for a token
        self._attempts = self._retries = self._rate_limited = self._gave_up = 0
        self._typing_skipped = 0

    @property
    def streams_append_only(self) -> bool:
        return self.platform.streams_append_only

    def statistics(self) -> RetryStatistics:
        return RetryStatistics(
            attempts=self._attempts,
            retries=self._retries,
            rate_limited=self._rate_limited,
            gave_up=self._gave_up,
            typing_skipped=self._typing_skipped,
        )

    # -- the budget --------------------------------------------------------------------------

    async def acquire(
        self, channel_id: str, kind: CallKind, priority: Priority, *, final: bool = False
    ) -> None:
        """Wait for a token now, for a call made later with ``prepaid=True``."""
        if self.budget is not None:
            await self.budget.acquire(priority, channel_id, kind, final=final)

    def refund(self, channel_id: str, kind: CallKind, priority: Priority) -> None:
        """Give back a token taken with ``acquire`` and not used."""
        if self.budget is not None:
            self.budget.refund(channel_id, kind, priority)

    def hold_edit(self) -> None:
        """An ``EDIT`` token from ``acquire`` is held until ``take_held_edit``; the next
        edit made meanwhile uses it, one waiting for a token now included."""
        self._held_edit = True
        if self._edit_waiting is not None:
            self._edit_waiting.cancel()

    def take_held_edit(self) -> bool:
        """Whether the held ``EDIT`` token is still there (it is the caller's again)."""
        held, self._held_edit = self._held_edit, False
        return held

    # -- ChatPlatform ------------------------------------------------------------------------

    async def send(
        self,
        channel_id: str,
        text: str,
        *,
        buttons: tuple[Button, ...] = (),
        menu: SelectMenu | None = None,
        nonce: str | None = None,
        priority: Priority | None = None,
    ) -> str:
        if priority is None:
            priority = Priority.URGENT if buttons or menu is not None else Priority.POST
        return await self._retrying(
            lambda: self.platform.send(channel_id, text, buttons=buttons, menu=menu, nonce=nonce),
            channel_id,
            "send",
            priority,
        )

    async def edit(
        self,
        channel_id: str,
        message_id: str,
        text: str,
        *,
        buttons: tuple[Button, ...] | None = None,
        priority: Priority = Priority.EDIT,
        prepaid: bool = False,
        final: bool = False,
    ) -> None:
        """``final``: the edit brings a streamed message to its final text (asked as the
        budget's ``final`` ``EDIT``: in the channel's place in line)."""
        await self._retrying(
            lambda: self.platform.edit(channel_id, message_id, text, buttons=buttons),
            channel_id,
            "edit",
            priority,
            prepaid=prepaid,
            final=final,
        )

    async def delete(
        self, channel_id: str, message_id: str, *, priority: Priority = Priority.POST
    ) -> None:
        await self._retrying(
            lambda: self.platform.delete(channel_id, message_id), channel_id, "delete", priority
        )

    async def rename_thread(self, channel_id: str, title: str) -> None:
        # A rename is one more request of the connection: drawn like an edit of the channel
        # (its own pacing, 2 per 10 minutes on Discord, is effects/thread_titles.py's).
        await self._retrying(
            lambda: self.platform.rename_thread(channel_id, title),
            channel_id,
            "edit",
            Priority.POST,
        )

    async def typing(self, channel_id: str) -> None:
        """One attempt, if the budget has a token to spare (see the module docstring); a
        failure is raised and counted."""
        budget = self.budget
        if budget is not None and not budget.try_acquire(channel_id, "typing"):
            self._typing_skipped += 1
            return
        self._attempts += 1
        try:
            if budget is None:
                await self.platform.typing(channel_id)
            else:
                with budget.sending(channel_id, "typing"):
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
        priority: Priority = Priority.URGENT,
    ) -> str:
        return await self._retrying(
            lambda: self.platform.reply(
                channel_id, action_id, text, ephemeral=ephemeral, buttons=buttons
            ),
            channel_id,
            "reply",
            priority,
        )

    async def send_file(
        self,
        channel_id: str,
        filename: str,
        data: bytes,
        caption: str,
        *,
        priority: Priority = Priority.POST,
    ) -> str | None:
        return await self._retrying(
            lambda: self.platform.send_file(channel_id, filename, data, caption),
            channel_id,
            "send",
            priority,
        )

    # -- the policy --------------------------------------------------------------------------

    async def _retrying(
        self,
        call: Callable[[], Awaitable[T]],
        channel_id: str,
        kind: CallKind,
        priority: Priority,
        *,
        prepaid: bool = False,
        final: bool = False,
    ) -> T:
        policy = self.policy
        budget = self.budget
        waits = retries = 0
        if self.urgent > 0 and (priority == Priority.POST or final):
            priority = Priority.URGENT
        while True:
            if kind == "edit" and not prepaid and self._held_edit:
                self._held_edit, prepaid = False, True  # granted already, for this channel
            if budget is not None and not prepaid:
                if kind == "edit":
                    # A token the background task is granted meanwhile is taken instead.
                    with trio.CancelScope() as waiting:
                        self._edit_waiting = waiting
                        try:
                            await budget.acquire(priority, channel_id, kind, final=final)
                        finally:
                            self._edit_waiting = None
                    if waiting.cancelled_caught:
                        self._held_edit = False
                else:
                    await budget.acquire(priority, channel_id, kind, final=final)
            prepaid = False
            self._attempts += 1
            try:
                if budget is None:
                    return await call()
                # Answered or not, it went out: the token comes back a window after it
                # left (stamped by the platform's HTTP client) or, unstamped, after now.
                with budget.sending(channel_id, kind):
                    return await call()
            except PlatformError as error:
                if error.retry_after is not None and budget is not None:
                    # Every thread of the connection waits it out, not only this call.
                    scope = None if error.global_limit else channel_id
                    budget.hold(error.retry_after, channel_id=scope, kind=kind)
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
