"""The fake Telegram's state and the Bot API methods over it, without any HTTP: chats
(private, groups, forum supergroups with topics), users, messages with their inline
keyboards, the update queue with Telegram's confirm-by-offset rule, and a record of every
call. ``FakeTelegram`` (``server``) serves it; every access holds ``World.lock``.

What it keeps as Telegram does:

- **Updates are consume-once by offset**: ``get_updates(offset)`` first forgets every
  update with a smaller id (confirmed), then returns the rest; without an offset it returns
  every unconfirmed one. So a bot that never confirms gets the same updates again.
- **Messages are checked**: HTML is parsed strictly (``html.parse_html``), the text after
  parsing must be 1-4096 UTF-16 units, an edit that changes nothing is "message is not
  modified", a ``callback_data`` longer than 64 bytes is refused.
- **Topics**: ``createForumTopic`` in a forum supergroup gives a ``message_thread_id``;
  messages in a topic carry it with ``is_topic_message``.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from threadspindle.testkit.fake_telegram.html import MarkupRefused, parse_html, utf16_len

__all__ = ["ApiError", "BOT_ID", "Call", "Fault", "TgMessage", "World"]

BOT_ID = 7_000_000_001
MAX_UPLOAD_BYTES = 50 * 1024 * 1024  # what a bot may send as a file
GET_FILE_MAX_BYTES = 20 * 1024 * 1024  # what a bot may download (getFile refuses more)
MAX_TEXT = 4096


class ApiError(Exception):
    """An error answer: HTTP status, description, and ``retry_after`` for a 429."""

    def __init__(self, status: int, description: str, retry_after: int | None = None) -> None:
        super().__init__(description)
        self.status = status
        self.description = description
        self.retry_after = retry_after

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "ok": False,
            "error_code": self.status,
            "description": self.description,
        }
        if self.retry_after is not None:
            body["parameters"] = {"retry_after": self.retry_after}
        return body


@dataclass(frozen=True)
class Call:
    at: float
    method: str
    status: int
    params: dict[str, Any]


@dataclass
class Fault:
    """Fail ``times`` calls of ``method`` (any when None) with ``status`` after letting
    ``skip`` of them pass; a 429 carries ``retry_after`` (whole seconds, as Telegram)."""

    status: int
    method: str | None = None
    skip: int = 0
    times: int = 1
    retry_after: int = 1
    description: str | None = None  # the error's text (default: the status's usual one)


@dataclass
class TgMessage:
    chat_id: int
    message_id: int
    from_id: int
    text: str  # as shown (after parsing)
    topic: int | None = None
    entities: list[dict[str, Any]] = field(default_factory=list)
    source: str = ""  # as sent (the HTML, when parse_mode was HTML)
    parse_mode: str | None = None
    reply_markup: dict[str, Any] | None = None
    reply_to: int | None = None
    date: int = 0
    edit_date: int | None = None
    edits: int = 0
    deleted: bool = False
    service: str | None = None  # "forum_topic_created"
    voice: dict[str, Any] | None = None  # a voice message's Voice object (no text then)
    document: dict[str, Any] | None = None  # a file sent with sendDocument (its caption: text)
    photo: list[dict[str, Any]] | None = None  # a user's photo, its sizes (caption: text)
    media_group_id: str | None = None  # an album's parts share one

    def buttons(self) -> list[dict[str, Any]]:
        rows = (self.reply_markup or {}).get("inline_keyboard", [])
        return [button for row in rows for button in row]


def _int(params: dict[str, Any], name: str, default: int | None = None) -> int | None:
    value = params.get(name)
    if value is None or value == "":
        return default
    return int(value)


def _json(params: dict[str, Any], name: str) -> Any:
    value = params.get(name)
    if isinstance(value, str):
        return json.loads(value)
    return value


class World:
    def __init__(self, token: str) -> None:
        self.lock = threading.RLock()
        self.token = token
        self.users: dict[int, dict[str, Any]] = {
            BOT_ID: {
                "id": BOT_ID,
                "is_bot": True,
                "first_name": "Spindle",
                "username": "spindle_bot",
            }
        }
        self.chats: dict[int, dict[str, Any]] = {}
        self.topics: dict[int, dict[int, str]] = {}
        self.topic_renames: list[tuple[int, int, str]] = []  # (chat, topic, name) in order
        self.files: dict[str, bytes] = {}  # file_id -> content (voice, photos, files): getFile
        self.downloads: list[str] = []  # file ids downloaded from /file/, in order
        self._file_ids = itertools.count(1)
        self.messages: dict[tuple[int, int], TgMessage] = {}
        self._message_ids: dict[int, itertools.count[int]] = {}
        self.updates: list[dict[str, Any]] = []  # not confirmed yet
        self.issued: dict[int, dict[str, Any]] = {}  # every update ever made, by id
        self._update_ids = itertools.count(1001)
        self.calls: list[Call] = []
        self.faults: list[Fault] = []
        self.chat_actions: list[tuple[float, int, int | None, str]] = []
        self.callback_answers: dict[str, dict[str, Any]] = {}
        self.commands: list[dict[str, Any]] = []
        self.offsets: list[int | None] = []  # the offset of every getUpdates
        self._callback_ids = itertools.count(1)
        self._user_ids = itertools.count(100)
        self._chat_ids = itertools.count(1)

    # --- the world ------------------------------------------------------------------------

    def add_user(self, name: str) -> int:
        user_id = next(self._user_ids)
        self.users[user_id] = {"id": user_id, "is_bot": False, "first_name": name, "username": name}
        return user_id

    def add_private_chat(self, user_id: int) -> int:
        self.chats[user_id] = {
            "id": user_id,
            "type": "private",
            "first_name": self.users[user_id]["first_name"],
        }
        return user_id

    def add_group(self, title: str, *, forum: bool = True) -> int:
        chat_id = -1_001_000_000_000 - next(self._chat_ids)
        chat: dict[str, Any] = {"id": chat_id, "type": "supergroup", "title": title}
        if forum:
            chat["is_forum"] = True
        self.chats[chat_id] = chat
        self.topics[chat_id] = {}
        return chat_id

    def _new_message(self, chat_id: int, from_id: int, text: str, topic: int | None) -> TgMessage:
        ids = self._message_ids.setdefault(chat_id, itertools.count(1))
        message = TgMessage(chat_id, next(ids), from_id, text, topic=topic, date=int(time.time()))
        self.messages[(chat_id, message.message_id)] = message
        return message

    def message_dict(self, message: TgMessage) -> dict[str, Any]:
        data: dict[str, Any] = {
            "message_id": message.message_id,
            "date": message.date,
            "chat": self.chats[message.chat_id],
            "from": self.users[message.from_id],
        }
        if message.service == "forum_topic_created":
            data["forum_topic_created"] = {"name": message.text, "icon_color": 7322096}
        elif message.voice is not None:
            data["voice"] = message.voice
        elif message.document is not None or message.photo is not None:
            if message.document is not None:
                data["document"] = message.document
            if message.photo is not None:
                data["photo"] = message.photo
            if message.text:
                data["caption"] = message.text
            if message.media_group_id is not None:
                data["media_group_id"] = message.media_group_id
        else:
            data["text"] = message.text
        if message.topic is not None:
            data["message_thread_id"] = message.topic
            data["is_topic_message"] = True
        if message.entities:
            data["entities"] = message.entities
        if message.reply_markup:
            data["reply_markup"] = message.reply_markup
        if message.edit_date is not None:
            data["edit_date"] = message.edit_date
        if message.reply_to is not None:
            replied = self.messages.get((message.chat_id, message.reply_to))
            if replied is not None:
                data["reply_to_message"] = {
                    k: v for k, v in self.message_dict(replied).items() if k != "reply_to_message"
                }
        return data

    def _push(self, kind: str, payload: dict[str, Any]) -> int:
        update_id = next(self._update_ids)
        update = {"update_id": update_id, kind: payload}
        self.updates.append(update)
        self.issued[update_id] = update
        return update_id

    def user_voice(
        self, chat_id: int, user_id: int, audio: bytes, topic: int | None, duration: int
    ) -> TgMessage:
        """A voice message as Telegram's apps send one: Opus in Ogg, no text."""
        file_id = f"voice-{next(self._file_ids)}"
        self.files[file_id] = audio
        message = self._new_message(chat_id, user_id, "", topic)
        message.voice = {
            "file_id": file_id,
            "file_unique_id": f"u{file_id}",
            "duration": duration,
            "mime_type": "audio/ogg",
            "file_size": len(audio),
        }
        self._push("message", self.message_dict(message))
        return message

    def user_file(
        self,
        chat_id: int,
        user_id: int,
        data: bytes,
        *,
        caption: str,
        topic: int | None,
        file_name: str | None,
        mime_type: str | None,
        media_group_id: str | None = None,
    ) -> TgMessage:
        """A photo (``file_name`` None: sent as a picture, in the sizes Telegram makes of
        one) or a document, as Telegram's apps send them, with an optional caption."""
        file_id = f"file-{next(self._file_ids)}"
        self.files[file_id] = data
        message = self._new_message(chat_id, user_id, caption, topic)
        message.media_group_id = media_group_id
        if file_name is None:
            # The smaller sizes Telegram adds are files of their own; the agent gets the
            # largest, so only that one's bytes matter here.
            thumb_id = f"file-{next(self._file_ids)}"
            self.files[thumb_id] = data[:100]
            message.photo = [
                {
                    "file_id": thumb_id,
                    "file_unique_id": f"u{thumb_id}",
                    "width": 90,
                    "height": 60,
                    "file_size": len(self.files[thumb_id]),
                },
                {
                    "file_id": file_id,
                    "file_unique_id": f"u{file_id}",
                    "width": 1280,
                    "height": 853,
                    "file_size": len(data),
                },
            ]
        else:
            message.document = {
                "file_id": file_id,
                "file_unique_id": f"u{file_id}",
                "file_name": file_name,
                "mime_type": mime_type,
                "file_size": len(data),
            }
        self._push("message", self.message_dict(message))
        return message

    def api_getFile(self, params: dict[str, Any]) -> Any:  # noqa: N802
        file_id = str(params.get("file_id", ""))
        if file_id not in self.files:
            raise ApiError(400, "Bad Request: invalid file_id")
        if len(self.files[file_id]) > GET_FILE_MAX_BYTES:
            raise ApiError(400, "Bad Request: file is too big")
        folder = "voice" if file_id.startswith("voice-") else "documents"
        return {
            "file_id": file_id,
            "file_unique_id": f"u{file_id}",
            "file_size": len(self.files[file_id]),
            "file_path": f"{folder}/{file_id}.oga" if folder == "voice" else f"{folder}/{file_id}",
        }

    def user_message(self, chat_id: int, user_id: int, text: str, topic: int | None) -> TgMessage:
        message = self._new_message(chat_id, user_id, text, topic)
        if text.startswith("/"):
            word = text.split()[0]
            message.entities = [{"type": "bot_command", "offset": 0, "length": utf16_len(word)}]
        self._push("message", self.message_dict(message))
        return message

    def user_edit(self, chat_id: int, message_id: int, text: str) -> None:
        message = self.messages[(chat_id, message_id)]
        message.text = text
        message.edits += 1
        message.edit_date = int(time.time()) + message.edits  # distinct per edit
        self._push("edited_message", self.message_dict(message))

    def click(self, chat_id: int, message_id: int, data: str, user_id: int) -> str:
        message = self.messages[(chat_id, message_id)]
        callback_id = str(next(self._callback_ids))
        self._push(
            "callback_query",
            {
                "id": callback_id,
                "from": self.users[user_id],
                "message": self.message_dict(message),
                "chat_instance": str(chat_id),
                "data": data,
            },
        )
        return callback_id

    def redeliver(self, update_id: int) -> None:
        """Deliver an update once more, as Telegram does when a bot died after handling it
        but before confirming it."""
        self.updates.append(dict(self.issued[update_id]))

    # --- the Bot API ------------------------------------------------------------------------

    def check_fault(self, method: str) -> None:
        for fault in self.faults:
            if fault.times <= 0 or (fault.method is not None and fault.method != method):
                continue
            if fault.skip > 0:
                fault.skip -= 1
                continue
            fault.times -= 1
            if fault.status == 429:
                raise ApiError(
                    429, f"Too Many Requests: retry after {fault.retry_after}", fault.retry_after
                )
            usual = {400: "Bad Request", 502: "Bad Gateway"}.get(fault.status, "Server Error")
            raise ApiError(fault.status, fault.description or usual)

    def confirm(self, offset: int | None) -> None:
        """A getUpdates' offset confirms every update below it, when the request arrives
        (a long poll the bot abandoned confirms nothing more later)."""
        if offset:
            self.updates = [u for u in self.updates if u["update_id"] >= offset]

    def pending_updates(self, limit: int) -> list[dict[str, Any]]:
        return self.updates[:limit]

    def call(self, method: str, params: dict[str, Any]) -> Any:
        handler = getattr(self, f"api_{method}", None)
        if handler is None:
            raise ApiError(404, "Not Found: method not found")
        return handler(params)

    def _chat(self, params: dict[str, Any]) -> int:
        chat_id = _int(params, "chat_id")
        if chat_id is None or chat_id not in self.chats:
            raise ApiError(400, "Bad Request: chat not found")
        return chat_id

    def _topic(self, chat_id: int, params: dict[str, Any]) -> int | None:
        topic = _int(params, "message_thread_id")
        if topic is not None and topic not in self.topics.get(chat_id, {}):
            raise ApiError(400, "Bad Request: message thread not found")
        return topic

    def _text(self, params: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
        source = str(params.get("text", ""))
        mode = params.get("parse_mode")
        if mode == "HTML":
            try:
                text, entities = parse_html(source)
            except MarkupRefused as refused:
                raise ApiError(400, f"Bad Request: {refused}") from None
        elif mode:
            raise ApiError(400, f"Bad Request: unsupported parse_mode {mode}")
        else:
            text, entities = source, []
        if not text.strip():
            raise ApiError(400, "Bad Request: message text is empty")
        if utf16_len(text) > MAX_TEXT:
            raise ApiError(400, "Bad Request: message is too long")
        return text, entities

    @staticmethod
    def _markup(params: dict[str, Any]) -> dict[str, Any] | None:
        markup = _json(params, "reply_markup")
        if not markup:
            return None
        for row in markup.get("inline_keyboard", []):
            for button in row:
                data = button.get("callback_data")
                if data is not None and not 1 <= len(str(data).encode()) <= 64:
                    raise ApiError(400, "Bad Request: BUTTON_DATA_INVALID")
        return dict(markup)

    def api_getMe(self, params: dict[str, Any]) -> Any:  # noqa: N802 - Bot API names
        return {**self.users[BOT_ID], "can_join_groups": True, "supports_inline_queries": False}

    def api_deleteWebhook(self, params: dict[str, Any]) -> Any:  # noqa: N802
        return True

    def api_setMyCommands(self, params: dict[str, Any]) -> Any:  # noqa: N802
        self.commands = list(_json(params, "commands") or [])
        return True

    def api_getMyCommands(self, params: dict[str, Any]) -> Any:  # noqa: N802
        return self.commands

    def api_sendMessage(self, params: dict[str, Any]) -> Any:  # noqa: N802
        chat_id = self._chat(params)
        topic = self._topic(chat_id, params)
        text, entities = self._text(params)
        markup = self._markup(params)
        message = self._new_message(chat_id, BOT_ID, text, topic)
        message.entities, message.source = entities, str(params.get("text", ""))
        message.parse_mode, message.reply_markup = params.get("parse_mode") or None, markup
        reply = _json(params, "reply_parameters")
        if reply:
            message.reply_to = int(reply["message_id"])
        return self.message_dict(message)

    def api_sendDocument(self, params: dict[str, Any]) -> Any:  # noqa: N802
        """A new file as the Bot API takes it: a multipart part named ``document`` (up to
        50 MB), the caption up to 1024 characters."""
        chat_id = self._chat(params)
        topic = self._topic(chat_id, params)
        upload = (params.get("_files") or {}).get("document")
        if upload is None:
            raise ApiError(400, "Bad Request: there is no document in the request")
        filename, data = upload
        if len(data) > MAX_UPLOAD_BYTES:
            raise ApiError(413, "Request Entity Too Large")
        caption = str(params.get("caption") or "")
        if len(caption) > 1024:
            raise ApiError(400, "Bad Request: message caption is too long")
        message = self._new_message(chat_id, BOT_ID, caption, topic)
        file_id = f"doc{message.message_id}"
        self.files[file_id] = data
        message.document = {
            "file_id": file_id,
            "file_unique_id": f"u{file_id}",
            "file_name": filename,
            "file_size": len(data),
        }
        return self.message_dict(message)

    def _existing(self, params: dict[str, Any]) -> TgMessage:
        chat_id = self._chat(params)
        message = self.messages.get((chat_id, _int(params, "message_id") or 0))
        if message is None or message.deleted:
            raise ApiError(400, "Bad Request: message to edit not found")
        if message.from_id != BOT_ID:
            raise ApiError(400, "Bad Request: message can't be edited")
        return message

    def api_editMessageText(self, params: dict[str, Any]) -> Any:  # noqa: N802
        message = self._existing(params)
        text, entities = self._text(params)
        markup = self._markup(params)
        if text == message.text and entities == message.entities and markup == message.reply_markup:
            raise ApiError(
                400,
                "Bad Request: message is not modified: specified new message content and reply "
                "markup are exactly the same as a current content and reply markup of the message",
            )
        message.text, message.entities, message.source = text, entities, str(params["text"])
        message.parse_mode = params.get("parse_mode") or None
        message.reply_markup = markup
        message.edits += 1
        message.edit_date = int(time.time())
        return self.message_dict(message)

    def api_editMessageReplyMarkup(self, params: dict[str, Any]) -> Any:  # noqa: N802
        message = self._existing(params)
        message.reply_markup = self._markup(params)
        return self.message_dict(message)

    def api_deleteMessage(self, params: dict[str, Any]) -> Any:  # noqa: N802
        chat_id = self._chat(params)
        message = self.messages.get((chat_id, _int(params, "message_id") or 0))
        if message is None or message.deleted:
            raise ApiError(400, "Bad Request: message to delete not found")
        message.deleted = True
        return True

    def api_sendChatAction(self, params: dict[str, Any]) -> Any:  # noqa: N802
        chat_id = self._chat(params)
        topic = self._topic(chat_id, params)
        self.chat_actions.append((time.time(), chat_id, topic, str(params.get("action"))))
        return True

    def api_answerCallbackQuery(self, params: dict[str, Any]) -> Any:  # noqa: N802
        callback_id = str(params.get("callback_query_id"))
        if callback_id in self.callback_answers:
            raise ApiError(400, "Bad Request: query is too old and response timeout expired")
        self.callback_answers[callback_id] = {
            "text": params.get("text"),
            "show_alert": str(params.get("show_alert")).lower() == "true",
        }
        return True

    def api_createForumTopic(self, params: dict[str, Any]) -> Any:  # noqa: N802
        chat_id = self._chat(params)
        if not self.chats[chat_id].get("is_forum"):
            raise ApiError(400, "Bad Request: the chat is not a forum")
        name = str(params.get("name", ""))
        if not 1 <= len(name) <= 128:
            raise ApiError(400, "Bad Request: invalid forum topic name")
        service = self._new_message(chat_id, BOT_ID, name, None)
        service.service = "forum_topic_created"
        topic = service.message_id
        service.topic = topic
        self.topics[chat_id][topic] = name
        return {"message_thread_id": topic, "name": name, "icon_color": 7322096}

    def api_editForumTopic(self, params: dict[str, Any]) -> Any:  # noqa: N802
        chat_id = self._chat(params)
        topic = self._topic(chat_id, params)
        if topic is None:
            raise ApiError(400, "Bad Request: message thread not found")
        name = str(params.get("name", ""))
        if not 1 <= len(name) <= 128:
            raise ApiError(400, "Bad Request: invalid forum topic name")
        self.topics[chat_id][topic] = name
        self.topic_renames.append((chat_id, topic, name))
        return True

    def api_getChat(self, params: dict[str, Any]) -> Any:  # noqa: N802
        return self.chats[self._chat(params)]
