"""``TelegramPlatform``: the ``ChatPlatform`` the stream renderer drives, over
python-telegram-bot's ``Bot``.

Called from trio (the reactor); every call crosses into PTB's asyncio world through
``trio_asyncio.aio_as_trio``, so it must run inside ``trio_asyncio.open_loop()`` (the
Telegram host opens it). What it keeps:

- **Where**: a Spindle thread is a private chat (``tg:<chat>``), a forum topic
  (``tg:<chat>:<message_thread_id>``) or a plain group (``tg:<chat>``);
  ``telegram_thread_id`` and ``parse_thread_id`` are the one place that spells it.
- **Markup never rejected**: text goes out in HTML parse mode made by
  ``effects.telegram_markup`` with link previews off; if Telegram refuses it all the same
  ("can't parse entities"), the same call is made again as plain text and counted
  (``markup_fallbacks``). Telegram counts its 4096 limit in UTF-16 units (an emoji is
  two), and so does the renderer when it splits (``length_unit="utf16"``); a text sent
  over the limit all the same (a long name in a mention) goes as more messages, never
  cut. Only an edit over the limit, which the renderer never asks for, is cut with "…"
  and counted (``truncated``).
- **Paced per chat**: edits in one chat are at least ``limits.min_edit_interval_s`` apart
  (about one a second, Telegram's per-chat pace) whichever thread or message they are
  for; the renderer's lock makes the deltas that arrive meanwhile one later edit.
- **Buttons**: ``Button``s and a question's ``SelectMenu`` (one button per option) become
  an inline keyboard; ``callback_data`` is the button's action, or for one longer than
  Telegram's 64 bytes a short ``#<digest>`` that ``callback_action`` maps back (in memory:
  after a restart such a click is "no longer pending"). Telegram drops a message's keyboard
  on any edit that does not repeat it, so the keyboard of each message is remembered and
  sent again with an edit that keeps it.
- **Replies** to a command answer its message (``reply_parameters``); Telegram has no
  ephemeral messages, so an ephemeral reply is an ordinary one.
- Failures become ``PlatformError``: ``RetryAfter`` (429) carries ``retry_after``;
  timeouts, network errors and 5xx are ``retryable``; other refusals are permanent. An
  edit that changes nothing ("message is not modified") and deleting a message that is
  gone are successes.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import TypeVar

import trio
import trio_asyncio
from telegram import (
    Bot,
    InlineKeyboardButton,
    InlineKeyboardMarkup,
    InputFile,
    LinkPreviewOptions,
    ReplyParameters,
)
from telegram.constants import ChatAction, ParseMode
from telegram.error import BadRequest, Forbidden, InvalidToken, NetworkError, RetryAfter

from threadspindle.effects.chunking import EMPTY_OPTION, split_message
from threadspindle.effects.platform import PlatformError, PlatformLimits, SelectMenu
from threadspindle.effects.telegram_markup import (
    plain_text,
    to_telegram_html,
    truncate_utf16,
    utf16_len,
    visible_text,
)
from threadspindle.runtime.core.effect_types import Button

__all__ = [
    "TELEGRAM_LIMITS",
    "TelegramPlatform",
    "callback_option",
    "parse_thread_id",
    "telegram_thread_id",
]

_log = logging.getLogger(__name__)

T = TypeVar("T")

MAX_TEXT = 4096  # UTF-16 units after entity parsing
MAX_CALLBACK_BYTES = 64
MAX_OPTION_LABEL = 64  # a question option's button text, as sent
MAX_MENU_OPTIONS = 50  # the option buttons of one question's keyboard
_REMEMBERED = 1024

TELEGRAM_LIMITS = PlatformLimits(
    char_limit=MAX_TEXT,
    split_margin=96,
    supports_edit=True,
    min_edit_interval_s=1.0,
    typing_refresh_s=4.5,  # Telegram shows "typing" for 5 s
    subtext=False,
    wrap_links=False,  # previews are turned off per message instead
    length_unit="utf16",
    option_chars=MAX_OPTION_LABEL,
    menu_options=MAX_MENU_OPTIONS,
)
SPLIT_MARGIN = 96  # the room a piece of an over-long text keeps for names in mentions

_THREAD = re.compile(r"^tg:(-?\d+)(?::(\d+))?$")


def telegram_thread_id(chat_id: int, topic: int | None = None) -> str:
    """The Spindle thread of a Telegram chat, or of one forum topic of it."""
    return f"tg:{chat_id}" if topic is None else f"tg:{chat_id}:{topic}"


def parse_thread_id(thread_id: str) -> tuple[int, int | None]:
    """``(chat_id, topic or None)``; ``ValueError`` for an id that is not Telegram's."""
    match = _THREAD.match(thread_id)
    if match is None:
        raise ValueError(f"not a Telegram thread id: {thread_id!r}")
    topic = match.group(2)
    return int(match.group(1)), int(topic) if topic is not None else None


