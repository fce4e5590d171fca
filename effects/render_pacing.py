"""Pacing: when each message of a channel is sent, edited or deleted, and in what order.

``PacedDelivery`` holds the messages with a call still to make and makes those calls
through the (retrying) platform. What it keeps:

- **Edits are paced and coalesced.** A sent message is edited at most once per
  ``limits.min_edit_interval_s``. Marking it dirty again before its edit is due changes
  nothing but what that one edit shows (the wanted text is read when the edit is made), so
  any number of deltas between two edits cost one call.
- **A new message may wait one interval** (``post(now=False)``): a streamed message, tool
  card or thinking preview is sent when it is complete or one interval after it opened,
  so a quick tool is one send, not a send and an edit.
- **Channel order is creation order.** Before a message is sent, the waiting messages
  made before it are sent; on an append-only display (the plain console) the waiting edits
  are made first too, since a late edit would print below newer messages.
- **Settling.** ``settle(out)`` makes an output's outstanding calls now, waiting out their
  pacing: what follows a sealed output must come after its final text.
- **Failure is per output.** A call refused for good marks its output failed (it is fed no
  more) and raises ``RenderError`` naming the output's key.
- **Joined messages** (``limits.joins_messages``, a platform without edits): a message of
  streamed text, a tool card or a thinking preview, once final, waits in an outbox until
  ``min_edit_interval_s`` has passed since the channel's last send, and goes out joined
  with the others waiting (up to the character budget); a prompt, notice, footer or reply
  sends what waits first and then stands alone, so order is kept and a footer is the last
  message of its run. Elsewhere only finished tool cards do so, and only while the
  channel's sends wait for tokens (``join_cards``: ``RequestBudget.channel_short``).
- **Priorities** for a shared request budget (``effects.request_budget``): a prompt (a
  message with buttons or a menu), its dismissal and a reply are ``URGENT``; other sends,
  deletions and the edits that settle an output are ``POST``; paced edits are ``EDIT``. A
  message sent before a more urgent one (channel order) goes at the urgent one's priority.
  With a budget the paced edits are the renderer's background task's alone
  (``flush_due(edits=False)``; ``edit_one_due`` with a token it waited for unlocked).

It never retries (the platform it is given does: ``effects.retrying_platform``) and does
not decide what a message shows (``Output.wanted``); ``flush_due``/``next_deadline`` are
driven by the renderer's background task or its ``flush``.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Awaitable, Callable
from functools import partial
from typing import TypeVar

import trio

from threadspindle.effects.chunking import is_blank
from threadspindle.effects.platform import PlatformError, SelectMenu
from threadspindle.effects.render_outputs import Message, Output, OutputBook, RenderTally
from threadspindle.effects.request_budget import Priority
from threadspindle.effects.retrying_platform import RetryingPlatform
from threadspindle.runtime.core.effect_types import Button

__all__ = ["PacedDelivery", "RenderError"]

T = TypeVar("T")

_JOINABLE = ("stream", "card", "preview")  # outputs that may share a message


def _nonce(channel_id: str, key: str, nth: int) -> str:
    """The idempotency key of a send: the output's key and the message's place in it."""
    return hashlib.blake2b(f"{channel_id}/{key}#{nth}".encode(), digest_size=12).hexdigest()


class RenderError(Exception):
    """A platform call failed for good; ``key`` is the output it was for."""

    def __init__(self, message: str, *, key: str | None = None, effect: str | None = None):
        super().__init__(message)
        self.key = key
        self.effect = effect


class PacedDelivery:
    """The paced calls of one channel; see the module docstring. ``on_posted(out, id)`` is
    told of every message posted (sent or replied)."""

    def __init__(
        self,
        platform: RetryingPlatform,
        channel_id: str,
        book: OutputBook,
        tally: RenderTally,
        *,
        clock: Callable[[], float],
        append_only: bool,
        on_posted: Callable[[Output, str], None],
        join_cards: Callable[[], bool] | None = None,
    ) -> None:
        self._platform = platform
        self._join_cards = join_cards
        self._channel_id = channel_id
        self._limits = platform.limits
        self._book = book
        self._tally = tally
        self._clock = clock
        self._append_only = append_only
        self._on_posted = on_posted
        self._dirty: dict[Message, Output] = {}  # sent messages waiting for a paced edit
        self._unsent: dict[Message, Output] = {}  # new messages waiting to be sent
        self._joins = self._limits.joins_messages
        self._budget = self._limits.char_limit - self._limits.split_margin
        self._outbox: list[tuple[Output, Message]] = []  # final, waiting to go out joined
        self._last_sent = -math.inf

    # -- what is waiting -------------------------------------------------------------------------

    def waiting(self) -> int:
        """Messages waiting for their paced send or edit."""
        return len(self._dirty) + len(self._unsent) + len(self._outbox)

    def busy_outputs(self) -> list[Output]:
        return [*self._dirty.values(), *self._unsent.values(), *(o for o, _ in self._outbox)]

    def is_unsent(self, message: Message) -> bool:
        return message in self._unsent

    def mark_dirty(self, out: Output, message: Message) -> None:
        """Edit ``message`` when its pacing allows (once, whatever changes until then)."""
        self._dirty[message] = out

    def _due(self, message: Message) -> float:
        return message.last_touch + self._limits.min_edit_interval_s

    def next_deadline(self) -> float:
        """When the next waiting send or edit falls due (``inf``: nothing waits)."""
        due = min((self._due(m) for m in self._dirty), default=math.inf)
        if self._outbox:
            due = min(due, self._last_sent + self._limits.min_edit_interval_s)
        return min(due, min((m.send_due for m in self._unsent), default=math.inf))

    async def flush_due(
        self, now: float, *, edits: bool = True, priority: Priority = Priority.EDIT
    ) -> None:
        """Send the new messages and (``edits``) make the edits that fell due by ``now``."""
        for message in sorted(self._unsent, key=lambda m: m.seq):
            if message.send_due <= now and message in self._unsent:
                await self.send(self._unsent[message], message)
        if edits:
            for message in sorted(self._dirty, key=lambda m: m.seq):
                if self._due(message) <= now and message in self._dirty:
                    await self.edit(self._dirty.pop(message), message, priority=priority)
        # Joined messages are sends, not edits: they go whoever flushes.
        if self._outbox and now >= self._last_sent + self._limits.min_edit_interval_s:
            await self.send_joined()

    def has_due_call(self, now: float, *, edits: bool) -> bool:
        """Whether ``flush_due(now, edits=edits)`` has a call to make."""
        if any(m.send_due <= now for m in self._unsent):
            return True
        if self._outbox and now >= self._last_sent + self._limits.min_edit_interval_s:
            return True
        return edits and self.has_due_edit(now)

    def has_due_edit(self, now: float) -> bool:
        return any(self._due(m) <= now for m in self._dirty)

    async def edit_one_due(self, now: float) -> None:
        """The oldest edit due by ``now``, with the ``EDIT`` token the caller already
        holds (given back when no edit is due any more or it would change nothing)."""
        due = [m for m in self._dirty if self._due(m) <= now]
        if not due:
            self._platform.refund(self._channel_id, "edit", Priority.EDIT)
            return
        message = min(due, key=lambda m: m.seq)
        await self.edit(self._dirty.pop(message), message, prepaid=True)

    async def settle(
        self, out: Output, *, priority: Priority = Priority.POST, final_edits: bool = False
    ) -> None:
        """Make a sealed output's outstanding sends and edits now, waiting out their pacing:
        whatever the chat shows after it (the footer, the next tool card) must come after
        its final text, not before its last paced edit. ``final_edits`` (streamed text): its
        edits ask as ``final`` ``EDIT``s, in the channel's place among the streaming
        threads, rather than at ``POST`` ahead of all of them: a seal is the last of the
        edits that keep a thread's text current, and 200 threads ending together at
        ``POST`` starved the edits of those still streaming for seconds (chat_budget)."""
        for message in sorted(
            (m for m, o in self._unsent.items() if o is out), key=lambda m: m.seq
        ):
            if message in self._unsent:
                await self.send(out, message, priority=priority)
        while pending := sorted(
            (m for m, o in self._dirty.items() if o is out), key=lambda m: m.seq
        ):
            message = pending[0]
            await trio.sleep_until(self._due(message))
            if message in self._dirty:
                if final_edits and priority == Priority.POST:
                    await self.edit(
                        self._dirty.pop(message), message, priority=Priority.EDIT, final=True
                    )
                else:
                    await self.edit(self._dirty.pop(message), message, priority=priority)

    def is_dirty(self, message: Message) -> bool:
        return message in self._dirty

    def adopt(self, out: Output, message: Message) -> None:
        """``message`` (sent, of another output) shows ``out`` too from now on: its
        outstanding edit is ``out``'s (a ``settle(out)`` makes it), and its id is
        reported for ``out``'s key."""
        assert message.id is not None
        if message in self._dirty:
            self._dirty[message] = out
        self._book.record_posted(out.key, message.id)

    # -- the calls -------------------------------------------------------------------------------

    async def post(self, out: Output, message: Message, *, now: bool) -> None:
        """A new message: sent now, or queued to be sent one pacing interval from now."""
        if now:
            await self.send(out, message)
        else:
            message.send_due = self._clock() + self._limits.min_edit_interval_s
            self._unsent[message] = out

    async def send_earlier(self, message: Message, priority: Priority = Priority.POST) -> None:
        """Channel order is creation order: send the waiting messages made before it."""
        for earlier in sorted(self._unsent, key=lambda m: m.seq):
            if earlier.seq < message.seq and earlier in self._unsent:
                await self.send(self._unsent[earlier], earlier, priority=priority)

    async def send(
        self,
        out: Output,
        message: Message,
        *,
        menu: SelectMenu | None = None,
        priority: Priority = Priority.POST,
    ) -> None:
        if message.buttons or menu is not None:
            priority = Priority.URGENT  # a prompt: what the agent waits for
        self._unsent.pop(message, None)
        await self.send_earlier(message, priority)
        text = out.wanted(message, whole_lines=self._append_only)
        if is_blank(text):
            self._tally.blank_skipped += 1
            if message in out.messages:
                out.messages.remove(message)
            return
        if self._append_only:
            # An append-only display shows a late edit below newer messages: make the
            # edits still waiting first, so the transcript reads in order.
            for waiting in sorted(self._dirty, key=lambda m: m.seq):
                await self.edit(self._dirty.pop(waiting), waiting, priority=priority)
        if self._joins:
            if menu is None and not message.buttons and out.mode in _JOINABLE:
                self._outbox.append((out, message))
                if self._clock() >= self._last_sent + self._limits.min_edit_interval_s:
                    await self.send_joined()
                return
            await self.send_joined()  # what waits goes first; this one stands alone
        elif out.done and (self._outbox or (self._join_cards and self._join_cards())):
            # A finished tool card while the channel's sends wait for tokens (a burst of
            # tool calls: Discord posts 5 messages per 5 s in a channel) waits to go out
            # joined with the next ones, as on a platform without edits: 40 cards were 40
            # sends, and the answer after them came 40 s late. It never changes again.
            self._outbox.append((out, message))
            return
        elif self._outbox:
            await self.send_joined()  # the cards waiting go first
        # The same nonce for every attempt, and in a gateway restarted after a crash: a
        # send whose answer was lost (or whose post was never recorded) is not posted twice.
        nonce = _nonce(self._channel_id, out.key, message.nth)
        message.id = await self._call(
            out,
            lambda: self._platform.send(
                self._channel_id,
                text,
                buttons=message.buttons,
                menu=menu,
                nonce=nonce,
                priority=priority,
            ),
        )
        message.shown, message.shown_buttons = text, message.buttons
        message.last_touch = self._last_sent = self._clock()
        self._tally.sends += 1
        self._on_posted(out, message.id)

    async def send_joined(self) -> None:
        """Send what waits in the outbox, joined into as few messages as fit the budget."""
        while self._outbox:
            batch: list[tuple[Output, Message, str]] = []
            size = 0
            for out, message in self._outbox:
                text = out.wanted(message, whole_lines=self._append_only)
                if batch and size + 2 + len(text) > self._budget:
                    break
                batch.append((out, message, text))
                size += len(text) + (2 if len(batch) > 1 else 0)
            del self._outbox[: len(batch)]
            joined = "\n\n".join(text for _, _, text in batch if not is_blank(text))
            if is_blank(joined):
                self._tally.blank_skipped += 1
                continue
            first_out, first, _ = batch[0]
            nonce = _nonce(self._channel_id, first_out.key, first.nth)
            try:
                send = partial(self._platform.send, self._channel_id, joined, nonce=nonce)
                message_id = await self._call(first_out, send)
            except RenderError:
                for out, _, _ in batch:
                    out.failed = True
                raise
            now = self._last_sent = self._clock()
            self._tally.sends += 1
            reported: set[int] = set()
            for out, message, text in batch:
                message.id, message.shown, message.last_touch = message_id, text, now
                if id(out) not in reported:
                    reported.add(id(out))
                    self._on_posted(out, message_id)

    async def edit(
        self,
        out: Output,
        message: Message,
        *,
        priority: Priority = Priority.EDIT,
        prepaid: bool = False,
        final: bool = False,
    ) -> None:
        """Bring a sent message to its wanted text (read now: a paced edit shows whatever
        came in while it waited). ``prepaid``: the caller holds an ``EDIT`` token for it,
        given back when there is nothing to edit. ``final``: see ``settle``."""
        text = out.wanted(message, whole_lines=self._append_only)
        message_id = message.id
        components_changed = message.clear_components or message.buttons != message.shown_buttons
        if (
            message_id is None
            or out.failed
            or (text == message.shown and not components_changed)
            or is_blank(text)
            or not self._limits.supports_edit
        ):
            if prepaid:
                self._platform.refund(self._channel_id, "edit", Priority.EDIT)
            if message_id is None or out.failed:
                return
            if text == message.shown and not components_changed:
                return
            if is_blank(text):
                self._tally.blank_skipped += 1
                return
            # No edits: the new text arrives as a new message.
            await self.send(out, self._book.new_message(out, text), priority=priority)
            return
        if components_changed and message.clear_components:
            priority = Priority.URGENT  # a dismissed prompt: its buttons must go first
        buttons = message.buttons if components_changed else None
        await self._call(
            out,
            lambda: self._platform.edit(
                self._channel_id,
                message_id,
                text,
                buttons=buttons,
                priority=priority,
                prepaid=prepaid,
                final=final,
            ),
        )
        message.shown, message.shown_buttons = text, message.buttons
        message.clear_components = False
        message.last_touch = self._clock()
        self._tally.edits += 1

    async def delete(
        self, out: Output, message: Message, *, priority: Priority = Priority.POST
    ) -> None:
        self._dirty.pop(message, None)
        self._outbox = [(o, m) for o, m in self._outbox if m is not message]
        message_id = message.id
        if message_id is None:
            self._unsent.pop(message, None)  # never sent: nothing to delete
            return
        await self._call(
            out, lambda: self._platform.delete(self._channel_id, message_id, priority=priority)
        )
        self._tally.deletes += 1

    async def reply(
        self,
        out: Output,
        message: Message,
        action_id: str,
        *,
        ephemeral: bool,
        buttons: tuple[Button, ...],
    ) -> None:
        """Answer a command with ``message`` (its final text), after the messages before it."""
        text = message.final or ""
        await self.send_earlier(message, Priority.URGENT)
        await self.send_joined()
        message.id = await self._call(
            out,
            lambda: self._platform.reply(
                self._channel_id, action_id, text, ephemeral=ephemeral, buttons=buttons
            ),
        )
        message.shown, message.buttons = text, buttons
        message.shown_buttons = buttons
        message.last_touch = self._clock()
        self._tally.replies += 1
        self._on_posted(out, message.id)

    async def send_file(self, out: Output, message: Message, filename: str, data: bytes) -> bool:
        """Post ``message`` (its final text the caption) with ``data`` attached, after the
        messages before it; False where the platform takes no files (nothing was sent)."""
        caption = message.final or ""
        await self.send_earlier(message)
        await self.send_joined()
        posted = await self._call(
            out, lambda: self._platform.send_file(self._channel_id, filename, data, caption)
        )
        if posted is None:
            return False
        message.id = posted
        message.shown = caption
        message.last_touch = self._last_sent = self._clock()
        self._tally.sends += 1
        self._on_posted(out, message.id)
        return True

    async def _call(self, out: Output, call: Callable[[], Awaitable[T]]) -> T:
        try:
            return await call()
        except PlatformError as error:
            out.failed = True  # stop feeding an output the platform refuses
            raise RenderError(
                f"chat platform refused output {out.key!r}: {error}", key=out.key
            ) from error
