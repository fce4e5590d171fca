"""The fake Slack's state and Web API methods over it, without any HTTP: a workspace (team),
users, channels, messages with threads (``thread_ts``) and Block Kit blocks, the Socket Mode
envelopes waiting for delivery or for their ack, and a record of every call.
``FakeSlack`` (``server``) serves it; every access holds ``World.lock``.

What it keeps as Slack does:

- **Timestamps are ids**: every message's ``ts`` is ``<seconds>.<6 digits>``, unique and
  increasing; a reply carries its parent's ``ts`` as ``thread_ts``.
- **Messages are checked**: ``text`` at most 40,000 characters, at most 50 blocks, a
  section's text at most 3,000, a button's label 75 and its ``action_id`` unique in the
  message, a static select at most 100 options; anything else is ``invalid_blocks``. The
  text's mrkdwn is judged by ``mrkdwn.problems`` (kept per message, for tests to assert).
- **Envelopes are at-least-once**: one not acknowledged (``{"envelope_id": …}`` on the
  socket) is delivered again on the next connection, with ``retry_attempt`` raised.
"""

from __future__ import annotations

import base64
import itertools
import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from threadspindle.testkit.fake_slack.mrkdwn import problems, visible

__all__ = ["ApiError", "BOT_ID", "BOT_USER", "Call", "Fault", "SlackMessage", "TEAM", "World"]

TEAM = "T0SPINDLE"
BOT_USER = "U0SPINDLE"
BOT_ID = "B0SPINDLE"
APP_ID = "A0SPINDLE"
MAX_TEXT = 40_000
MAX_UPLOAD_BYTES = 1024**3  # Slack takes files up to 1 GB
MAX_SECTION = 3_000


class ApiError(Exception):
    """An error answer: HTTP status, Slack's ``error`` code, ``retry_after`` for a 429."""

    def __init__(self, error: str, status: int = 200, retry_after: float | None = None) -> None:
        super().__init__(error)
        self.error = error
        self.status = status
        self.retry_after = retry_after


@dataclass(frozen=True)
class Call:
    at: float
    method: str
    status: int
    params: dict[str, Any]


@dataclass
class Fault:
    """Fail ``times`` calls of ``method`` (any when None) after ``skip`` pass: a 429 with
    ``retry_after``, a 5xx, or (status 200) an ``error`` such as ``invalid_blocks``."""

    status: int
    method: str | None = None
    skip: int = 0
    times: int = 1
    retry_after: float = 1.0
    error: str | None = None


@dataclass
class SlackMessage:
    channel: str
    ts: str
    user: str
    text: str  # as sent (mrkdwn)
    thread_ts: str | None = None
    blocks: list[dict[str, Any]] = field(default_factory=list)
    shown: str = ""  # what a client shows
    problems: list[str] = field(default_factory=list)
    edits: int = 0
    deleted: bool = False
    ephemeral_to: str | None = None
    files: list[dict[str, Any]] = field(default_factory=list)  # shared files: id, name, data

    @property
    def bot(self) -> bool:
        return self.user == BOT_USER

    def buttons(self) -> list[dict[str, Any]]:
        """Every button and select of the message's actions blocks."""
        return [
            element
            for block in self.blocks
            if block.get("type") == "actions"
            for element in block.get("elements", [])
        ]


def _json(value: Any) -> Any:
    if isinstance(value, str) and value[:1] in "[{":
        return json.loads(value)
    return value


def _plain(obj: Any) -> str:
    return str(obj.get("text", "")) if isinstance(obj, dict) else ""


