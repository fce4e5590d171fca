"""``FakeWhatsApp``: the WhatsApp Cloud API as Spindle sees it, on 127.0.0.1, for tests.

Two halves, each in its own thread (so it serves whatever the test runs):

- **The Graph API** (``http.server`` on port 0): ``GET /v23.0/{phone_id}`` (the number, for
  ``spindle doctor``) and ``POST /v23.0/{phone_id}/messages`` with
  ``Authorization: Bearer <token>`` and ``"messaging_product": "whatsapp"``. It takes text
  (1-4096 characters), interactive reply buttons (1-3, titles 1-20 characters, distinct
  ids), interactive lists (1-10 rows in all, row titles up to 24, descriptions up to 72,
  the menu button up to 20), interactive bodies up to 1024, reply ``context``, read
  receipts (``"status": "read"``) and the typing indicator, each only for a message the
  user sent. It answers ``{"messages": [{"id": "wamid…"}]}`` or the Graph error shape
  (``{"error": {"message", "type", "code", "fbtrace_id"}}``); a wrong token is 401 code
  190. ``inject_fault`` fails the next calls: 429 with code 130429 (throttled, with a
  ``Retry-After`` header when asked) or a 5xx.
- **Media**: ``GET /v23.0/{media_id}`` answers a received medium's ``url`` (on this
  server), ``mime_type``, ``sha256`` and ``file_size``; ``GET`` of that URL with the bearer
  token answers its bytes (the Cloud API's two-step download). ``voice`` keeps its audio.
- **Meta's webhook side**: ``say``/``click``/``voice`` make a user's message in the real
  delivery shape (``object``, ``entry[].changes[].value`` with ``metadata``,
  ``contacts[]``, ``messages[]``) and queue it; one sender thread POSTs each delivery in
  order to ``webhook_url`` signed with ``X-Hub-Signature-256`` and retries it (as Meta
  does) until it is answered 200. ``redeliver`` sends an answered delivery again (Meta's
  retry after a lost answer); ``post`` sends any body with any signature, synchronously.
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import json
import queue
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs

import httpx

from threadspindle.testkit.http_thread import serving

__all__ = ["APP_SECRET", "PHONE_ID", "TOKEN", "VERIFY_TOKEN", "FakeWhatsApp", "WaMessage"]

TOKEN = "EAAfake-whatsapp-token"
APP_SECRET = "fake-app-secret"
VERIFY_TOKEN = "fake-verify-token"
PHONE_ID = "106540352242922"
BUSINESS_NUMBER = "15550783881"
VERSION = "v23.0"
MEDIA_PATH = "/whatsapp_business/attachments/"  # where media URLs point (lookaside's path)


@dataclass
class WaMessage:
    """One message of a chat, the user's or the business's (``from_bot``)."""

    id: str
    chat: str  # the user's wa_id (or a group id)
    from_bot: bool
    type: str  # text | interactive | voice | …
    text: str  # the text, an interactive body, or a choice's title
    buttons: list[dict[str, str]] = field(default_factory=list)  # {"id", "title"}
    rows: list[dict[str, str]] = field(default_factory=list)  # {"id", "title", ...}
    context: str | None = None  # the message it quotes
    at: float = 0.0

    def choices(self) -> list[dict[str, str]]:
        return self.buttons or self.rows


@dataclass
class Fault:
    status: int
    times: int
    code: int
    retry_after: float | None = None
    kinds: tuple[str, ...] = ("send",)  # send | read | typing


@dataclass(frozen=True)
class Call:
    at: float
    kind: str  # send | read | typing | refused
    status: int
    body: dict[str, Any]


@dataclass
class Delivery:
    body: bytes
    attempts: int = 0
    statuses: list[int] = field(default_factory=list)
    done: threading.Event = field(default_factory=threading.Event)


def signature(app_secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(app_secret.encode(), body, hashlib.sha256).hexdigest()


class GraphError(Exception):
    def __init__(
        self, status: int, code: int, message: str, retry_after: float | None = None
    ) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message
        self.retry_after = retry_after

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": "OAuthException",
                "code": self.code,
                "fbtrace_id": "AfakeTrace",
            }
        }


class FakeWhatsApp:
    """Use as a context manager (``with FakeWhatsApp() as fake:``); see the module docstring."""

    def __init__(
        self,
        *,
        token: str = TOKEN,
        app_secret: str = APP_SECRET,
        phone_id: str = PHONE_ID,
        retry_every_s: float = 0.2,
    ) -> None:
        self.token = token
        self.app_secret = app_secret
        self.phone_id = phone_id
        self.lock = threading.RLock()
        self.chats: dict[str, list[WaMessage]] = {}
        self.names: dict[str, str] = {}
        self.calls: list[Call] = []
        self.reads: list[str] = []  # message ids marked read
        self.typing: list[str] = []  # message ids the indicator was shown for
        self.faults: list[Fault] = []
        self.media: dict[str, tuple[bytes, str]] = {}  # media id -> (bytes, type)
        self.media_lookups: list[str] = []  # GET /{media-id}
        self.media_downloads: list[str] = []  # GET of the media URL
        self.deliveries: list[Delivery] = []
        self.webhook_url: str | None = None
        self.retry_every_s = retry_every_s
        self._ids = itertools.count(1)
        self._outbox: queue.Queue[Delivery | None] = queue.Queue()
        self._server: ThreadingHTTPServer | None = None
        self._threads: list[threading.Thread] = []

    # --- lifecycle ------------------------------------------------------------------------

    def __enter__(self) -> FakeWhatsApp:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> FakeWhatsApp:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length)
                status, body, headers = fake._handle(
                    self.path, self.headers.get("authorization", ""), raw
                )
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for name, value in headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                status, body = fake._lookup(self.path, self.headers.get("authorization", ""))
                binary = isinstance(body, tuple)  # a medium's (bytes, type)
                data = body[0] if binary else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("content-type", body[1] if binary else "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._threads = [
            serving(self._server, "fake-whatsapp-graph"),
            threading.Thread(target=self._send_loop, name="fake-whatsapp-hooks", daemon=True),
        ]
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        self._outbox.put(None)
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        for thread in self._threads:
            thread.join(timeout=10)
        self._threads = []

    @property
    def base_url(self) -> str:
        """The Graph API's base URL (``…/v23.0``), as ``[whatsapp] base_url`` takes it."""
        assert self._server is not None, "not started"
        return f"http://127.0.0.1:{self._server.server_address[1]}/{VERSION}"

    # --- the Graph API ----------------------------------------------------------------------

    def inject_fault(
        self,
        status: int,
        *,
        times: int = 1,
        code: int | None = None,
        retry_after: float | None = None,
        kinds: tuple[str, ...] = ("send",),
    ) -> None:
        """Fail the next ``times`` calls of ``kinds``: a 429 is Graph's throttling (code
        130429), a 5xx a server error (code 2) unless ``code`` says otherwise."""
        made = code if code is not None else (130429 if status == 429 else 2)
        with self.lock:
            self.faults.append(Fault(status, times, made, retry_after, kinds))

    def _lookup(self, path: str, auth: str) -> tuple[int, Any]:
        """``GET /v23.0/{phone_id}``: the phone number (what ``spindle doctor`` asks);
        ``GET /v23.0/{media_id}``: a medium's URL; ``GET`` that URL: its bytes."""
        route, _, query = path.partition("?")
        if auth != f"Bearer {self.token}":
            return 401, GraphError(401, 190, "Invalid OAuth access token").body()
        if route == MEDIA_PATH:
            media_id = parse_qs(query).get("mid", [""])[0]
            with self.lock:
                found = self.media.get(media_id)
                if found is not None:
                    self.media_downloads.append(media_id)
            if found is None:
                return 404, GraphError(404, 100, "Media not found").body()
            return 200, found
        media_id = route.removeprefix(f"/{VERSION}/")
        with self.lock:
            found = self.media.get(media_id)
            if found is not None:
                self.media_lookups.append(media_id)
        if found is not None:
            audio, mime = found
            return 200, {
                "messaging_product": "whatsapp",
                "url": f"{self.base_url.rsplit('/', 1)[0]}{MEDIA_PATH}?mid={media_id}&ext=1",
                "mime_type": mime,
                "sha256": hashlib.sha256(audio).hexdigest(),
                "file_size": len(audio),
                "id": media_id,
            }
        if route != f"/{VERSION}/{self.phone_id}":
            return 400, GraphError(400, 100, "Unsupported get request").body()
        return 200, {
            "display_phone_number": "+1 555-078-3881",
            "verified_name": "Spindle Test",
            "id": self.phone_id,
        }

    def _handle(self, path: str, auth: str, raw: bytes) -> tuple[int, Any, dict[str, str]]:
        try:
            return 200, self._api(path, auth, raw), {}
        except GraphError as error:
            headers: dict[str, str] = {}
            with self.lock:
                self.calls.append(Call(time.time(), "refused", error.status, {"raw": raw[:200]}))
                if error.retry_after is not None:
                    headers["Retry-After"] = str(error.retry_after)
            return error.status, error.body(), headers

    def _api(self, path: str, auth: str, raw: bytes) -> Any:
        if path != f"/{VERSION}/{self.phone_id}/messages":
            raise GraphError(400, 100, f"Unsupported post request: {path}")
        if auth != f"Bearer {self.token}":
            raise GraphError(401, 190, "Invalid OAuth access token")
        try:
            body = json.loads(raw)
        except ValueError as error:
            raise GraphError(400, 100, "Invalid JSON") from error
        if not isinstance(body, dict) or body.get("messaging_product") != "whatsapp":
            raise GraphError(400, 100, "messaging_product must be whatsapp")
        kind = "send"
        if body.get("status") == "read":
            kind = "typing" if "typing_indicator" in body else "read"
        with self.lock:
            self._fault(kind)
            if kind != "send":
                return self._read(body, kind)
            message = self._message(body)
            self.chats.setdefault(message.chat, []).append(message)
            self.calls.append(Call(time.time(), "send", 200, body))
            return {
                "messaging_product": "whatsapp",
                "contacts": [{"input": message.chat, "wa_id": message.chat}],
                "messages": [{"id": message.id}],
            }

    def _fault(self, kind: str) -> None:
        for fault in self.faults:
            if fault.times > 0 and kind in fault.kinds:
                fault.times -= 1
                text = (
                    "(#130429) Rate limit hit"
                    if fault.status == 429
                    else "An unexpected error has occurred. Please retry."
                )
                raise GraphError(fault.status, fault.code, text, fault.retry_after)

    def _user_message(self, wamid: Any) -> WaMessage | None:
        for messages in self.chats.values():
            for message in messages:
                if message.id == wamid and not message.from_bot:
                    return message
        return None

    def _read(self, body: dict[str, Any], kind: str) -> dict[str, Any]:
        if self._user_message(body.get("message_id")) is None:
            raise GraphError(400, 100, "Invalid parameter: message_id")
        if kind == "typing" and body["typing_indicator"] != {"type": "text"}:
            raise GraphError(400, 100, "Invalid parameter: typing_indicator")
        (self.typing if kind == "typing" else self.reads).append(body["message_id"])
        self.calls.append(Call(time.time(), kind, 200, body))
        return {"success": True}

    def _message(self, body: dict[str, Any]) -> WaMessage:
        to = body.get("to")
        if not isinstance(to, str) or not to:
            raise GraphError(400, 100, "Invalid parameter: to")
        context = body.get("context")
        quoted = context.get("message_id") if isinstance(context, dict) else None
        message = WaMessage(
            id=f"wamid.bot{next(self._ids)}",
            chat=to,
            from_bot=True,
            type=str(body.get("type")),
            text="",
            context=quoted,
            at=time.time(),
        )
        if message.type == "text":
            text = (body.get("text") or {}).get("body")
            if not isinstance(text, str) or not text.strip() or len(text) > 4096:
                raise GraphError(400, 100, "Invalid parameter: text.body (1-4096 characters)")
            message.text = text
        elif message.type == "interactive":
            self._interactive(body.get("interactive"), message)
        else:
            raise GraphError(400, 100, f"Unsupported message type {message.type!r}")
        return message

    def _interactive(self, interactive: Any, message: WaMessage) -> None:
        if not isinstance(interactive, dict):
            raise GraphError(400, 100, "Invalid parameter: interactive")
        text = (interactive.get("body") or {}).get("text")
        if not isinstance(text, str) or not text.strip() or len(text) > 1024:
            raise GraphError(400, 100, "Invalid parameter: interactive.body.text (1-1024)")
        message.text = text
        action = interactive.get("action") or {}
        if interactive.get("type") == "button":
            buttons = [b.get("reply", {}) for b in action.get("buttons", [])]
            if not 1 <= len(buttons) <= 3:
                raise GraphError(400, 131009, "Buttons count is invalid (1-3)")
            for b in buttons:
                if not 1 <= len(b.get("title", "")) <= 20 or not b.get("id"):
                    raise GraphError(400, 131009, "Button title length invalid (1-20)")
            if len({b["id"] for b in buttons}) != len(buttons):
                raise GraphError(400, 131009, "Button ids must be unique")
            message.buttons = [{"id": b["id"], "title": b["title"]} for b in buttons]
        elif interactive.get("type") == "list":
            if not 1 <= len(action.get("button", "")) <= 20:
                raise GraphError(400, 131009, "List button text invalid (1-20)")
            rows = [r for s in action.get("sections", []) for r in s.get("rows", [])]
            if not 1 <= len(rows) <= 10:
                raise GraphError(400, 131009, "Total row count exceed max allowed (1-10)")
            for r in rows:
                if not 1 <= len(r.get("title", "")) <= 24 or not r.get("id"):
                    raise GraphError(400, 131009, "Row title length invalid (1-24)")
                if len(r.get("description", "")) > 72:
                    raise GraphError(400, 131009, "Row description too long (72)")
            message.rows = [dict(r) for r in rows]
        else:
            raise GraphError(400, 100, "Unsupported interactive type")

    # --- reading chats back -------------------------------------------------------------------

    def messages(self, chat: str) -> list[WaMessage]:
        with self.lock:
            return list(self.chats.get(chat, []))

    def bot_messages(self, chat: str) -> list[WaMessage]:
        return [m for m in self.messages(chat) if m.from_bot]

    def message(self, wamid: str) -> WaMessage:
        with self.lock:
            for messages in self.chats.values():
                for message in messages:
                    if message.id == wamid:
                        return message
        raise KeyError(wamid)

    def sends(self) -> list[Call]:
        with self.lock:
            return [c for c in self.calls if c.kind == "send"]

    # --- users: deliveries to the webhook ----------------------------------------------------

    def add_user(self, wa_id: str, name: str) -> str:
        with self.lock:
            self.names[wa_id] = name
            self.chats.setdefault(wa_id, [])
        return wa_id

    def _inbound(self, chat: str, sender: str, kind: str, content: dict[str, Any]) -> bytes:
        wamid = f"wamid.user{next(self._ids)}"
        raw: dict[str, Any] = {
            "from": sender,
            "id": wamid,
            "timestamp": str(int(time.time())),
            "type": kind,
            **content,
        }
        with self.lock:
            self.chats.setdefault(chat, []).append(
                WaMessage(
                    id=wamid,
                    chat=chat,
                    from_bot=False,
                    type=kind,
                    text=_shown(kind, content),
                    context=(content.get("context") or {}).get("id"),
                    at=time.time(),
                )
            )
            name = self.names.get(sender, sender)
        return self.delivery_body(sender, name, [raw])

    def delivery_body(self, sender: str, name: str, messages: list[dict[str, Any]]) -> bytes:
        """A delivery in the Cloud API's webhook shape."""
        value = {
            "messaging_product": "whatsapp",
            "metadata": {"display_phone_number": BUSINESS_NUMBER, "phone_number_id": self.phone_id},
            "contacts": [{"profile": {"name": name}, "wa_id": sender}],
            "messages": messages,
        }
        body = {
            "object": "whatsapp_business_account",
            "entry": [
                {"id": "102290129340398", "changes": [{"value": value, "field": "messages"}]}
            ],
        }
        return json.dumps(body).encode()

    def say(self, wa_id: str, text: str) -> Delivery:
        """A text message from ``wa_id`` in their chat, delivered to the webhook."""
        return self.deliver(self._inbound(wa_id, wa_id, "text", {"text": {"body": text}}))

    def voice(self, wa_id: str, audio: bytes = b"SPEECH:hello") -> Delivery:
        """A voice message (``audio`` with ``voice``) from ``wa_id``, its bytes ``audio``
        kept for the media download."""
        media_id = f"10138596{next(self._ids):08d}"
        mime = "audio/ogg; codecs=opus"
        with self.lock:
            self.media[media_id] = (audio, mime)
        content = {"id": media_id, "mime_type": mime, "voice": True}
        return self.deliver(self._inbound(wa_id, wa_id, "audio", {"audio": content}))

    def file(
        self,
        wa_id: str,
        data: bytes,
        mime: str,
        *,
        filename: str | None = None,
        caption: str | None = None,
    ) -> Delivery:
        """An image (no ``filename``) or a document from ``wa_id``, with an optional
        caption, its bytes kept for the media download."""
        media_id = f"10138596{next(self._ids):08d}"
        with self.lock:
            self.media[media_id] = (data, mime)
        kind = "document" if filename is not None else "image"
        content: dict[str, Any] = {"id": media_id, "mime_type": mime, "sha256": "x"}
        if filename is not None:
            content["filename"] = filename
        if caption is not None:
            content["caption"] = caption
        return self.deliver(self._inbound(wa_id, wa_id, kind, {kind: content}))

    def click(self, wa_id: str, message_id: str, title: str) -> Delivery:
        """``wa_id`` presses the button (or list row) titled ``title`` on ``message_id``."""
        message = self.message(message_id)
        (choice,) = [c for c in message.choices() if c["title"] == title]
        if message.buttons:
            reply = {"type": "button_reply", "button_reply": {"id": choice["id"], "title": title}}
        else:
            row = {
                "id": choice["id"],
                "title": title,
                **{k: v for k, v in choice.items() if k == "description"},
            }
            reply = {"type": "list_reply", "list_reply": row}
        content = {
            "context": {"from": BUSINESS_NUMBER, "id": message_id},
            "interactive": reply,
        }
        return self.deliver(self._inbound(wa_id, wa_id, "interactive", content))

    def deliver(self, body: bytes) -> Delivery:
        """Queue ``body`` for the webhook (signed, retried until answered 200)."""
        delivery = Delivery(body)
        with self.lock:
            self.deliveries.append(delivery)
        self._outbox.put(delivery)
        return delivery

    def redeliver(self, delivery: Delivery) -> Delivery:
        """Send an answered delivery again, as Meta does when its answer was lost."""
        return self.deliver(delivery.body)

    def post(self, body: bytes, signature_header: str | None = "sign") -> int:
        """POST ``body`` to the webhook now (blocking: call it from a worker thread), signed
        (``"sign"``), unsigned (None) or with the header given; the HTTP status."""
        assert self.webhook_url is not None, "no webhook_url"
        headers = {"content-type": "application/json"}
        if signature_header == "sign":
            headers["x-hub-signature-256"] = signature(self.app_secret, body)
        elif signature_header is not None:
            headers["x-hub-signature-256"] = signature_header
        return httpx.post(self.webhook_url, content=body, headers=headers, timeout=30).status_code

    def _send_loop(self) -> None:
        while True:
            delivery = self._outbox.get()
            if delivery is None:
                return
            while True:
                delivery.attempts += 1
                try:
                    status = self.post(delivery.body) if self.webhook_url else 0
                except (httpx.HTTPError, OSError):
                    status = 0
                delivery.statuses.append(status)
                if status == 200:
                    delivery.done.set()
                    break
                if self._stopping():
                    return
                time.sleep(self.retry_every_s)

    def _stopping(self) -> bool:
        return self._server is None


def _shown(kind: str, content: dict[str, Any]) -> str:
    if kind == "text":
        return str(content["text"]["body"])
    if kind == "interactive":
        reply = content["interactive"]
        return str(reply.get("button_reply", reply.get("list_reply", {})).get("title", ""))
    return f"<{kind}>"
