"""``SlackPlatform``: the ``ChatPlatform`` the stream renderer drives, over slack-sdk's
``AsyncWebClient``.

Called from trio (the reactor); every call crosses into the asyncio world through
``trio_asyncio.aio_as_trio``, so it must run inside ``trio_asyncio.open_loop()`` (the
platforms host opens it). What it keeps:

- **Where**: a Spindle thread is a Slack thread, ``sl:<channel>:<thread_ts>``
  (``slack_thread_id``/``parse_thread_id`` are the one place that spells it); every
  message goes into it with ``thread_ts``. Message ids are Slack's ``ts``.
- **Markup**: the text goes out as mrkdwn (``effects.slack_markup``), link unfurls off, in
  ``section`` blocks of at most 3,000 characters (Slack's limit for one) with the buttons
  in an ``actions`` block; ``text`` carries the same mrkdwn for notifications. If Slack
  refuses the blocks all the same (``invalid_blocks``, ``msg_too_long``), the call is made
  again as plain text (``slack_markup.plain_text``, cut to fit) and counted
  (``markup_fallbacks``).
- **Paced per channel**: edits (``chat.update``) in one channel are at least
  ``limits.min_edit_interval_s`` apart, whichever thread or message they are for; the
  renderer's lock makes the deltas that arrive meanwhile one later edit.
- **Buttons**: each ``Button`` is a Block Kit button whose ``value`` is its action; a
  question's ``SelectMenu`` is a ``static_select`` whose options' values are
  ``callback_option(custom_id, index)``. The buttons of each message are remembered so an
  edit that does not name them keeps them (``chat.update`` is always sent whole).
- **Typing**: Slack has no bot typing indicator in threads; ``assistant.threads.setStatus``
  shows a status line where the app is an assistant app. Where Slack refuses it, the
  channel is remembered and the status is a message of Spindle's own instead: a
  "working…" line in the thread, edited with the time worked at each refresh (paced as
  every edit), deleted (``chat.delete``) as soon as the run's output is posted in the thread
  or typing goes off (``stop_typing``), so it never stays behind the footer. Once output
  has taken it away it is not posted again for half ``limits.typing_refresh_s``, so a busy
  run costs at most one post and one delete per refresh interval, not two per output.
- **Replies** to a command go into its thread; an ephemeral one goes to the user who gave
  it (``chat.postEphemeral``) when ingress remembered who that was.
- Failures become ``PlatformError``: a 429 carries ``Retry-After``; 5xx, timeouts and
  network errors are ``retryable``; other refusals are permanent. Deleting a message that
  is gone is a success.
"""

from __future__ import annotations

import logging
import re
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

import aiohttp
import trio
import trio_asyncio
from slack_sdk.errors import SlackApiError, SlackRequestError
from slack_sdk.web.async_client import AsyncWebClient

from threadspindle.effects.chunking import EMPTY_OPTION
from threadspindle.effects.platform import PlatformError, PlatformLimits, SelectMenu
from threadspindle.effects.request_budget import CallKind
from threadspindle.effects.slack_markup import plain_text, split_sections, to_mrkdwn
from threadspindle.runtime.core.effect_types import Button

__all__ = [
    "SLACK_LIMITS",
    "SlackPlatform",
    "callback_option",
    "is_working_line",
    "parse_thread_id",
    "slack_thread_id",
]

_log = logging.getLogger(__name__)

T = TypeVar("T")

MAX_SECTION = 3000  # characters in one section block
MAX_TEXT = 40_000  # characters in a message's text (Slack truncates beyond)
MAX_OPTION_CHARS = 75  # a static select option's text
MAX_MENU_OPTIONS = 100  # a static select's options
BUTTON_PREFIX = "spindle:"  # every action_id Spindle makes starts so
_REMEMBERED = 1024
_MARKUP_ERRORS = ("invalid_blocks", "invalid_blocks_format", "msg_too_long", "invalid_arguments")
_RETRYABLE_ERRORS = (
    "internal_error",
    "fatal_error",
    "service_unavailable",
    "request_timeout",
    "ratelimited",
)