def check_blocks(blocks: Any) -> list[dict[str, Any]]:
    if blocks is None or blocks == "":
        return []
    if not isinstance(blocks, list) or len(blocks) > 50:
        raise ApiError("invalid_blocks")
    action_ids: set[str] = set()
    for block in blocks:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "section":
            if not 1 <= len(_plain(block.get("text"))) <= MAX_SECTION:
                raise ApiError("invalid_blocks")
        elif kind == "actions":
            elements = block.get("elements", [])
            if not 1 <= len(elements) <= 25:
                raise ApiError("invalid_blocks")
            for element in elements:
                action_id = str(element.get("action_id", ""))
                if not action_id or len(action_id) > 255 or action_id in action_ids:
                    raise ApiError("invalid_blocks")
                action_ids.add(action_id)
                if element.get("type") == "button":
                    if not 1 <= len(_plain(element.get("text"))) <= 75:
                        raise ApiError("invalid_blocks")
                    if len(str(element.get("value", ""))) > 2000:
                        raise ApiError("invalid_blocks")
                elif element.get("type") == "static_select":
                    options = element.get("options", [])
                    if not 1 <= len(options) <= 100:
                        raise ApiError("invalid_blocks")
                    for option in options:
                        if not 1 <= len(_plain(option.get("text"))) <= 75:
                            raise ApiError("invalid_blocks")
                        if not 1 <= len(str(option.get("value", ""))) <= 150:
                            raise ApiError("invalid_blocks")
                else:
                    raise ApiError("invalid_blocks")
        elif kind not in ("context", "divider"):
            raise ApiError("invalid_blocks")
    return list(blocks)


