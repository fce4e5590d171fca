"""``WhatsAppPlatform``: the ``ChatPlatform`` the stream renderer drives, over the WhatsApp
Business Cloud API (``POST {base_url}/{phone_number_id}/messages``) with plain httpx.

Why httpx and not a client library: pywa (the well-kept one) has no base-URL setting, drops
a webhook update it cannot build without a word, and needs nothing we lack; every call here
is one JSON POST (docs/whatsapp-setup.md; /work notes: the spike). httpx runs natively under
trio, so no trio-asyncio hop. What it keeps:

- **Where**: a Spindle thread is one chat: a user (``wa:<wa_id>``) or a group
  (``wa:g:<group id>``); ``whatsapp_thread_id``/``parse_thread_id`` spell it.
- **No edits** (``WHATSAPP_LIMITS.supports_edit`` is False): the renderer sends each
  message once, final; an ``edit`` it still asks for goes out as a new message quoting the
  old one (WhatsApp's reply ``context``). Nothing can be deleted (``delete`` is a no-op).
- **Choices**: buttons (at most 3, titles cut to 20 characters) become an interactive
  reply-button message, a question's options (at most 10, single choice) an interactive
  list; anything larger is a numbered text ("reply 1, 2 or 3") whose numbers ingress maps
  back (``numbered_choice``). An interactive body is at most 1024 characters: a longer text
  goes first as its own message. A prompt's later restatement (the renderer's dismissal:
  the prompt's text plus its outcome) is sent quoting the prompt, so the chat shows which
  prompt it closed.
- **Markup**: Discord Markdown -> WhatsApp's (``effects.whatsapp_markup``); a text over
  4096 characters is cut with "…" and counted (``truncated``).
- **Receipts and typing**: ``mark_read`` of a received message, and ``typing`` (WhatsApp
  shows it for a received message, at most 25 s or until the next answer) for the chat's
  last received message; none received in this process: no indicator.
- **Media**: ``download_media`` fetches a received audio message's bytes into memory
  (``GET /{media-id}``, then its URL with the bearer token) for the transcription.
- **Replies** quote the message that asked (action ids ``wa-<wamid>``).
- Failures become ``PlatformError``: throttling (HTTP 429, or error codes 4, 80007, 130429,
  131056) carries ``retry_after`` (the ``Retry-After`` header, else ``throttle_wait_s``, or
  6 s for 131056, the per-user pair rate);
  5xx, timeouts and connection errors are ``retryable``; other refusals are permanent.
"""

from __future__ import annotations

import logging
import re
from collections import OrderedDict
from typing import Any

import httpx
import trio

from threadspindle.effects.chunking import EMPTY_OPTION
from threadspindle.effects.platform import PlatformError, PlatformLimits, SelectMenu
from threadspindle.effects.whatsapp_markup import to_whatsapp
from threadspindle.runtime.core.effect_types import Button

__all__ = [
    "GRAPH_API",
    "WHATSAPP_LIMITS",
    "WhatsAppPlatform",
    "parse_thread_id",
    "question_option",
    "whatsapp_thread_id",
]

_log = logging.getLogger(__name__)

GRAPH_API = "https://graph.facebook.com/v23.0"
MAX_TEXT = 4096
MAX_BODY = 1024  # an interactive message's body
MAX_BUTTONS = 3
MAX_BUTTON_TITLE = 20
MAX_ROWS = 10
MAX_ROW_TITLE = 24
MAX_ROW_DESCRIPTION = 72
THROTTLE_CODES = frozenset({4, 80007, 130429, 131056})
PAIR_RATE_LIMIT = 131056  # too many messages to one user: Meta allows about one per 6 s
PAIR_RATE_WAIT_S = 6.0
RETRYABLE_CODES = frozenset({1, 2, 131000, 131016})
_REMEMBERED = 1024

WHATSAPP_LIMITS = PlatformLimits(
    char_limit=MAX_TEXT,
    split_margin=96,
    supports_edit=False,
    # No edits: this is the least time between two messages of one stream (the renderer
    # sends at paragraph ends once it has passed) and a card's wait before it is sent.
    min_edit_interval_s=2.0,
    typing_refresh_s=20.0,  # WhatsApp shows it up to 25 s
    subtext=False,
    wrap_links=False,
    joins_messages=True,  # what is ready goes out joined, at most once per interval
    # Meta does not say how it counts; UTF-16 units are never fewer than characters, so
    # splitting by them keeps an emoji-heavy text under the limit either way.
    length_unit="utf16",
    # A row shows 72 characters of an option (its description); more than 10 options go
    # as a numbered text that lists them in full anyway.
    option_chars=MAX_ROW_DESCRIPTION,
    menu_options=1_000_000,
)