def callback_option(custom_id: str, index: int) -> str:
    """The callback data of a question menu's option ``index``."""
    return f"{custom_id}#{index}"


def _seconds(value: int | float | timedelta) -> float:
    return value.total_seconds() if isinstance(value, timedelta) else float(value)


def _source_message(action_id: str) -> int | None:
    """The message a command came in (``tgm-<chat>-<message id>``), to reply to."""
    if action_id.startswith("tgm-"):
        tail = action_id.rsplit("-", 1)[-1]
        return int(tail) if tail.isdigit() else None
    return None


class TelegramPlatform:
    """A ``ChatPlatform`` over an initialized ``telegram.Bot``."""

    def __init__(
        self,
        bot: Bot,
        limits: PlatformLimits | None = None,
        *,
        clock: Callable[[], float] = trio.current_time,
    ) -> None:
        self.bot = bot
        self.limits = limits or TELEGRAM_LIMITS
        self.streams_append_only = False  # messages are edited in place
        self._clock = clock
        self.names: OrderedDict[str, str] = OrderedDict()  # user id -> name, for mentions
        self._keyboards: OrderedDict[tuple[int, int], InlineKeyboardMarkup] = OrderedDict()
        self._long_callbacks: OrderedDict[str, str] = OrderedDict()
        self._next_edit: dict[int, float] = {}  # chat -> when its next edit may go
        self._callbacks: OrderedDict[str, str] = OrderedDict()  # action id -> query id
        self.calls = 0
        self.markup_fallbacks = 0  # texts Telegram refused as HTML, sent as plain text
        self.truncated = 0  # texts cut to Telegram's limit (edits only)
        self.split_sends = 0  # texts over the limit sent as more messages

    # --- what ingress tells it ----------------------------------------------------------

    def remember_name(self, user_id: int | str, name: str) -> None:
        self.names[str(user_id)] = name
        self.names.move_to_end(str(user_id))
        while len(self.names) > _REMEMBERED:
            self.names.popitem(last=False)

    def remember_callback(self, action_id: str, callback_query_id: str) -> None:
        """A button press whose answer is the core's reply to ``action_id``."""
        self._callbacks[action_id] = callback_query_id
        while len(self._callbacks) > _REMEMBERED:
            self._callbacks.popitem(last=False)

    def callback_action(self, data: str) -> str | None:
        """The action a button's callback data stands for (None: a digest it forgot)."""
        if data.startswith("#"):
            return self._long_callbacks.get(data)
        return data

    # --- ChatPlatform -----------------------------------------------------------------

    async def send(
        self,
        channel_id: str,
        text: str,
        *,
        buttons: tuple[Button, ...] = (),
        menu: SelectMenu | None = None,
        nonce: str | None = None,  # Telegram has no nonce; a lost answer may double a send
    ) -> str:
        chat, topic = parse_thread_id(channel_id)
        markup = self._keyboard(buttons, menu)
        message_id = await self._send(chat, topic, text, markup, reply_to=None)
        return str(message_id)

    async def send_file(self, channel_id: str, filename: str, data: bytes, caption: str) -> str:
        """``sendDocument`` (a multipart upload) in the chat's topic, the caption plain."""
        chat, topic = parse_thread_id(channel_id)

        async def send() -> int:
            message = await self.bot.send_document(
                chat_id=chat,
                document=InputFile(data, filename=filename),
                caption=caption[:1024],
                message_thread_id=topic,
            )
            return message.message_id

        return str(await self._call(send))

    async def edit(
        self,
        channel_id: str,
        message_id: str,
        text: str,
        *,
        buttons: tuple[Button, ...] | None = None,
    ) -> None:
        if not message_id.isdigit():
            return  # a reply given as a button-press notification: nothing to edit
        chat, _ = parse_thread_id(channel_id)
        key = (chat, int(message_id))
        markup = self._keyboards.get(key) if buttons is None else self._keyboard(buttons, None)
        await self._pace(chat)

        async def edit(body: str, mode: str | None) -> None:
            await self.bot.edit_message_text(
                body,
                chat_id=chat,
                message_id=int(message_id),
                parse_mode=mode,
                reply_markup=markup,
                link_preview_options=LinkPreviewOptions(is_disabled=True),
            )

        await self._with_fallback(text, edit)
        self._remember_keyboard(key, markup)

    async def delete(self, channel_id: str, message_id: str) -> None:
        if not message_id.isdigit():
            return
        chat, _ = parse_thread_id(channel_id)

        async def delete() -> None:
            try:
                await self.bot.delete_message(chat_id=chat, message_id=int(message_id))
            except BadRequest as error:
                if "not found" not in str(error).lower():
                    raise  # already gone: deleting is idempotent

        await self._call(delete)
        self._keyboards.pop((chat, int(message_id)), None)

    async def typing(self, channel_id: str) -> None:
        chat, topic = parse_thread_id(channel_id)

        async def typing() -> None:
            await self.bot.send_chat_action(
                chat_id=chat, action=ChatAction.TYPING, message_thread_id=topic
            )

        await self._call(typing)

    async def rename_thread(self, channel_id: str, title: str) -> None:
        chat, topic = parse_thread_id(channel_id)
        if topic is None:
            return  # a private chat or a group without topics has no name of its own

        async def rename() -> None:
            await self.bot.edit_forum_topic(chat_id=chat, message_thread_id=topic, name=title[:128])

        await self._call(rename)

    async def reply(
        self,
        channel_id: str,
        action_id: str,
        text: str,
        *,
        ephemeral: bool = False,
        buttons: tuple[Button, ...] = (),
    ) -> str:
        callback = self._callbacks.pop(action_id, None)
        if callback is not None and not buttons:
            # A button press: answered as a notification over the chat.
            try:
                await self.answer_callback(callback, text)
                return f"callback-{callback}"
            except PlatformError as error:
                if error.retryable:
                    self._callbacks[action_id] = callback
                    raise
                # Too old to answer: say it in the chat instead.
        chat, topic = parse_thread_id(channel_id)
        markup = self._keyboard(buttons, None)
        message_id = await self._send(
            chat, topic, text, markup, reply_to=_source_message(action_id)
        )
        return str(message_id)

    # --- what ingress asks of it ---------------------------------------------------------

    async def say(self, channel_id: str, text: str, *, reply_to: int | None = None) -> str:
        """A message of ingress's own (help, a refusal, a refused value)."""
        chat, topic = parse_thread_id(channel_id)
        return str(await self._send(chat, topic, text, None, reply_to=reply_to))

    async def create_topic(self, chat_id: int, name: str) -> int:
        """A new forum topic; its ``message_thread_id``."""

        async def create() -> int:
            topic = await self.bot.create_forum_topic(chat_id=chat_id, name=name[:128])
            return topic.message_thread_id

        return await self._call(create)

    async def answer_callback(
        self, callback_query_id: str, text: str | None, *, alert: bool = False
    ) -> None:
        async def answer() -> None:
            await self.bot.answer_callback_query(
                callback_query_id, text=text[:200] if text else None, show_alert=alert
            )

        await self._call(answer)

    # --- the calls -------------------------------------------------------------------------

    async def _send(
        self,
        chat: int,
        topic: int | None,
        text: str,
        markup: InlineKeyboardMarkup | None,
        *,
        reply_to: int | None,
    ) -> int:
        sent: list[int] = []
        pieces = self._pieces(text)
        for index, piece in enumerate(pieces):
            last = index == len(pieces) - 1
            await self._send_one(chat, topic, piece, markup if last else None, reply_to, sent)
        self._next_edit[chat] = max(
            self._next_edit.get(chat, 0.0), self._clock() + self.limits.min_edit_interval_s / 2
        )
        self._remember_keyboard((chat, sent[-1]), markup)
        return sent[-1]

    def _pieces(self, text: str) -> list[str]:
        """``text`` as the messages it needs: one, unless what Telegram would show of it
        is over its limit; then more (the last one carries the keyboard), nothing cut."""
        if utf16_len(visible_text(to_telegram_html(text, self.names))) <= MAX_TEXT:
            return [text]
        self.split_sends += 1
        pieces = split_message(text, MAX_TEXT - SPLIT_MARGIN, wrap_links=False, unit="utf16")
        return pieces or [text]

    async def _send_one(
        self,
        chat: int,
        topic: int | None,
        text: str,
        markup: InlineKeyboardMarkup | None,
        reply_to: int | None,
        sent: list[int],
    ) -> None:
        async def send(body: str, mode: str | None) -> None:
            message = await self.bot.send_message(
                chat_id=chat,
                text=body,
                message_thread_id=topic,
                parse_mode=mode,
                reply_markup=markup,
                link_preview_options=LinkPreviewOptions(is_disabled=True),
                reply_parameters=(
                    ReplyParameters(message_id=reply_to, allow_sending_without_reply=True)
                    if reply_to is not None
                    else None
                ),
            )
            sent.append(message.message_id)

        await self._with_fallback(text, send)

    async def _with_fallback(
        self, text: str, call: Callable[[str, str | None], Awaitable[None]]
    ) -> None:
        """``call(body, parse_mode)`` with the HTML of ``text``; again as plain text when
        Telegram cannot parse it. Over-long text (only an edit: a send is split first)
        goes as plain text cut to the limit, the last resort."""
        html = to_telegram_html(text, self.names)
        if utf16_len(visible_text(html)) > MAX_TEXT:
            self.truncated += 1
            _log.warning("a Telegram edit over %d UTF-16 units was cut", MAX_TEXT)
            await self._call(lambda: call(truncate_utf16(visible_text(html), MAX_TEXT), None))
            return
        try:
            await self._call(lambda: call(html, ParseMode.HTML))
        except PlatformError as error:
            if "can't parse entities" not in str(error).lower():
                raise
            self.markup_fallbacks += 1
            _log.warning("Telegram refused the markup (%s); sending plain text", error)
            plain = truncate_utf16(plain_text(text, self.names), MAX_TEXT)
            await self._call(lambda: call(plain, None))

    async def _pace(self, chat: int) -> None:
        now = self._clock()
        due = self._next_edit.get(chat, 0.0)
        if due > now:
            await trio.sleep(due - now)
        self._next_edit[chat] = max(due, now) + self.limits.min_edit_interval_s

    async def _call(self, fn: Callable[[], Awaitable[T]]) -> T:
        self.calls += 1
        try:
            return await trio_asyncio.aio_as_trio(fn)()  # type: ignore[no-any-return]
        except RetryAfter as error:
            raise PlatformError(str(error), retry_after=_seconds(error.retry_after)) from error
        except BadRequest as error:
            if "message is not modified" in str(error).lower():
                return None  # type: ignore[return-value]  # the edit is already there
            raise PlatformError(f"Telegram refused: {error}") from error
        except (Forbidden, InvalidToken) as error:
            raise PlatformError(f"Telegram refused: {error}") from error
        except NetworkError as error:  # timeouts, connection errors, 5xx
            raise PlatformError(f"Telegram unreachable: {error}", retryable=True) from error
        except OSError as error:
            raise PlatformError(f"Telegram unreachable: {error!r}", retryable=True) from error

    # --- keyboards ----------------------------------------------------------------------------

    def _callback_data(self, action: str) -> str:
        if len(action.encode()) <= MAX_CALLBACK_BYTES and not action.startswith("#"):
            return action
        digest = "#" + hashlib.blake2b(action.encode(), digest_size=16).hexdigest()
        self._long_callbacks[digest] = action
        while len(self._long_callbacks) > _REMEMBERED:
            self._long_callbacks.popitem(last=False)
        return digest

    def _keyboard(
        self, buttons: tuple[Button, ...], menu: SelectMenu | None
    ) -> InlineKeyboardMarkup | None:
        rows: list[list[InlineKeyboardButton]] = []
        if buttons:
            rows.append(
                [
                    InlineKeyboardButton(
                        button.label[:64], callback_data=self._callback_data(button.action)
                    )
                    for button in buttons
                ]
            )
        if menu is not None:
            for index, option in enumerate(menu.options[:MAX_MENU_OPTIONS]):
                data = self._callback_data(callback_option(menu.custom_id, index))
                label = option[:MAX_OPTION_LABEL].strip() or EMPTY_OPTION
                rows.append([InlineKeyboardButton(label, callback_data=data)])
        return InlineKeyboardMarkup(rows) if rows else None

    def _remember_keyboard(self, key: tuple[int, int], markup: InlineKeyboardMarkup | None) -> None:
        if markup is None:
            self._keyboards.pop(key, None)
            return
        self._keyboards[key] = markup
        while len(self._keyboards) > _REMEMBERED:
            self._keyboards.popitem(last=False)