class World:
    def __init__(self, bot_token: str, app_token: str) -> None:
        self.lock = threading.RLock()
        self.bot_token = bot_token
        self.app_token = app_token
        self.users: dict[str, dict[str, Any]] = {
            BOT_USER: {"id": BOT_USER, "name": "spindle", "team_id": TEAM, "is_bot": True}
        }
        self.channels: dict[str, str] = {}  # id -> name
        self.messages: dict[tuple[str, str], SlackMessage] = {}
        self.outbox: list[dict[str, Any]] = []  # envelopes not yet delivered
        self.unacked: dict[str, dict[str, Any]] = {}  # delivered, waiting for their ack
        self.acks: list[dict[str, Any]] = []  # every ack frame received
        self.delivered: list[str] = []  # envelope ids, in delivery order (repeats included)
        self.issued: dict[str, dict[str, Any]] = {}  # every envelope ever made, by id
        self.calls: list[Call] = []
        self.faults: list[Fault] = []
        self.statuses: list[tuple[str, str, str]] = []  # assistant status: channel, thread, text
        self.titles: list[tuple[str, str, str]] = []  # assistant titles: channel, thread, title
        self.assistant = True  # assistant.threads.setStatus allowed
        self.connections = 0
        # Uploads (files.getUploadURLExternal): id -> name, declared length, bytes received.
        self.uploads: dict[str, dict[str, Any]] = {}
        # Files users shared: id -> bytes, served at files_url (set once the server listens).
        self.shared: dict[str, bytes] = {}
        self.files_url = "http://127.0.0.1:0/files-pri/"
        self.downloads: list[tuple[str, str | None]] = []  # (file id, Authorization header)
        self.files_read = True  # the app has the files:read scope (else: the sign-in page)
        self._seq = itertools.count(1)
        self._ids = itertools.count(1001)

    # --- the world -----------------------------------------------------------------------

    def add_user(self, name: str, team: str = TEAM) -> str:
        user_id = f"U{next(self._ids)}"
        self.users[user_id] = {"id": user_id, "name": name, "team_id": team, "is_bot": False}
        return user_id

    def add_channel(self, name: str) -> str:
        channel = f"C{next(self._ids)}"
        self.channels[channel] = name
        return channel

    def _ts(self) -> str:
        return f"{int(time.time())}.{next(self._seq):06d}"

    def _envelope(self, kind: str, payload: dict[str, Any]) -> str:
        envelope_id = f"env-{next(self._seq)}"
        envelope = {
            "envelope_id": envelope_id,
            "type": kind,
            "payload": payload,
            "accepts_response_payload": kind != "events_api",
            "retry_attempt": 0,
            "retry_reason": "",
        }
        self.outbox.append(envelope)
        self.issued[envelope_id] = envelope
        return envelope_id

    def redeliver(self, envelope_id: str) -> None:
        """Deliver an envelope once more, as Slack does when its ack was lost (the app
        died after handling it, or answered too late)."""
        envelope = self.issued[envelope_id]
        again = dict(envelope, retry_attempt=envelope["retry_attempt"] + 1)
        again["retry_reason"] = "timeout"
        self.outbox.append(again)

    def _event(self, event: dict[str, Any], team: str) -> str:
        """An Events API envelope. Its ``team_id`` is the app's workspace, as Slack sends it
        in a shared channel whoever wrote; ``team``: the author's, which the event holds."""
        event_id = f"Ev{next(self._seq):08d}"
        return self._envelope(
            "events_api",
            {
                "token": "verification-token",
                "team_id": TEAM,
                "api_app_id": APP_ID,
                "event": event,
                "type": "event_callback",
                "event_id": event_id,
                "event_time": int(time.time()),
            },
        )

    def message_event(self, message: SlackMessage) -> dict[str, Any]:
        event: dict[str, Any] = {
            "type": "message",
            "channel": message.channel,
            "user": message.user,
            "text": message.text,
            "ts": message.ts,
            "event_ts": message.ts,
            "team": self.users[message.user]["team_id"],
            "user_team": self.users[message.user]["team_id"],
            "channel_type": "channel",
        }
        if message.thread_ts is not None:
            event["thread_ts"] = message.thread_ts
        if message.bot:
            event["bot_id"] = BOT_ID
        else:
            name = self.users[message.user]["name"]
            event["user_profile"] = {"name": name, "display_name": name, "real_name": name}
        if message.blocks:
            event["blocks"] = message.blocks
        if message.files and not message.bot:
            # As Slack describes a file a person shared: where to download it (with the
            # bot token), never its bytes.
            event["subtype"] = "file_share"
            event["files"] = [{k: v for k, v in f.items() if k != "data"} for f in message.files]
        return event

    def user_message(
        self,
        channel: str,
        user: str,
        text: str,
        thread_ts: str | None,
        files: tuple[tuple[str, bytes, str], ...] = (),
        external: bool = False,
    ) -> str:
        """``files``: (name, bytes, mimetype), hosted by Slack; ``external``: links to
        files another service hosts instead (Google Drive, say), which Slack only names."""
        message = SlackMessage(channel, self._ts(), user, text, thread_ts, shown=text)
        for name, data, mimetype in files:
            file_id = f"F{next(self._seq):08d}"
            entry: dict[str, Any] = {
                "id": file_id,
                "name": name,
                "title": name,
                "mimetype": mimetype,
                "size": len(data),
            }
            if external:
                entry.update(mode="external", url_private=f"https://docs.example.org/{name}")
            else:
                self.shared[file_id] = data
                url = f"{self.files_url}{file_id}/download/{name}"
                entry.update(mode="hosted", url_private=url, url_private_download=url)
            message.files.append(entry)
        self.messages[(channel, message.ts)] = message
        self._event(self.message_event(message), self.users[user]["team_id"])
        return message.ts

    def user_edit(self, channel: str, ts: str, text: str) -> None:
        message = self.messages[(channel, ts)]
        previous = self.message_event(message)
        message.text = message.shown = text
        message.edits += 1
        edited = {**self.message_event(message), "edited": {"user": message.user, "ts": self._ts()}}
        self._event(
            {
                "type": "message",
                "subtype": "message_changed",
                "hidden": True,
                "channel": channel,
                "ts": self._ts(),
                "event_ts": self._ts(),
                "message": edited,
                "previous_message": previous,
                "channel_type": "channel",
            },
            self.users[message.user]["team_id"],
        )

    def user_delete(self, channel: str, ts: str) -> None:
        message = self.messages[(channel, ts)]
        message.deleted = True
        self._event(
            {
                "type": "message",
                "subtype": "message_deleted",
                "hidden": True,
                "channel": channel,
                "ts": self._ts(),
                "event_ts": self._ts(),
                "deleted_ts": ts,
                "previous_message": self.message_event(message),
                "channel_type": "channel",
            },
            self.users[message.user]["team_id"],
        )

    def slash(self, channel: str, user: str, text: str, command: str = "/spindle") -> str:
        """A slash command (Slack sends no thread with one: it is typed in a channel)."""
        info = self.users[user]
        return self._envelope(
            "slash_commands",
            {
                "token": "verification-token",
                "team_id": info["team_id"],
                "team_domain": "spindle-test",
                "channel_id": channel,
                "channel_name": self.channels.get(channel, "?"),
                "user_id": user,
                "user_name": info["name"],
                "command": command,
                "text": text,
                "api_app_id": APP_ID,
                "response_url": "http://127.0.0.1/response",
                "trigger_id": f"trig-{next(self._seq)}",
            },
        )

    def click(
        self,
        channel: str,
        ts: str,
        action_id: str,
        user: str,
        value: str | None,
        as_seen: SlackMessage | None = None,
    ) -> str:
        """A press of a button (``value`` None: its own) or a select's option ``value``;
        ``as_seen``: the message as a client that has not refreshed still shows it."""
        message = as_seen or self.messages[(channel, ts)]
        (element,) = [e for e in message.buttons() if e["action_id"] == action_id]
        action: dict[str, Any] = {
            "action_id": action_id,
            "block_id": "actions",
            "type": element["type"],
            "action_ts": self._ts(),
        }
        if element["type"] == "button":
            action["value"] = element.get("value", "")
            action["text"] = element["text"]
        else:
            (option,) = [o for o in element["options"] if o["value"] == value]
            action["selected_option"] = option
        info = self.users[user]
        container = {
            "type": "message",
            "message_ts": ts,
            "channel_id": channel,
            "is_ephemeral": False,
        }
        if message.thread_ts:
            container["thread_ts"] = message.thread_ts
        return self._envelope(
            "interactive",
            {
                "type": "block_actions",
                "user": {"id": user, "username": info["name"], "team_id": info["team_id"]},
                "api_app_id": APP_ID,
                "token": "verification-token",
                "container": container,
                "trigger_id": f"trig-{next(self._seq)}",
                "team": {"id": info["team_id"], "domain": "spindle-test"},
                "channel": {"id": channel, "name": self.channels.get(channel, "?")},
                "message": {
                    "type": "message",
                    "user": message.user,
                    "ts": ts,
                    "text": message.text,
                    "blocks": message.blocks,
                    **({"thread_ts": message.thread_ts} if message.thread_ts else {}),
                },
                "response_url": "http://127.0.0.1/response",
                "actions": [action],
            },
        )

    # --- the socket ---------------------------------------------------------------------------

    def take_outbox(self) -> list[dict[str, Any]]:
        out, self.outbox = self.outbox, []
        for envelope in out:
            self.unacked[envelope["envelope_id"]] = envelope
            self.delivered.append(envelope["envelope_id"])
        return out

    def ack(self, frame: dict[str, Any]) -> None:
        self.acks.append(frame)
        self.unacked.pop(str(frame.get("envelope_id")), None)

    def redeliver_unacked(self) -> None:
        """A new connection: what was delivered but never acknowledged comes again."""
        again = [dict(e, retry_attempt=e["retry_attempt"] + 1) for e in self.unacked.values()]
        self.unacked.clear()
        self.outbox = again + self.outbox

    # --- the Web API ----------------------------------------------------------------------------

    def check_fault(self, method: str) -> None:
        for fault in self.faults:
            if fault.times <= 0 or (fault.method is not None and fault.method != method):
                continue
            if fault.skip > 0:
                fault.skip -= 1
                continue
            fault.times -= 1
            if fault.status == 429:
                raise ApiError("ratelimited", 429, fault.retry_after)
            raise ApiError(fault.error or "internal_error", fault.status)

    def call(self, method: str, params: dict[str, Any], token: str) -> dict[str, Any]:
        expected = self.app_token if method == "apps.connections.open" else self.bot_token
        if token != expected:
            raise ApiError("invalid_auth")
        handler = getattr(self, "api_" + method.replace(".", "_"), None)
        if handler is None:
            raise ApiError("unknown_method", 404)
        result: dict[str, Any] = handler(params)
        return {"ok": True, **result}

    def _channel(self, params: dict[str, Any], name: str = "channel") -> str:
        channel = str(params.get(name, ""))
        if channel not in self.channels:
            raise ApiError("channel_not_found")
        return channel

    def _text(self, params: dict[str, Any]) -> str:
        text = str(params.get("text") or "")
        if len(text) > MAX_TEXT:
            raise ApiError("msg_too_long")
        if not text.strip() and not params.get("blocks"):
            raise ApiError("no_text")
        return text

    def _shown(self, message: SlackMessage, mrkdwn: bool) -> None:
        names = {u: info["name"] for u, info in self.users.items()}
        message.problems = problems(message.text)
        message.shown = visible(message.text, names) if mrkdwn else message.text

    def api_auth_test(self, params: dict[str, Any]) -> dict[str, Any]:
        return {
            "url": "https://spindle-test.slack.com/",
            "team": "Spindle Test",
            "user": "spindle",
            "team_id": TEAM,
            "user_id": BOT_USER,
            "bot_id": BOT_ID,
            "is_enterprise_install": False,
        }

    def api_apps_connections_open(self, params: dict[str, Any]) -> dict[str, Any]:
        return {"url": "ws-url-filled-in-by-the-server"}

    def api_chat_postMessage(self, params: dict[str, Any]) -> dict[str, Any]:  # noqa: N802
        channel = self._channel(params)
        text = self._text(params)
        blocks = check_blocks(_json(params.get("blocks")))
        thread_ts = params.get("thread_ts") or None
        if thread_ts is not None and (channel, str(thread_ts)) not in self.messages:
            raise ApiError("thread_not_found")
        message = SlackMessage(channel, self._ts(), BOT_USER, text, thread_ts, blocks)
        self._shown(message, str(params.get("mrkdwn", "true")).lower() != "false")
        self.messages[(channel, message.ts)] = message
        return {"channel": channel, "ts": message.ts, "message": self.message_event(message)}

    # Uploads as Slack takes them since files.upload was retired: the URL for the bytes, the
    # bytes POSTed there (``receive_upload``), then the share into a channel or thread.
    def api_files_getUploadURLExternal(self, params: dict[str, Any]) -> dict[str, Any]:  # noqa: N802
        filename = str(params.get("filename") or "")
        length = str(params.get("length") or "")
        if not filename or not length.isdigit() or int(length) < 1:
            raise ApiError("invalid_arguments")
        if int(length) > MAX_UPLOAD_BYTES:
            raise ApiError("file_too_large")
        file_id = f"F{next(self._ids)}"
        self.uploads[file_id] = {"name": filename, "length": int(length), "data": None}
        return {"file_id": file_id, "upload_url": f"/upload/v1/{file_id}"}  # server: absolute

    def receive_upload(self, file_id: str, data: bytes) -> int:
        """The bytes POSTed to an upload URL: the HTTP status Slack answers."""
        upload = self.uploads.get(file_id)
        if upload is None or upload["data"] is not None:
            return 404
        if len(data) != upload["length"]:
            return 400
        upload["data"] = data
        return 200

    def api_files_completeUploadExternal(self, params: dict[str, Any]) -> dict[str, Any]:  # noqa: N802
        files = _json(params.get("files"))
        if not isinstance(files, list) or not files:
            raise ApiError("invalid_arguments")
        shared = []
        for entry in files:
            upload = self.uploads.get(str(entry.get("id")) if isinstance(entry, dict) else "")
            if upload is None or upload["data"] is None:
                raise ApiError("file_not_found")
            title = str(entry.get("title") or upload["name"])
            shared.append({"id": entry["id"], "name": upload["name"], "title": title})
        channel = self._channel(params, "channel_id")
        thread_ts = params.get("thread_ts") or None
        if thread_ts is not None and (channel, str(thread_ts)) not in self.messages:
            raise ApiError("thread_not_found")
        text = str(params.get("initial_comment") or "")
        message = SlackMessage(channel, self._ts(), BOT_USER, text, thread_ts)
        message.files = [{**f, "data": self.uploads[f["id"]]["data"]} for f in shared]
        self._shown(message, True)
        self.messages[(channel, message.ts)] = message
        return {"files": shared}

    def api_chat_postEphemeral(self, params: dict[str, Any]) -> dict[str, Any]:  # noqa: N802
        channel = self._channel(params)
        user = str(params.get("user", ""))
        if user not in self.users:
            raise ApiError("user_not_found")
        thread_ts = params.get("thread_ts") or None
        message = SlackMessage(channel, self._ts(), BOT_USER, self._text(params), thread_ts)
        message.ephemeral_to = user
        self._shown(message, True)
        self.messages[(channel, message.ts)] = message
        return {"message_ts": message.ts}

    def _own(self, params: dict[str, Any]) -> SlackMessage:
        channel = self._channel(params)
        message = self.messages.get((channel, str(params.get("ts", ""))))
        if message is None or message.deleted:
            raise ApiError("message_not_found")
        if not message.bot:
            raise ApiError("cant_update_message")
        return message

    def api_chat_update(self, params: dict[str, Any]) -> dict[str, Any]:
        message = self._own(params)
        text = self._text(params)
        blocks = params.get("blocks")
        if blocks is not None:  # without blocks, Slack keeps the message's own
            message.blocks = check_blocks(_json(blocks))
        message.text = text
        self._shown(message, True)
        message.edits += 1
        return {"channel": message.channel, "ts": message.ts, "text": text}

    def api_chat_delete(self, params: dict[str, Any]) -> dict[str, Any]:
        message = self._own(params)
        message.deleted = True
        return {"channel": message.channel, "ts": message.ts}

    def api_conversations_replies(self, params: dict[str, Any]) -> dict[str, Any]:
        channel = self._channel(params)
        ts = str(params.get("ts", ""))
        parent = self.messages.get((channel, ts))
        if parent is None:
            raise ApiError("thread_not_found")
        oldest = float(params.get("oldest") or 0)
        replies = sorted(
            (
                m
                for m in self.messages.values()
                if m.channel == channel
                and m.thread_ts == ts
                and not m.deleted
                and m.ephemeral_to is None
                and float(m.ts) > oldest
            ),
            key=lambda m: float(m.ts),
        )
        # Slack pages with an opaque cursor; here it is the offset into the replies.
        start, limit = _page(params, default=1000)
        page = replies[start : start + limit]
        more = start + limit < len(replies)
        out = [self.message_event(parent)] + [self.message_event(m) for m in page]
        return {
            "messages": out,
            "has_more": more,
            "response_metadata": {"next_cursor": _cursor(start + limit) if more else ""},
        }

    def api_conversations_history(self, params: dict[str, Any]) -> dict[str, Any]:
        """The channel's top-level messages newer than ``oldest``, newest first."""
        channel = self._channel(params)
        oldest = float(params.get("oldest") or 0)
        found = sorted(
            (
                m
                for m in self.messages.values()
                if m.channel == channel
                and m.thread_ts in (None, m.ts)
                and not m.deleted
                and m.ephemeral_to is None
                and float(m.ts) > oldest
            ),
            key=lambda m: -float(m.ts),
        )
        start, limit = _page(params, default=100)
        more = start + limit < len(found)
        return {
            "messages": [self.message_event(m) for m in found[start : start + limit]],
            "has_more": more,
            "response_metadata": {"next_cursor": _cursor(start + limit) if more else ""},
        }

    def api_assistant_threads_setTitle(self, params: dict[str, Any]) -> dict[str, Any]:  # noqa: N802
        if not self.assistant:
            raise ApiError("not_allowed_token_type")
        channel = self._channel(params, "channel_id")
        self.titles.append((channel, str(params.get("thread_ts")), str(params.get("title"))))
        return {}

    def api_assistant_threads_setStatus(self, params: dict[str, Any]) -> dict[str, Any]:  # noqa: N802
        if not self.assistant:
            raise ApiError("not_allowed_token_type")
        channel = self._channel(params, "channel_id")
        self.statuses.append((channel, str(params.get("thread_ts")), str(params.get("status"))))
        return {}


def _page(params: dict[str, Any], default: int) -> tuple[int, int]:
    """Where a page starts (from ``cursor``) and how long it is (``limit``, at most 1,000
    as Slack caps it)."""
    cursor = str(params.get("cursor") or "")
    try:
        start = int(base64.b64decode(cursor).decode().removeprefix("offset:")) if cursor else 0
    except (ValueError, UnicodeDecodeError) as error:
        raise ApiError("invalid_cursor") from error
    limit = min(max(int(params.get("limit") or default), 1), 1000)
    return start, limit


def _cursor(offset: int) -> str:
    return base64.b64encode(f"offset:{offset}".encode()).decode()
