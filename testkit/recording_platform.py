"""``RecordingPlatform``: an in-memory ``ChatPlatform`` that records every call.

Tests drive the stream renderer (and anything above it) through it and assert on what a
chat would show: every send, edit, delete, typing and reply with the (trio) time it was
made, the current messages of each channel, and a text ``transcript``. Faults are injected
by rule: a ``PlatformError`` (429 with ``retry_after``, a retryable 5xx, a permanent
refusal) on the Nth call, optionally of one kind, and optionally *after* the call took
effect (a lost response), which the ``nonce`` of a send lets it dedupe like Discord does.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

import trio

from threadspindle.effects.platform import PlatformError, PlatformLimits, SelectMenu
from threadspindle.runtime.core.effect_types import Button

__all__ = ["Fault", "PlatformCall", "RecordedMessage", "RecordingPlatform"]

CallKind = str  # "send" | "edit" | "delete" | "typing" | "reply" | "rename"


@dataclass
class RecordedMessage:
    id: str
    channel_id: str
    text: str
    buttons: tuple[Button, ...] = ()
    menu: SelectMenu | None = None
    reply_to: str | None = None  # the action id a reply answers
    ephemeral: bool = False
    deleted: bool = False
    edits: int = 0
    posted_at: float = 0.0
    nonce: str | None = None
    history: list[str] = field(default_factory=list)  # every text it showed, in order


@dataclass(frozen=True)
class PlatformCall:
    kind: CallKind
    channel_id: str
    at: float
    message_id: str | None = None
    text: str | None = None
    error: str | None = None  # set when the call failed (an injected fault)


@dataclass
class Fault:
    """Raise ``error()`` on the ``nth`` matching call (1-based), ``times`` times in a row.

    ``kind`` restricts the count to calls of that kind; ``after_effect`` applies the call
    first and then raises (the response was lost)."""

    error: Callable[[], PlatformError]
    nth: int = 1
    kind: CallKind | None = None
    times: int = 1
    after_effect: bool = False
    seen: int = 0
    fired: int = 0


@dataclass
class _Channel:
    messages: dict[str, RecordedMessage] = field(default_factory=dict)


class RecordingPlatform:
    """A chat platform in memory. ``clock`` stamps the calls (trio time by default)."""

    def __init__(
        self,
        limits: PlatformLimits | None = None,
        *,
        clock: Callable[[], float] = trio.current_time,
        latency_s: float = 0.0,
        streams_append_only: bool = False,
    ) -> None:
        self.limits = limits or PlatformLimits()
        # Pretend to be a display that only appends (as the plain console is).
        self.streams_append_only = streams_append_only
        self.calls: list[PlatformCall] = []
        self.faults: list[Fault] = []
        self._clock = clock
        self._latency_s = latency_s
        self._channels: dict[str, _Channel] = {}
        self._ids = itertools.count(1)
        self._by_nonce: dict[tuple[str, str], str] = {}
        self.titles: dict[str, list[str]] = {}  # channel -> every title it was renamed to
        self.takes_files = False  # as the console: no attachments, the text instead
        self.files: list[tuple[str, str, bytes, str]] = []  # channel, filename, data, caption

    # -- fault injection -----------------------------------------------------------------

    def inject(
        self,
        error: Callable[[], PlatformError],
        *,
        nth: int = 1,
        kind: CallKind | None = None,
        times: int = 1,
        after_effect: bool = False,
    ) -> Fault:
        fault = Fault(error=error, nth=nth, kind=kind, times=times, after_effect=after_effect)
        self.faults.append(fault)
        return fault

    def rate_limit(
        self,
        *,
        nth: int = 1,
        kind: CallKind | None = None,
        retry_after: float = 1.0,
        times: int = 1,
    ) -> Fault:
        """A 429 with ``Retry-After``."""
        return self.inject(
            lambda: PlatformError("429 Too Many Requests", retry_after=retry_after),
            nth=nth,
            kind=kind,
            times=times,
        )

    def server_error(
        self,
        *,
        nth: int = 1,
        kind: CallKind | None = None,
        times: int = 1,
        after_effect: bool = False,
    ) -> Fault:
        """A 5xx (retryable); ``after_effect``: the call took effect but its answer was lost."""
        return self.inject(
            lambda: PlatformError("503 Service Unavailable", retryable=True),
            nth=nth,
            kind=kind,
            times=times,
            after_effect=after_effect,
        )

    def _fault_for(self, kind: CallKind) -> Fault | None:
        hit: Fault | None = None
        for fault in self.faults:
            if fault.kind is not None and fault.kind != kind:
                continue
            fault.seen += 1
            if hit is None and fault.seen >= fault.nth and fault.fired < fault.times:
                fault.fired += 1
                hit = fault
        return hit

    async def _enter(
        self, kind: CallKind, channel_id: str, message_id: str | None, text: str | None
    ) -> Fault | None:
        """Record the call; raise a fault that strikes before the call takes effect."""
        if self._latency_s:
            await trio.sleep(self._latency_s)
        else:
            await trio.lowlevel.checkpoint()
        fault = self._fault_for(kind)
        error = fault.error() if fault is not None else None
        self.calls.append(
            PlatformCall(
                kind,
                channel_id,
                self._clock(),
                message_id,
                text,
                str(error) if error is not None else None,
            )
        )
        if fault is not None and error is not None and not fault.after_effect:
            raise error
        return fault

    @staticmethod
    def _leave(fault: Fault | None) -> None:
        if fault is not None and fault.after_effect:
            raise fault.error()

    # -- ChatPlatform ----------------------------------------------------------------------

    def _channel(self, channel_id: str) -> _Channel:
        return self._channels.setdefault(channel_id, _Channel())

    def _message(self, channel_id: str, message_id: str) -> RecordedMessage:
        message = self._channel(channel_id).messages.get(message_id)
        if message is None or message.deleted:
            raise PlatformError(f"404 Unknown Message {message_id}")
        return message

    def _check_text(self, text: str) -> None:
        if not text.strip():
            raise PlatformError("400 Cannot send an empty message")
        if len(text) > self.limits.char_limit:
            raise PlatformError(f"400 Must be {self.limits.char_limit} or fewer in length")

    async def send(
        self,
        channel_id: str,
        text: str,
        *,
        buttons: tuple[Button, ...] = (),
        menu: SelectMenu | None = None,
        nonce: str | None = None,
    ) -> str:
        fault = await self._enter("send", channel_id, None, text)
        self._check_text(text)
        if nonce is not None and (channel_id, nonce) in self._by_nonce:
            self._leave(fault)
            return self._by_nonce[channel_id, nonce]  # Discord's enforce_nonce
        message_id = f"m{next(self._ids)}"
        self._channel(channel_id).messages[message_id] = RecordedMessage(
            message_id,
            channel_id,
            text,
            buttons,
            menu,
            posted_at=self._clock(),
            nonce=nonce,
            history=[text],
        )
        if nonce is not None:
            self._by_nonce[channel_id, nonce] = message_id
        self._leave(fault)
        return message_id

    async def edit(
        self,
        channel_id: str,
        message_id: str,
        text: str,
        *,
        buttons: tuple[Button, ...] | None = None,
    ) -> None:
        fault = await self._enter("edit", channel_id, message_id, text)
        self._check_text(text)
        message = self._message(channel_id, message_id)
        message.text = text
        message.history.append(text)
        if buttons is not None:
            message.buttons = buttons
        message.edits += 1
        self._leave(fault)

    async def delete(self, channel_id: str, message_id: str) -> None:
        fault = await self._enter("delete", channel_id, message_id, None)
        self._message(channel_id, message_id).deleted = True
        self._leave(fault)

    async def typing(self, channel_id: str) -> None:
        fault = await self._enter("typing", channel_id, None, None)
        self._leave(fault)

    async def rename_thread(self, channel_id: str, title: str) -> None:
        fault = await self._enter("rename", channel_id, None, title)
        self.titles.setdefault(channel_id, []).append(title)
        self._leave(fault)

    async def send_file(
        self, channel_id: str, filename: str, data: bytes, caption: str
    ) -> str | None:
        """Recorded in ``files`` when ``takes_files``; else None (the text is shown)."""
        fault = await self._enter("send_file", channel_id, None, caption)
        if not self.takes_files:
            self._leave(fault)
            return None
        message_id = f"file-{len(self.files) + 1}"
        self.files.append((channel_id, filename, data, caption))
        self._leave(fault)
        return message_id

    async def reply(
        self,
        channel_id: str,
        action_id: str,
        text: str,
        *,
        ephemeral: bool = False,
        buttons: tuple[Button, ...] = (),
    ) -> str:
        fault = await self._enter("reply", channel_id, None, text)
        self._check_text(text)
        if (channel_id, f"reply/{action_id}") in self._by_nonce:
            self._leave(fault)
            return self._by_nonce[channel_id, f"reply/{action_id}"]  # one answer per command
        message_id = f"m{next(self._ids)}"
        self._by_nonce[channel_id, f"reply/{action_id}"] = message_id
        self._channel(channel_id).messages[message_id] = RecordedMessage(
            message_id,
            channel_id,
            text,
            buttons,
            reply_to=action_id,
            ephemeral=ephemeral,
            posted_at=self._clock(),
        )
        self._leave(fault)
        return message_id

    # -- reading back ------------------------------------------------------------------------

    def messages(self, channel_id: str) -> list[RecordedMessage]:
        """The channel's messages in posting order, deleted ones left out."""
        return [m for m in self._channel(channel_id).messages.values() if not m.deleted]

    def message(self, channel_id: str, message_id: str) -> RecordedMessage:
        return self._message(channel_id, message_id)

    def texts(self, channel_id: str) -> list[str]:
        return [m.text for m in self.messages(channel_id)]

    def count(self, kind: CallKind, *, ok_only: bool = True) -> int:
        return sum(1 for c in self.calls if c.kind == kind and (c.error is None or not ok_only))

    def calls_of(self, kind: CallKind) -> list[PlatformCall]:
        return [c for c in self.calls if c.kind == kind and c.error is None]

    def transcript(self, channel_id: str) -> str:
        """The channel as a reader sees it now: one block per message, controls in brackets."""
        blocks: list[str] = []
        for message in self.messages(channel_id):
            text = message.text
            if message.reply_to is not None:
                text = ("(only you) " if message.ephemeral else "") + "↳ " + text
            controls = " ".join(f"[{button.label}]" for button in message.buttons)
            if message.menu is not None:
                controls += (" " if controls else "") + "{" + " | ".join(message.menu.options) + "}"
            blocks.append(text + ("\n" + controls if controls else ""))
        return "\n".join(blocks)