SLACK_LIMITS = PlatformLimits(
    char_limit=MAX_SECTION,
    split_margin=200,  # mrkdwn escapes (&amp;) make the sent text a little longer
    supports_edit=True,
    min_edit_interval_s=1.2,  # chat.update is Tier 3 (about 50 a minute)
    typing_refresh_s=10.0,  # an assistant status stays until the next reply
    subtext=False,
    wrap_links=False,  # unfurls are turned off per message instead
    # Slack does not say how it counts; UTF-16 units are never fewer than characters, so
    # splitting by them keeps an emoji-heavy text under the limit either way.
    length_unit="utf16",
    option_chars=MAX_OPTION_CHARS,
    menu_options=MAX_MENU_OPTIONS,
)

WORKING = "_working…_"  # the status line where Slack refuses the assistant status


@dataclass
class _WorkingLine:
    """A thread's "working…" message: its ts, and since when the run has been shown working."""

    ts: str
    since: float


def working_text(seconds: float) -> str:
    """The working line after ``seconds`` of work (the bare line for the first few)."""
    whole = int(seconds)
    if whole < 5:
        return WORKING
    spent = f"{whole // 60}:{whole % 60:02d}" if whole >= 60 else f"{whole}s"
    return f"_working… {spent}_"


_WORKING_LINE = re.compile(r"^_working…( (\d+s|\d+:\d\d))?_$")


def is_working_line(text: str) -> bool:
    """Whether a message's text is a working line (one a killed Spindle may have left)."""
    return bool(_WORKING_LINE.match(text))


_THREAD = re.compile(r"^sl:([A-Z0-9]+):(\d+\.\d+)$")
_TS = re.compile(r"^\d+\.\d+$")


def slack_thread_id(channel: str, thread_ts: str) -> str:
    """The Spindle thread of a Slack thread (its parent message's ``ts``)."""
    return f"sl:{channel}:{thread_ts}"


def parse_thread_id(thread_id: str) -> tuple[str, str]:
    """``(channel, thread_ts)``; ``ValueError`` for an id that is not Slack's."""
    match = _THREAD.match(thread_id)
    if match is None:
        raise ValueError(f"not a Slack thread id: {thread_id!r}")
    return match.group(1), match.group(2)


def callback_option(custom_id: str, index: int) -> str:
    """The value of a question menu's option ``index``."""
    return f"{custom_id}#{index}"


def _retry_after(error: SlackApiError) -> float:
    headers = getattr(error.response, "headers", None) or {}
    for name in ("Retry-After", "retry-after"):
        value = headers.get(name)
        if value is not None:
            if isinstance(value, list):
                value = value[0]
            try:
                return max(float(value), 0.0)
            except ValueError:
                break
    return 1.0


