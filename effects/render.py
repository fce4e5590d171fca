"""The stream renderer: a thread's chat effects -> calls on a ``ChatPlatform``.

One ``StreamRenderer`` per chat channel (thread), the one object the runtime talks to. The
reactor hands it the chat effects of ``runtime.core.effect_types`` in commit order; it
answers with the ``(key, message ids)`` of outputs it posted so the reactor can report
``OutputPosted``. This module is its lifetime (the background task, ``flush``/``aclose``),
its one lock (``apply``, ``flush`` and the background task take turns), its statistics and
where failures go; the work is done by its parts, one module each:

- ``effects.render_compose``: what each chat effect does to its output's messages
  (streamed text through a ``MessageChunker``, thinking preview, tool card, prompts,
  replies), the presentation in Discord markdown that the console shows as well.
- ``effects.render_outputs``: the bookkeeping. A key is posted once (or seeded from the
  log with ``known``), appends are idempotent by ``seq``, each posted id is reported once,
  the number of keys kept is bounded.
- ``effects.render_pacing``: when messages are sent and edited. An edit at most once per
  ``limits.min_edit_interval_s`` (deltas in between only change what it shows), a new
  stream, card or preview one interval after it opens or at once when complete, channel
  order = creation order. Calls not due yet are made by the background task
  (``run``/``async with``).
- ``effects.retrying_platform``: every platform call, with the 429 Retry-After wait and
  the bounded 5xx backoff; a send carries a nonce derived from its key, so a retried send
  whose answer was lost is not doubled. With a ``budget`` (``effects.request_budget``, one
  per connection) every call first waits for a token of its priority.
- **With a budget, paced edits are the background task's**, and it waits for each edit's
  token *before* it takes the lock: ``apply`` (a command's reply above all) never waits
  behind an intermediate edit of its own thread, and the edit, made once the token came,
  shows everything that streamed in meanwhile (one call, the latest text).
- **A reply queued behind its own thread's effects hurries them** (``expedite``, told by
  the reactor): their sends and settles ask at the reply's ``URGENT`` priority.
- ``effects.render_typing``: the typing indicator, kept alive while on.

A call that still fails raises ``RenderError`` from ``apply``, which the reactor turns
into ``EffectFailed``; one made by the background task goes to ``on_error`` (or the log),
never to a later, innocent effect.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from types import TracebackType
from typing import Any

import trio

from threadspindle.effects.chunking import (
    parse_component_action,
    permission_action,
    question_menu_id,
    render_tool_card,
)
from threadspindle.effects.platform import ChatPlatform
from threadspindle.effects.render_compose import OutputComposer
from threadspindle.effects.render_outputs import (
    MAX_KEPT_OUTPUTS,
    Output,
    OutputBook,
    Posted,
    RenderTally,
)
from threadspindle.effects.render_pacing import PacedDelivery, RenderError
from threadspindle.effects.render_typing import TypingIndicator
from threadspindle.effects.request_budget import Priority, RequestBudget
from threadspindle.effects.retrying_platform import RetryingPlatform, RetryPolicy
from threadspindle.effects.thread_titles import TitlePacer
from threadspindle.runtime.core.effect_types import (
    AppendOutput,
    DismissPrompt,
    EditOutput,
    PostFile,
    PostOutput,
    RenameThread,
    ReplyToCommand,
    SealOutput,
    ShowPermissionPrompt,
    ShowQuestion,
    Typing,
)
from threadspindle.runtime.core.frozen import Frozen

__all__ = [
    "CHAT_EFFECTS",
    "MAX_KEPT_OUTPUTS",
    "Posted",
    "RenderError",
    "RendererStatistics",
    "StreamRenderer",
    "parse_component_action",
    "permission_action",
    "question_menu_id",
    "render_tool_card",
]

CHAT_EFFECTS = (
    PostOutput,
    PostFile,
    AppendOutput,
    EditOutput,
    SealOutput,
    Typing,
    ShowPermissionPrompt,
    ShowQuestion,
    DismissPrompt,
    ReplyToCommand,
    RenameThread,
)

logger = logging.getLogger("spindle.render")


class RendererStatistics(Frozen):
    sends: int = 0
    edits: int = 0
    deletes: int = 0
    typing_calls: int = 0
    replies: int = 0
    retries: int = 0  # platform calls repeated after a 429 or a retryable error
    rate_limited: int = 0  # of which 429s
    failures: int = 0  # calls given up on (typing failures included)
    typing_skipped: int = 0  # typing calls the shared budget had no token to spare for
    ignored_appends: int = 0  # duplicate or stale ``seq``, or an unknown key
    duplicate_posts: int = 0  # a key already posted
    blank_skipped: int = 0  # whitespace-only messages never sent
    outputs: int = 0  # keys known
    dirty_messages: int = 0  # messages waiting for their paced send or edit
    renames: int = 0  # thread renames made (the agent's title)
    titles_coalesced: int = 0  # titles replaced by a newer one while the window was full


class StreamRenderer:
    """Applies chat effects to one channel of a platform; see the module docstring.

    Run its background task with ``async with renderer:`` or ``nursery.start(renderer.run)``
    (without it, edits that were not due yet wait for the next ``apply`` or ``flush``), and
    ``await aclose()`` before dropping it so the last paced edits are made. ``clock`` must
    tell trio's time (it is compared with trio deadlines); it is a parameter for tests."""

    def __init__(
        self,
        platform: ChatPlatform,
        channel_id: str,
        *,
        clock: Callable[[], float] = trio.current_time,
        on_posted: Callable[[str, tuple[str, ...]], None] | None = None,
        on_error: Callable[[RenderError], None] | None = None,
        typing_after_post_s: float = 1.0,
        backoff_s: float = 0.5,
        max_backoff_s: float = 8.0,
        wrap_links: bool | None = None,
        close_live_fences: bool | None = None,
        budget: RequestBudget | None = None,
    ) -> None:
        self.platform = platform
        self.channel_id = channel_id
        self.limits = platform.limits
        self._clock = clock
        self.on_posted = on_posted
        # Told when ``aclose`` has made every outstanding call (``ThreadRenderers`` then
        # stops the background task and forgets this renderer: its owner is done with it).
        self.on_closed: Callable[[], object] | None = None
        # A terminal that only appends (the plain console) needs text that only grows by
        # whole lines: no temporary fence closers, no rewritten links, no half lines.
        append_only = platform.streams_append_only
        self._budget = budget
        self._retrying = RetryingPlatform(
            platform, RetryPolicy(backoff_s=backoff_s, max_backoff_s=max_backoff_s), budget
        )
        self._tally = RenderTally()
        self._book = OutputBook()
        self._typing = TypingIndicator(
            self._retrying,
            channel_id,
            self._tally,
            clock=clock,
            after_post_s=typing_after_post_s,
            # A platform whose indicator is a message (Slack's "working…" line) removes it.
            stop=getattr(platform, "stop_typing", None),
        )
        self._delivery = PacedDelivery(
            self._retrying,
            channel_id,
            self._book,
            self._tally,
            clock=clock,
            append_only=append_only,
            on_posted=self._posted,
            join_cards=(
                (lambda: budget.channel_short(channel_id, "send"))
                if budget is not None and self.limits.supports_edit and not append_only
                else None
            ),
        )
        self._composer = OutputComposer(
            self._book,
            self._delivery,
            self._tally,
            self.limits,
            append_only=append_only,
            wrap_links=not append_only if wrap_links is None else wrap_links,
            close_live_fences=not append_only if close_live_fences is None else close_live_fences,
            clock=clock,
            merge_footers=budget.short if budget is not None else None,
            on_late_error=self._background_failed,
        )
        self._titles = TitlePacer(self._retrying, channel_id, clock=clock)
        self._lock = trio.Lock()
        self._wake = trio.Event()
        # When the background task waits for ``_wake`` or this deadline; None while it runs
        # (it reads the deadlines again before it waits).
        self._waiting_until: float | None = None
        self._on_error = on_error
        self.last_error: RenderError | None = None  # the last failure of the background task
        self._nursery: trio.Nursery | None = None
        self._running = False  # the background task runs (``run``)

    # -- lifetime ---------------------------------------------------------------------------

    async def __aenter__(self) -> StreamRenderer:
        self._nursery_manager = trio.open_nursery()
        nursery = await self._nursery_manager.__aenter__()
        await nursery.start(self.run)
        self._nursery = nursery
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        try:
            if exc is None:
                await self.aclose()
        finally:
            assert self._nursery is not None
            self._nursery.cancel_scope.cancel()
            self._nursery = None
            await self._nursery_manager.__aexit__(exc_type, exc, tb)
        return None

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """The background task: makes paced edits and typing refreshes when they fall due."""
        task_status.started()
        self._running = True
        try:
            await self._run()
        finally:
            self._running = False

    async def _run(self) -> None:
        while True:
            self._wake = trio.Event()
            deadline = self._next_deadline()
            self._waiting_until = deadline
            try:
                with trio.move_on_at(deadline):
                    await self._wake.wait()
            finally:
                self._waiting_until = None
            prepaid = False
            if self._budget is not None and self._delivery.has_due_edit(self._clock()):
                # Unlocked: the thread's own replies and posts go on while this edit waits
                # its turn, and what they stream in meanwhile is in the edit.
                # A sealed stream's final text (its settle waits for the next effect) asks
                # as a final edit: the last of the thread's turns, whatever its channel's
                # edit window holds back for finals.
                await self._retrying.acquire(
                    self.channel_id,
                    "edit",
                    Priority.EDIT,
                    final=self._composer.unsettled is not None,
                )
                # Held, not owned, while this waits for the renderer: a seal being settled
                # there takes it for its final text (it would otherwise wait a whole turn
                # of every thread, and this edit find nothing left to show).
                self._retrying.hold_edit()
                prepaid = True
            try:
                await self._lock.acquire()
            except BaseException:
                if prepaid and self._retrying.take_held_edit():
                    # cancelled while waiting: a token held for ever blocks others
                    self._retrying.refund(self.channel_id, "edit", Priority.EDIT)
                raise
            if prepaid:
                prepaid = self._retrying.take_held_edit()
            try:
                try:
                    await self._flush_due(prepaid_edit=prepaid)
                except RenderError as error:
                    self._background_failed(error)
                except Exception as error:  # a platform that broke its contract
                    # Never take the owner's nursery (all its threads) down: report it.
                    self._tally.broken_calls += 1
                    message = f"chat platform failed: {type(error).__name__}: {error}"
                    self._background_failed(RenderError(message))
                self._report_background_posts()
            finally:
                self._lock.release()

    async def flush(self) -> list[Posted]:
        """Send and edit everything outstanding, waiting for each message's pacing interval;
        returns what was posted since the last report (as ``apply`` does)."""
        while True:
            async with self._lock:
                await self._composer.settle_pending()
                await self._flush_due(all_edits=True)
                deadline = self._delivery.next_deadline()
            if deadline == math.inf:
                break
            await trio.sleep_until(deadline)
        return self._book.take_posted()

    @property
    def unsettled(self) -> str | None:
        """The key of a sealed stream whose last calls wait for the next effect (a
        footer may still join them); ``settle`` makes them now."""
        return self._composer.unsettled

    async def settle(self) -> list[Posted]:
        """Make a sealed stream's last calls now rather than with the next effect (a
        caller that acknowledges an effect only once it is on the platform, and has no
        next effect at hand: the cluster gateway); returns what was posted, as
        ``apply``."""
        async with self._lock:
            try:
                await self._composer.settle_pending()
            finally:
                self._wake.set()
            return self._book.take_posted()

    async def aclose(self) -> list[Posted]:
        """Flush (typing off); the renderer keeps its keys, a later ``apply`` still works
        (but a ``ThreadRenderers`` that made it lets it go: ``on_closed``)."""
        await self._typing.turn_off()
        posted = await self.flush()
        if self.on_closed is not None:
            self.on_closed()
        return posted

    # -- the interface -----------------------------------------------------------------------

    def expedite(self, urgent: int) -> None:
        """``urgent`` more (negative: fewer) effects someone waits for (a command reply, a
        prompt) are queued behind the one being applied (the reactor says so when they are
        committed, and again once each is applied). While any is, the calls that would ask
        the budget at ``POST`` (a first post, a sealed output's final text) ask at
        ``URGENT``, and those waiting now are lifted (``RequestBudget.expedite``): the
        reply is not held behind other threads' posts by the effects ahead of it."""
        retrying = self._retrying
        retrying.urgent = max(0, retrying.urgent + urgent)
        if urgent > 0 and self._budget is not None:
            self._budget.expedite(self.channel_id)

    def known(self, key: str, message_ids: tuple[str, ...] | list[str]) -> None:
        """Seed an output posted before a restart (from the log): never posted again.
        Called once per logged ``OutputPosted``; the ids of one key accumulate."""
        self._book.known(key, message_ids)

    def message_ids(self, key: str) -> tuple[str, ...]:
        return self._book.message_ids(key)

    def statistics(self) -> RendererStatistics:
        tally, calls = self._tally, self._retrying.statistics()
        return RendererStatistics(
            sends=tally.sends,
            edits=tally.edits,
            deletes=tally.deletes,
            typing_calls=tally.typing_calls,
            replies=tally.replies,
            retries=calls.retries,
            rate_limited=calls.rate_limited,
            failures=calls.gave_up + tally.broken_calls,
            typing_skipped=calls.typing_skipped,
            ignored_appends=tally.ignored_appends,
            duplicate_posts=tally.duplicate_posts,
            blank_skipped=tally.blank_skipped,
            outputs=len(self._book),
            dirty_messages=self._delivery.waiting(),
            renames=self._titles.renames,
            titles_coalesced=self._titles.coalesced,
        )

    async def apply(self, effect: Any) -> list[Posted]:
        """Apply one chat effect; returns ``(key, new message ids)`` for the messages posted
        since the last report: by this call, and by the background task when there is no
        ``on_posted`` (a first message waits one pacing interval, so it is often reported
        with the next effect). Each id is reported once, so the log stays linear; ``known``
        merges a key's reports back. Raises ``RenderError`` when the platform refused for
        good, ``TypeError`` for an effect that is not a chat effect."""
        if not isinstance(effect, CHAT_EFFECTS):
            raise TypeError(f"not a chat effect: {type(effect).__name__}")
        lock = self._lock
        if lock.locked():
            await lock.acquire()
        else:
            # Free: taken without a scheduler round. An append to a streaming message, the
            # commonest effect, then makes no call and yields nowhere: its thread's chat
            # lane goes on at once (a round per delta was a third of what the lane cost).
            lock.acquire_nowait()
        try:
            try:
                await self._apply(effect)
                await self._flush_due()
            except RenderError as error:
                error.effect = effect.type
                raise
            finally:
                self._poke()
            return self._book.take_posted()
        finally:
            lock.release()

    def apply_nowait(self, effect: Any) -> list[Posted] | None:
        """``apply`` without a scheduler round, for what takes no platform call: an append
        to a streamed message already posted, while nothing else is being applied and
        nothing falls due now (``_flush_due`` would have a call to make). Returns what
        ``apply`` would; None (and nothing done) when ``apply`` is needed. What the
        append makes due is left to the background task (``_poke``). The reactor
        applies a thread's appends so from the log's flush, without its chat lane's task
        waking per delta (``runtime.live.reactor``)."""
        if type(effect) is not AppendOutput or self._lock.locked() or not self._running:
            return None  # (without the background task, edits are made by ``apply`` only)
        now = self._clock()
        # What ``_flush_due`` would call now: the sends due, the edits due unless a budget
        # leaves them to the background task, a typing refresh, a title.
        if (
            self._delivery.has_due_call(now, edits=self._budget is None)
            or self._typing.deadline() <= now
            or self._titles.deadline() <= now
        ):
            return None
        if not self._composer.append_nowait(effect):
            return None
        self._poke()
        return self._book.take_posted()

    def _next_deadline(self) -> float:
        return min(self._delivery.next_deadline(), self._typing.deadline(), self._titles.deadline())

    def _poke(self) -> None:
        """Wake the background task when what was just applied falls due before it would
        wake anyway (a new message to send, an edit sooner): not after every append to a
        message whose edit is already due later, which woke it for nothing."""
        waiting = self._waiting_until
        if waiting is None or self._next_deadline() < waiting:
            self._wake.set()

    async def resume_stream(
        self,
        key: str,
        text: str,
        last_seq: int,
        message_ids: tuple[str, ...],
        *,
        sealed: bool = False,
    ) -> list[Posted]:
        """Continue a text output another renderer was streaming (``OutputComposer.
        resume_stream``); returns what was posted, as ``apply``."""
        async with self._lock:
            try:
                await self._composer.resume_stream(key, text, last_seq, message_ids, sealed)
                await self._flush_due()
            finally:
                self._wake.set()
            return self._book.take_posted()

    async def _flush_due(self, *, prepaid_edit: bool = False, all_edits: bool = False) -> None:
        """Send the new messages and make the edits that fell due, and a typing refresh.
        With a budget only one paced edit is made, with the token the background task
        waited for (``prepaid_edit``), unless ``all_edits`` (a flush: each waits its own)."""
        now = self._clock()
        if self._budget is None:
            await self._delivery.flush_due(now)
        elif all_edits:
            await self._delivery.flush_due(now, priority=Priority.POST)
        else:
            try:
                await self._delivery.flush_due(now, edits=False)
            except BaseException:
                if prepaid_edit:  # the edit's token is not going to be used
                    self._retrying.refund(self.channel_id, "edit", Priority.EDIT)
                raise
            if prepaid_edit:
                await self._delivery.edit_one_due(now)
        await self._typing.refresh_if_due(now)
        await self._titles.flush_due(now)

    def _posted(self, out: Output, message_id: str) -> None:
        self._book.record_posted(out.key, message_id)
        self._typing.after_post()

    def _report_background_posts(self) -> None:
        """Posts made by the background task go to ``on_posted`` when there is one, else
        out with the next ``apply``/``flush``."""
        if self.on_posted is not None:
            for key, ids in self._book.take_posted():
                self.on_posted(key, ids)

    def _background_failed(self, error: RenderError) -> None:
        """A paced send/edit failed for good in the background, where no effect is being
        applied: it goes to ``on_error``, else to the log (the effect that caused it was
        already reported as applied, and a later effect must not fail for it)."""
        self.last_error = error
        if self._on_error is not None:
            self._on_error(error)
        else:
            logger.warning("channel=%s %s", self.channel_id, error)

    async def _apply(self, effect: Any) -> None:
        if isinstance(effect, Typing):
            if effect.on:
                await self._typing.turn_on()
            else:
                await self._typing.turn_off()
        elif isinstance(effect, RenameThread):
            await self._titles.request(effect.title)
        else:
            await self._composer.apply(effect)