_THREAD = re.compile(r"^wa:(g:)?([0-9A-Za-z._@-]+)$")


def whatsapp_thread_id(chat: str, *, group: bool = False) -> str:
    """The Spindle thread of a WhatsApp user's chat (their wa_id) or of a group."""
    return f"wa:g:{chat}" if group else f"wa:{chat}"


def parse_thread_id(thread_id: str) -> tuple[str, bool]:
    """``(wa_id or group id, is_group)``; ``ValueError`` for an id that is not WhatsApp's."""
    match = _THREAD.match(thread_id)
    if match is None:
        raise ValueError(f"not a WhatsApp thread id: {thread_id!r}")
    return match.group(2), match.group(1) is not None


def question_option(custom_id: str, index: int) -> str:
    """The id of a question's option ``index`` (a list row's id)."""
    return f"{custom_id}#{index}"


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _source_message(action_id: str) -> str | None:
    """The received message an action came from (``wa-<wamid>``), to quote in a reply."""
    return action_id[3:] if action_id.startswith("wa-") and len(action_id) > 3 else None


class WhatsAppPlatform:
    """A ``ChatPlatform`` over the Cloud API; see the module docstring. ``client`` is an
    ``httpx.AsyncClient`` the caller owns (and closes)."""

    def __init__(
        self,
        client: httpx.AsyncClient,
        *,
        token: str,
        phone_number_id: str,
        base_url: str = GRAPH_API,
        limits: PlatformLimits | None = None,
        throttle_wait_s: float = 1.0,
    ) -> None:
        self.client = client
        self.limits = limits or WHATSAPP_LIMITS
        self.streams_append_only = True  # nothing shown is ever changed
        self._base = base_url.rstrip("/")
        self._url = f"{self._base}/{phone_number_id}/messages"
        self._headers = {"Authorization": f"Bearer {token}"}
        self._throttle_wait_s = throttle_wait_s
        self._last_inbound: OrderedDict[str, str] = OrderedDict()  # chat -> wamid
        self._labels: OrderedDict[str, str] = OrderedDict()  # choice id -> its whole label
        self._numbered: OrderedDict[str, tuple[tuple[str, str], ...]] = OrderedDict()
        self._prompts: OrderedDict[str, OrderedDict[str, str]] = OrderedDict()  # chat->text->id
        self.calls = 0
        self.truncated = 0

    # --- what ingress tells it and asks of it ------------------------------------------

    def remember_inbound(self, thread_id: str, wamid: str) -> None:
        """The chat's latest received message (the typing indicator is shown for it)."""
        _remember(self._last_inbound, thread_id, wamid)

    def choice_label(self, choice_id: str) -> str | None:
        """The whole label of a button or list row this process sent (titles are cut)."""
        return self._labels.get(choice_id)

    def numbered_choice(self, thread_id: str, number: int) -> tuple[str, str] | None:
        """``(action, label)`` of choice ``number`` (1-based) of the chat's last numbered
        prompt, or None."""
        choices = self._numbered.get(thread_id, ())
        return choices[number - 1] if 1 <= number <= len(choices) else None

    def forget_numbered(self, thread_id: str) -> None:
        self._numbered.pop(thread_id, None)

    async def mark_read(self, wamid: str) -> None:
        await self._post({"status": "read", "message_id": wamid})

    async def download_media(self, media_id: str, *, max_bytes: int) -> tuple[bytes, str | None]:
        """A received medium's bytes and type, in memory (never on disk): the Cloud API's two
        steps, ``GET /{media-id}`` for a short-lived URL, then ``GET`` that URL with the same
        bearer token. Over ``max_bytes``: a permanent ``PlatformError`` (the size is checked
        before the download when Graph states it, and again while reading)."""
        self.calls += 1
        try:
            response = await self.client.get(f"{self._base}/{media_id}", headers=self._headers)
        except httpx.TransportError as error:
            raise PlatformError(f"WhatsApp unreachable: {error!r}", retryable=True) from error
        try:
            answer: Any = response.json()
        except ValueError:
            answer = {}
        if response.status_code != 200 or not isinstance(answer, dict):
            raise _refusal(response, answer, self._throttle_wait_s)
        url, mime = answer.get("url"), answer.get("mime_type")
        if not isinstance(url, str) or not url:
            raise PlatformError(f"WhatsApp named no URL for media {media_id}")
        size = answer.get("file_size")
        if isinstance(size, int) and size > max_bytes:
            raise PlatformError(
                f"the file is {size // 1024} KiB, over the {max_bytes // 1024} KiB Spindle takes"
            )
        chunks: list[bytes] = []
        total = 0
        try:
            async with self.client.stream("GET", url, headers=self._headers) as download:
                if download.status_code != 200:
                    await download.aread()
                    raise PlatformError(
                        f"WhatsApp refused the media download ({download.status_code})",
                        retryable=download.status_code >= 500,
                    )
                async for chunk in download.aiter_bytes():
                    total += len(chunk)
                    if total > max_bytes:
                        raise PlatformError(
                            f"the file is over the {max_bytes // 1024} KiB Spindle takes"
                        )
                    chunks.append(chunk)
        except httpx.TransportError as error:
            raise PlatformError(f"WhatsApp unreachable: {error!r}", retryable=True) from error
        return b"".join(chunks), mime if isinstance(mime, str) and mime else None

    async def say(self, thread_id: str, text: str, *, reply_to: str | None = None) -> str:
        """A message of ingress's own (help, a refusal, a refused value)."""
        return await self._text(thread_id, text, reply_to)

    # --- ChatPlatform --------------------------------------------------------------------

    async def send(
        self,
        channel_id: str,
        text: str,
        *,
        buttons: tuple[Button, ...] = (),
        menu: SelectMenu | None = None,
        nonce: str | None = None,  # no idempotency key in the API: a lost answer may double
    ) -> str:
        if menu is not None:
            return await self._menu(channel_id, text, menu)
        if buttons:
            return await self._buttons(channel_id, text, buttons)
        return await self._text(channel_id, text, self._closes(channel_id, text))

    async def edit(
        self,
        channel_id: str,
        message_id: str,
        text: str,
        *,
        buttons: tuple[Button, ...] | None = None,
    ) -> None:
        # Not asked for while limits.supports_edit is False; if it is: a quoting new message.
        await self._text(channel_id, text, message_id)

    async def delete(self, channel_id: str, message_id: str) -> None:
        return None  # the Cloud API cannot delete a sent message

    async def typing(self, channel_id: str) -> None:
        wamid = self._last_inbound.get(channel_id)
        if wamid is not None:
            await self._post(
                {"status": "read", "message_id": wamid, "typing_indicator": {"type": "text"}}
            )

    async def rename_thread(self, channel_id: str, title: str) -> None:
        """A WhatsApp chat has no name Spindle may change: the title is not shown."""
        await trio.lowlevel.checkpoint()

    async def send_file(
        self, channel_id: str, filename: str, data: bytes, caption: str
    ) -> str | None:
        """Not sent as a WhatsApp document (a media upload first): the text is shown instead."""
        await trio.lowlevel.checkpoint()
        return None

    async def reply(
        self,
        channel_id: str,
        action_id: str,
        text: str,
        *,
        ephemeral: bool = False,  # WhatsApp has no ephemeral messages
        buttons: tuple[Button, ...] = (),
    ) -> str:
        if buttons:
            return await self._buttons(channel_id, text, buttons)
        return await self._text(channel_id, text, _source_message(action_id))

    # --- message shapes --------------------------------------------------------------------

    async def _text(self, thread_id: str, text: str, reply_to: str | None) -> str:
        body = to_whatsapp(text).strip() or "…"
        if len(body) > MAX_TEXT:
            self.truncated += 1
            body = _cut(body, MAX_TEXT)
        payload: dict[str, Any] = {
            "type": "text",
            "text": {"body": body, "preview_url": False},
        }
        if reply_to is not None:
            payload["context"] = {"message_id": reply_to}
        return await self._send(thread_id, payload)

    async def _interactive(self, thread_id: str, text: str, interactive: dict[str, Any]) -> str:
        body = to_whatsapp(text).strip() or "…"
        if len(body) > MAX_BODY:
            # Too long for an interactive body: the text first, the choice under it.
            await self._text(thread_id, text, None)
            body = "Choose:"
        interactive["body"] = {"text": body}
        return await self._send(thread_id, {"type": "interactive", "interactive": interactive})

    async def _buttons(self, thread_id: str, text: str, buttons: tuple[Button, ...]) -> str:
        if len(buttons) > MAX_BUTTONS:
            return await self._numbered_text(
                thread_id, text, tuple((b.action, b.label) for b in buttons)
            )
        for button in buttons:
            _remember(self._labels, button.action, button.label)
        message_id = await self._interactive(
            thread_id,
            text,
            {
                "type": "button",
                "action": {
                    "buttons": [
                        {
                            "type": "reply",
                            "reply": {
                                "id": button.action,
                                "title": _cut(button.label, MAX_BUTTON_TITLE),
                            },
                        }
                        for button in buttons
                    ]
                },
            },
        )
        self._remember_prompt(thread_id, text, message_id)
        return message_id

    async def _menu(self, thread_id: str, text: str, menu: SelectMenu) -> str:
        choices = tuple(
            (question_option(menu.custom_id, index), option)
            for index, option in enumerate(menu.options)
        )
        if len(choices) > MAX_ROWS or menu.multiple:
            return await self._numbered_text(thread_id, text, choices)
        for choice_id, label in choices:
            _remember(self._labels, choice_id, label)
        rows = [
            {"id": choice_id, "title": _cut(label.strip() or EMPTY_OPTION, MAX_ROW_TITLE)}
            | (
                {"description": _cut(label, MAX_ROW_DESCRIPTION)}
                if len(label) > MAX_ROW_TITLE
                else {}
            )
            for choice_id, label in choices
        ]
        message_id = await self._interactive(
            thread_id,
            text,
            {
                "type": "list",
                "action": {"button": "Choose", "sections": [{"title": "Options", "rows": rows}]},
            },
        )
        self._remember_prompt(thread_id, text, message_id)
        return message_id

    async def _numbered_text(
        self, thread_id: str, text: str, choices: tuple[tuple[str, str], ...]
    ) -> str:
        """Choices that do not fit WhatsApp's buttons or list: numbered, answered by number."""
        numbers = [str(n) for n in range(1, len(choices) + 1)]
        spoken = ", ".join(numbers[:-1]) + f" or {numbers[-1]}" if len(numbers) > 1 else "1"
        lines = [
            f"{n}. {label.strip() or EMPTY_OPTION}"
            for n, (_, label) in zip(numbers, choices, strict=True)
        ]
        whole = f"{text}\n\n" + "\n".join(lines) + f"\n\nReply {spoken}."
        message_id = await self._text(thread_id, whole, None)
        _remember(self._numbered, thread_id, choices)
        self._remember_prompt(thread_id, text, message_id)
        return message_id

    def _remember_prompt(self, thread_id: str, text: str, message_id: str) -> None:
        prompts = self._prompts.setdefault(thread_id, OrderedDict())
        _remember(prompts, text, message_id, limit=16)
        self._prompts.move_to_end(thread_id)
        while len(self._prompts) > _REMEMBERED:
            self._prompts.popitem(last=False)

    def _closes(self, thread_id: str, text: str) -> str | None:
        """The prompt a text restates (its dismissal: the prompt plus the outcome), which
        it then quotes; that prompt's numbers mean nothing any more."""
        prompts = self._prompts.get(thread_id)
        if not prompts:
            return None
        for prompt_text, message_id in reversed(prompts.items()):
            if text.startswith(prompt_text + "\n"):
                del prompts[prompt_text]
                self.forget_numbered(thread_id)
                return message_id
        return None

    # --- the call --------------------------------------------------------------------------

    async def _send(self, thread_id: str, payload: dict[str, Any]) -> str:
        chat, group = parse_thread_id(thread_id)
        body = {"recipient_type": "group" if group else "individual", "to": chat, **payload}
        answer = await self._post(body)
        try:
            return str(answer["messages"][0]["id"])
        except (KeyError, IndexError, TypeError) as error:
            raise PlatformError(f"WhatsApp answered without a message id: {answer!r}") from error

    async def _post(self, payload: dict[str, Any]) -> dict[str, Any]:
        self.calls += 1
        try:
            response = await self.client.post(
                self._url,
                json={"messaging_product": "whatsapp", **payload},
                headers=self._headers,
            )
        except httpx.TransportError as error:
            raise PlatformError(f"WhatsApp unreachable: {error!r}", retryable=True) from error
        try:
            answer: Any = response.json()
        except ValueError:
            answer = {}
        if response.status_code == 200 and isinstance(answer, dict):
            return answer
        raise _refusal(response, answer, self._throttle_wait_s)


def _refusal(response: httpx.Response, answer: Any, throttle_wait_s: float) -> PlatformError:
    error = answer.get("error", {}) if isinstance(answer, dict) else {}
    code = error.get("code") if isinstance(error, dict) else None
    message = error.get("message", "") if isinstance(error, dict) else ""
    what = f"WhatsApp refused ({response.status_code}, code {code}): {message}".rstrip(": ")
    if response.status_code == 429 or code in THROTTLE_CODES:
        try:
            wait = float(response.headers.get("retry-after", ""))
        except ValueError:
            wait = PAIR_RATE_WAIT_S if code == PAIR_RATE_LIMIT else throttle_wait_s
        return PlatformError(what, retry_after=wait)
    if response.status_code >= 500 or code in RETRYABLE_CODES:
        return PlatformError(what, retryable=True)
    return PlatformError(what)


def _remember(
    book: OrderedDict[str, Any], key: str, value: Any, *, limit: int = _REMEMBERED
) -> None:
    book[key] = value
    book.move_to_end(key)
    while len(book) > limit:
        book.popitem(last=False)