class SlackPlatform:
    """A ``ChatPlatform`` over an ``AsyncWebClient`` made on the asyncio side."""

    def __init__(
        self,
        client: AsyncWebClient,
        limits: PlatformLimits | None = None,
        *,
        clock: Callable[[], float] = trio.current_time,
    ) -> None:
        self.client = client
        self.limits = limits or SLACK_LIMITS
        self.streams_append_only = False  # messages are edited in place
        self._clock = clock
        self._buttons: OrderedDict[tuple[str, str], list[dict[str, Any]]] = OrderedDict()
        self._next_edit: dict[str, float] = {}  # channel -> when its next edit may go
        self._authors: OrderedDict[str, str] = OrderedDict()  # action id -> user, for replies
        self._no_status: set[str] = set()  # channels where assistant status is refused
        self._no_title: set[str] = set()  # channels where assistant titles are refused
        # Asked before each call made for the working line inside a typing or send call:
        # the connection's request budget lets it go (and counts it) only with a token to
        # spare (``ThreadRenderers.attach``); refused, the line does without it for now.
        self.on_inside_call: Callable[[str, CallKind], bool] | None = None
        self._working: dict[str, _WorkingLine] = {}  # thread id -> its working line
        self._stale: dict[str, set[str]] = {}  # thread id -> working lines not deleted yet
        self._quiet_until: dict[str, float] = {}  # thread id -> no working line before
        self._working_locks: dict[str, trio.Lock] = {}
        self.calls = 0
        self.markup_fallbacks = 0  # texts Slack refused as blocks, sent as plain text
        self.truncated = 0  # texts cut to Slack's limit

    # --- what ingress tells it ----------------------------------------------------------

    def remember_author(self, action_id: str, user_id: str) -> None:
        """Who gave the command ``action_id``: an ephemeral reply goes to them alone."""
        self._authors[action_id] = user_id
        while len(self._authors) > _REMEMBERED:
            self._authors.popitem(last=False)

    # --- ChatPlatform -----------------------------------------------------------------

    async def send(
        self,
        channel_id: str,
        text: str,
        *,
        buttons: tuple[Button, ...] = (),
        menu: SelectMenu | None = None,
        nonce: str | None = None,  # Slack has no nonce; a lost answer may double a send
    ) -> str:
        channel, thread_ts = parse_thread_id(channel_id)
        elements = self._elements(buttons, menu)
        await self._output_arrives(channel_id)
        return await self._post(channel, thread_ts, text, elements)

    async def send_file(self, channel_id: str, filename: str, data: bytes, caption: str) -> str:
        """``files_upload_v2``: ``files.getUploadURLExternal``, the bytes to its URL, then
        ``files.completeUploadExternal`` sharing it into the thread with the caption.
        Returns the file's id (no message ts comes back: it is never edited)."""
        channel, thread_ts = parse_thread_id(channel_id)

        async def upload() -> Any:
            try:
                return await self.client.files_upload_v2(
                    channel=channel,
                    thread_ts=thread_ts,
                    content=data,
                    filename=filename,
                    title=filename,
                    initial_comment=caption,
                )
            except SlackRequestError as error:  # the upload URL refused the bytes
                raise PlatformError(f"Slack upload failed: {error}", retryable=True) from error

        response = await self._call(upload)
        file = response.get("file") if response is not None else None
        return str(file.get("id") if isinstance(file, dict) else "") or f"file:{filename}"

    async def edit(
        self,
        channel_id: str,
        message_id: str,
        text: str,
        *,
        buttons: tuple[Button, ...] | None = None,
    ) -> None:
        if not _TS.match(message_id):
            return  # an ephemeral reply: Slack lets nobody edit it
        channel, _ = parse_thread_id(channel_id)
        key = (channel, message_id)
        elements = self._buttons.get(key, []) if buttons is None else self._elements(buttons, None)
        await self._pace(channel)

        async def update(body: str, blocks: list[dict[str, Any]]) -> Any:
            return await self.client.chat_update(
                channel=channel, ts=message_id, text=body, blocks=blocks
            )

        await self._with_fallback(text, elements, update)
        self._remember_buttons(key, elements)

    async def delete(self, channel_id: str, message_id: str) -> None:
        if not _TS.match(message_id):
            return
        channel, _ = parse_thread_id(channel_id)

        async def delete() -> None:
            try:
                await self.client.chat_delete(channel=channel, ts=message_id)
            except SlackApiError as error:
                if error.response.get("error") != "message_not_found":
                    raise  # already gone: deleting is idempotent

        await self._call(delete)
        self._buttons.pop((channel, message_id), None)

    async def rename_thread(self, channel_id: str, title: str) -> None:
        """An ordinary Slack thread has no name of its own, and its root is usually the
        user's message (a bot cannot edit it; a new message per title would be noise): the
        title goes to ``assistant.threads.setTitle``, the name Slack shows for a thread of an
        assistant app (its history list and header). Where Slack refuses it (not an
        assistant app, not an assistant thread) the channel is remembered and nothing is
        shown there."""
        channel, thread_ts = parse_thread_id(channel_id)
        if channel in self._no_title:
            await trio.lowlevel.checkpoint()
            return

        async def set_title() -> None:
            await self.client.assistant_threads_setTitle(
                channel_id=channel, thread_ts=thread_ts, title=title
            )

        try:
            await self._call(set_title)
        except PlatformError as error:
            if error.retryable:
                raise
            self._no_title.add(channel)
            _log.info("no assistant thread title in %s (%s): not shown", channel, error)

    async def typing(self, channel_id: str) -> None:
        channel, thread_ts = parse_thread_id(channel_id)
        if channel not in self._no_status:

            async def status() -> None:
                await self.client.assistant_threads_setStatus(
                    channel_id=channel, thread_ts=thread_ts, status="is working…"
                )

            try:
                await self._call(status)
                return
            except PlatformError as error:
                if error.retryable:
                    raise
                # Not an assistant app here: Slack has no other bot typing indicator.
                self._no_status.add(channel)
                _log.info("no assistant status in %s (%s): a working line", channel, error)
        await self._show_working(channel_id)

    async def stop_typing(self, channel_id: str) -> None:
        """Typing went off: the thread's working line (if any) is deleted. (An assistant
        status clears itself with the app's next reply.)"""
        async with self._working_lock(channel_id):
            await self._remove_working(channel_id)

    # --- the working line ---------------------------------------------------------------

    def _working_lock(self, channel_id: str) -> trio.Lock:
        lock = self._working_locks.get(channel_id)
        if lock is None:
            lock = self._working_locks[channel_id] = trio.Lock()
        return lock

    async def _show_working(self, channel_id: str) -> None:
        """Post the working line, or edit it with the time worked; nothing just after an
        output post (the refresh after it would cost a post and a delete per output)."""
        async with self._working_lock(channel_id):
            await self._remove_stale(channel_id)
            now = self._clock()
            line = self._working.get(channel_id)
            if line is None:
                if now < self._quiet_until.get(channel_id, 0.0):
                    return
                if not self._inside(channel_id, "send"):
                    return  # no token to spare: no working line this time
                channel, thread_ts = parse_thread_id(channel_id)
                ts = await self._post(channel, thread_ts, WORKING, [])
                self._working[channel_id] = _WorkingLine(ts, now)
                return
            if not self._inside(channel_id, "edit"):
                return  # no token to spare: the time worked is shown at the next refresh
            try:
                await self.edit(channel_id, line.ts, working_text(now - line.since), buttons=())
            except PlatformError as error:
                if not error.retryable:  # deleted by someone: the next refresh posts anew
                    self._working.pop(channel_id, None)
                raise

    def _inside(self, channel_id: str, kind: CallKind) -> bool:
        return self.on_inside_call is None or self.on_inside_call(channel_id, kind)

    async def _output_arrives(self, channel_id: str) -> None:
        """Output goes into the thread: its working line goes first, and is not posted again
        for half a refresh interval (so the refresh right after this post skips it)."""
        async with self._working_lock(channel_id):  # not while a working line is posted
            if channel_id not in self._working and channel_id not in self._stale:
                return
            await self._remove_working(channel_id)
            self._quiet_until[channel_id] = self._clock() + self.limits.typing_refresh_s / 2

    async def _remove_working(self, channel_id: str) -> None:
        line = self._working.pop(channel_id, None)
        if line is not None:
            self._stale.setdefault(channel_id, set()).add(line.ts)
        await self._remove_stale(channel_id)

    async def _remove_stale(self, channel_id: str) -> None:
        """Delete the thread's working lines; one Slack would not delete now (a 5xx, a
        rate limit) is kept and deleted at the next chance. Never raised: the output must
        not wait on it."""
        for ts in sorted(self._stale.get(channel_id, ())):
            if not self._inside(channel_id, "delete"):
                return  # no token to spare: deleted at the next chance, as after a 5xx
            try:
                await self.delete(channel_id, ts)
            except PlatformError as error:
                if error.retryable:
                    _log.info("working line %s in %s not deleted yet: %s", ts, channel_id, error)
                    return
                # Refused for good: trying again would cost a call per output for nothing.
                _log.warning("working line %s in %s cannot be deleted: %s", ts, channel_id, error)
            self._stale[channel_id].discard(ts)
        self._stale.pop(channel_id, None)

    async def reply(
        self,
        channel_id: str,
        action_id: str,
        text: str,
        *,
        ephemeral: bool = False,
        buttons: tuple[Button, ...] = (),
    ) -> str:
        channel, thread_ts = parse_thread_id(channel_id)
        user = self._authors.get(action_id)
        if ephemeral and user is not None and not buttons:
            return "ephemeral-" + await self.say_to(channel, thread_ts, user, text)
        await self._output_arrives(channel_id)
        return await self._post(channel, thread_ts, text, self._elements(buttons, None))

    # --- what ingress asks of it ---------------------------------------------------------

    async def say(self, channel: str, thread_ts: str | None, text: str) -> str:
        """A message of ingress's own (help, a hint), in a thread or top-level; its ts."""
        return await self._post(channel, thread_ts, text, [])

    async def say_to(self, channel: str, thread_ts: str | None, user: str, text: str) -> str:
        """A message only ``user`` sees (a refusal, a refused value)."""

        async def ephemeral() -> str:
            response = await self.client.chat_postEphemeral(
                channel=channel,
                user=user,
                text=plain_text(text)[:MAX_SECTION],
                thread_ts=thread_ts,
            )
            return str(response.get("message_ts", ""))

        return await self._call(ephemeral)

    async def replies_page(
        self, channel: str, thread_ts: str, oldest: float, cursor: str | None = None
    ) -> tuple[list[dict[str, Any]], str | None]:
        """One page of the thread's messages newer than ``oldest``, oldest first (the
        parent first when Slack includes it), and the cursor of the next page (None: the
        last) — ``conversations.replies``. Read a page at a time, so that a thread with
        any number of replies is never held whole."""
        response = await self._call(
            partial(
                self.client.conversations_replies,
                channel=channel,
                ts=thread_ts,
                oldest=f"{max(oldest, 0.0):.6f}",
                limit=200,
                cursor=cursor,
            )
        )
        return list(response.get("messages") or []), _next_cursor(response)

    async def history_page(
        self, channel: str, oldest: float, cursor: str | None = None
    ) -> tuple[list[dict[str, Any]], str | None]:
        """One page of the channel's top-level messages newer than ``oldest``, newest
        first as Slack pages them, and the next page's cursor (``conversations.history``)."""
        response = await self._call(
            partial(
                self.client.conversations_history,
                channel=channel,
                oldest=f"{max(oldest, 0.0):.6f}",
                limit=200,
                cursor=cursor,
            )
        )
        return list(response.get("messages") or []), _next_cursor(response)

    # --- the calls -------------------------------------------------------------------------

    async def _post(
        self, channel: str, thread_ts: str | None, text: str, elements: list[dict[str, Any]]
    ) -> str:
        sent: list[str] = []

        async def post(body: str, blocks: list[dict[str, Any]]) -> None:
            response = await self.client.chat_postMessage(
                channel=channel,
                thread_ts=thread_ts,
                text=body,
                blocks=blocks,
                unfurl_links=False,
                unfurl_media=False,
            )
            sent.append(str(response["ts"]))

        await self._with_fallback(text, elements, post)
        self._next_edit[channel] = max(
            self._next_edit.get(channel, 0.0),
            self._clock() + self.limits.min_edit_interval_s / 2,
        )
        self._remember_buttons((channel, sent[-1]), elements)
        return sent[-1]

    async def _with_fallback(
        self,
        text: str,
        elements: list[dict[str, Any]],
        call: Callable[[str, list[dict[str, Any]]], Awaitable[Any]],
    ) -> None:
        """``call(text, blocks)`` with the mrkdwn of ``text``; again as plain text when
        Slack refuses the blocks."""
        mrkdwn = to_mrkdwn(text)
        if len(mrkdwn) > MAX_TEXT:
            self.truncated += 1
            mrkdwn = plain_text(text)[: MAX_TEXT - 1] + "…"
        sections = split_sections(mrkdwn, MAX_SECTION) or ["\u200b"]
        blocks: list[dict[str, Any]] = [
            {"type": "section", "text": {"type": "mrkdwn", "text": piece}} for piece in sections
        ][:49]
        if elements:
            blocks.append({"type": "actions", "block_id": "spindle", "elements": elements})
        try:
            await self._call(lambda: call(mrkdwn, blocks))
        except PlatformError as error:
            if not any(code in str(error) for code in _MARKUP_ERRORS):
                raise
            self.markup_fallbacks += 1
            _log.warning("Slack refused the blocks (%s); sending plain text", error)
            plain = plain_text(text)[: MAX_SECTION - 1] or "\u200b"
            fallback: list[dict[str, Any]] = [
                {"type": "section", "text": {"type": "plain_text", "text": plain}}
            ]
            if elements:
                fallback.append({"type": "actions", "block_id": "spindle", "elements": elements})
            await self._call(lambda: call(plain, fallback))

    async def _pace(self, channel: str) -> None:
        now = self._clock()
        due = self._next_edit.get(channel, 0.0)
        if due > now:
            await trio.sleep(due - now)
        self._next_edit[channel] = max(due, now) + self.limits.min_edit_interval_s

    async def _call(self, fn: Callable[[], Awaitable[T]]) -> T:
        self.calls += 1
        try:
            return await trio_asyncio.aio_as_trio(fn)()  # type: ignore[no-any-return]
        except SlackApiError as error:
            status = getattr(error.response, "status_code", 200)
            code = str(error.response.get("error", "")) if error.response is not None else ""
            if status == 429 or code == "ratelimited":
                raise PlatformError(
                    f"Slack rate limit: {code}", retry_after=_retry_after(error)
                ) from error
            if status >= 500 or code in _RETRYABLE_ERRORS:
                raise PlatformError(
                    f"Slack unavailable ({status}): {code}", retryable=True
                ) from error
            raise PlatformError(f"Slack refused: {code or status}") from error
        except (TimeoutError, aiohttp.ClientError, OSError) as error:
            raise PlatformError(f"Slack unreachable: {error!r}", retryable=True) from error

    # --- buttons ----------------------------------------------------------------------------

    @staticmethod
    def _elements(buttons: tuple[Button, ...], menu: SelectMenu | None) -> list[dict[str, Any]]:
        elements: list[dict[str, Any]] = [
            {
                "type": "button",
                "action_id": f"{BUTTON_PREFIX}{index}",
                "text": {"type": "plain_text", "text": button.label[:75] or "?"},
                "value": button.action[:2000],
                **(_style(button.action)),
            }
            for index, button in enumerate(buttons[:24])
        ]
        if menu is not None and menu.options:
            elements.append(
                {
                    "type": "static_select",
                    "action_id": f"{BUTTON_PREFIX}menu",
                    "placeholder": {"type": "plain_text", "text": "Choose an answer"},
                    "options": [
                        {
                            "text": {
                                "type": "plain_text",
                                "text": option[:MAX_OPTION_CHARS].strip() or EMPTY_OPTION,
                            },
                            "value": callback_option(menu.custom_id, index)[:150],
                        }
                        for index, option in enumerate(menu.options[:MAX_MENU_OPTIONS])
                    ],
                }
            )
        return elements

    def _remember_buttons(self, key: tuple[str, str], elements: list[dict[str, Any]]) -> None:
        if not elements:
            self._buttons.pop(key, None)
            return
        self._buttons[key] = elements
        while len(self._buttons) > _REMEMBERED:
            self._buttons.popitem(last=False)


def _next_cursor(response: Any) -> str | None:
    cursor = (response.get("response_metadata") or {}).get("next_cursor") or None
    return str(cursor) if response.get("has_more") and cursor else None


def _style(action: str) -> dict[str, str]:
    if action.startswith("permission:allow:"):
        return {"style": "primary"}
    if action.startswith("permission:deny:"):
        return {"style": "danger"}
    return {}
