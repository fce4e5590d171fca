"""The small chat-platform interface the stream renderer drives (Discord, console, fakes).

A platform sends, edits and deletes messages in a channel (a thread), shows typing, and
answers commands. Its ``limits`` tell the renderer how to pace and split. Errors are
``PlatformError``: ``retry_after`` for rate limits (honoured), ``retryable`` for 5xx and
disconnects (retried with backoff), neither for a permanent refusal.
"""

from __future__ import annotations

from typing import Protocol

from threadspindle.effects.chunking import LengthUnit
from threadspindle.runtime.core.effect_types import Button
from threadspindle.runtime.core.frozen import Frozen

__all__ = ["ChatPlatform", "PlatformError", "PlatformLimits", "SelectMenu"]


class PlatformLimits(Frozen):
    """What a platform allows, as the renderer needs to know it. The renderer writes one
    chat dialect (Discord markdown); a platform whose markup differs says so here and
    translates the rest itself (Telegram: ``effects.telegram_markup``)."""

    char_limit: int = 2000
    split_margin: int = 100  # split before char_limit - split_margin
    # How the platform counts char_limit: code points (Discord: its API counts them) or
    # UTF-16 units (Telegram; an emoji is two). The renderer splits counting the same way,
    # so no message is ever over the limit and cut.
    length_unit: LengthUnit = "chars"
    supports_edit: bool = True
    min_edit_interval_s: float = 0.5  # per message; a platform may pace a whole chat too
    typing_refresh_s: float = 8.0
    # The platform shows ``-# `` subtext lines (Discord). Without it they are shown as the
    # platform can (Telegram: italics), so a renderer may prefer shorter notes there.
    subtext: bool = True
    # Bare links need wrapping in ``<>`` to show no embed (Discord). False: the platform
    # turns previews off itself and a wrapped link would show its brackets.
    wrap_links: bool = True
    # Thread renames (the agent's session title): at most this many per window (Discord:
    # 2 per 10 minutes per thread); more are coalesced to the latest title.
    renames_per_window: int = 2
    rename_window_s: float = 600.0
    # Consecutive streamed text, tool cards and thinking may share one message (a platform
    # without edits, WhatsApp): what is ready waits until ``min_edit_interval_s`` has
    # passed since the channel's last send and goes out joined, so a busy run is a few
    # messages, not one per step. Prompts, notices and footers always stand alone.
    joins_messages: bool = False
    # A question's menu: the characters of an option's label it shows, and the options it
    # holds (Discord's select: 100 and 25). A question with an option cut, dropped or
    # empty lists its options in full in its text.
    option_chars: int = 100
    menu_options: int = 25


class SelectMenu(Frozen):
    custom_id: str
    options: tuple[str, ...]
    multiple: bool = False


class PlatformError(Exception):
    """``global_limit``: the 429 was for the whole connection (Discord's global limit),
    not for one route or channel."""

    def __init__(
        self,
        message: str,
        *,
        retryable: bool = False,
        retry_after: float | None = None,
        global_limit: bool = False,
    ) -> None:
        super().__init__(message)
        self.retryable = retryable or retry_after is not None
        self.retry_after = retry_after
        self.global_limit = global_limit


class ChatPlatform(Protocol):
    limits: PlatformLimits

    # A terminal that only appends (the plain console): streamed text must only grow by
    # whole lines (no temporary fence closers, no rewritten links, no half lines).
    @property
    def streams_append_only(self) -> bool: ...

    async def send(
        self,
        channel_id: str,
        text: str,
        *,
        buttons: tuple[Button, ...] = (),
        menu: SelectMenu | None = None,
        nonce: str | None = None,
    ) -> str:
        """Post a message; returns its platform id. ``nonce`` lets the platform dedupe."""
        ...

    async def edit(
        self,
        channel_id: str,
        message_id: str,
        text: str,
        *,
        buttons: tuple[Button, ...] | None = None,
    ) -> None: ...

    async def delete(self, channel_id: str, message_id: str) -> None: ...

    async def typing(self, channel_id: str) -> None:
        """Show the typing indicator once (platforms expire it after a few seconds)."""
        ...

    async def rename_thread(self, channel_id: str, title: str) -> None:
        """Give the thread (channel) a new name; a platform without named threads does
        nothing (a Telegram private chat)."""
        ...

    async def reply(
        self,
        channel_id: str,
        action_id: str,
        text: str,
        *,
        ephemeral: bool = False,
        buttons: tuple[Button, ...] = (),
    ) -> str:
        """Answer the command that produced ``action_id`` (an interaction on Discord)."""
        ...

    async def send_file(
        self, channel_id: str, filename: str, data: bytes, caption: str
    ) -> str | None:
        """Post ``data`` as a file attachment named ``filename`` with ``caption`` (a short
        line); returns the message id, or None where the platform takes no files (the
        console, WhatsApp, the web chat): the caller shows the text instead."""
        ...
