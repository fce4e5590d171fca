"""Pure translation of WhatsApp webhook deliveries: the signature check, the delivery JSON
-> ``Inbound`` messages, commands, and action ids. No I/O, nothing raises on odd input.

- **Signature**: Meta signs the raw body: ``X-Hub-Signature-256: sha256=<hex HMAC-SHA256
  of the body with the app secret>``; ``signature_ok`` compares with ``hmac.compare_digest``.
- **Deliveries** (``parse_delivery``): ``entry[].changes[].value`` with ``messages[]``
  (text, interactive ``button_reply``/``list_reply``, a template ``button``, audio (its
  media id and type, for the transcription) and other media) and ``contacts[]`` (the
  sender's profile name). Status updates (sent, delivered, read) and anything not
  understood are skipped and counted, never raised.
- **Threads**: a user's chat is ``wa:<wa_id>``, a group's ``wa:g:<group_id>``.
- **Action ids** come from WhatsApp's message ids: ``wa-<wamid>``, so a delivery Meta sends
  again (it retries whatever was not answered 200 in time) is the same action, which the
  core drops; ingress also drops it by id before that (``bot``).
- **Commands** are plain text: ``/queue …``, ``/abort``, ``/status``, ``/clear_queue [n]``,
  ``/model <name>``, ``/workdir <path>``, ``/end``, ``/help``, ``/<agent> start|resume|
  conversations``; a message ending in `` queue`` waits its turn.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any, Literal

from threadspindle.effects.whatsapp_platform import whatsapp_thread_id
from threadspindle.runtime.core.frozen import Frozen

__all__ = [
    "Delivery",
    "Inbound",
    "ParsedCommand",
    "action_id",
    "parse_command",
    "parse_delivery",
    "sign",
    "signature_ok",
]

Kind = Literal["text", "choice", "audio", "file", "media", "other"]


class Inbound(Frozen):
    """One received message, as much of it as Spindle uses."""

    wamid: str
    sender: str  # the sender's wa_id
    name: str  # their profile name (the wa_id when the delivery names none)
    group_id: str | None = None
    phone_number_id: str = ""  # the business number it was sent to
    timestamp: int = 0
    kind: Kind = "text"
    text: str = ""  # the text, or a choice's title
    choice_id: str | None = None  # a button or list row's id
    context_id: str | None = None  # the message it answers (a pressed button's message)
    # An audio message's or a file's media id (downloaded by the platform) and its type as
    # WhatsApp names it ("audio/ogg; codecs=opus").
    media_id: str | None = None
    mime_type: str | None = None
    filename: str | None = None  # a document's file name (an image has none)

    @property
    def thread_id(self) -> str:
        if self.group_id is not None:
            return whatsapp_thread_id(self.group_id, group=True)
        return whatsapp_thread_id(self.sender)


class Delivery(Frozen):
    """A delivery's messages and how much of it was skipped."""

    messages: tuple[Inbound, ...] = ()
    statuses: int = 0  # sent/delivered/read/failed reports: nothing to do
    skipped: int = 0  # parts not understood


class ParsedCommand(Frozen):
    name: str  # lower case
    args: str  # the rest, stripped


def sign(app_secret: str, body: bytes) -> str:
    """The ``X-Hub-Signature-256`` value Meta sends with ``body``."""
    return "sha256=" + hmac.new(app_secret.encode(), body, hashlib.sha256).hexdigest()


def signature_ok(app_secret: str, body: bytes, header: str | None) -> bool:
    """Whether ``header`` is ``body``'s signature with ``app_secret`` (constant time)."""
    if not header or not app_secret:
        return False
    return hmac.compare_digest(sign(app_secret, body).encode(), header.strip().encode())


def action_id(wamid: str) -> str:
    return f"wa-{wamid}"


def parse_command(text: str) -> ParsedCommand | None:
    """``/name args`` -> the command; None for anything else."""
    if not text.startswith("/") or len(text) < 2:
        return None
    head, _, rest = text[1:].partition(" ")
    head, newline, tail = head.partition("\n")
    if newline:
        rest = tail + (" " + rest if rest else "")
    if not head or not head.replace("_", "").replace("-", "").isalnum():
        return None
    return ParsedCommand(name=head.lower().replace("-", "_"), args=rest.strip())


def parse_delivery(body: bytes) -> Delivery:
    """Every message of a webhook delivery; see the module docstring."""
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):  # nested too deep: not Meta's
        return Delivery(skipped=1)
    messages: list[Inbound] = []
    statuses = skipped = 0
    for value in _values(data):
        if value is None:
            skipped += 1
            continue
        statuses += len(_list(value.get("statuses")))
        metadata = value.get("metadata")
        phone_id = str(metadata.get("phone_number_id", "")) if isinstance(metadata, dict) else ""
        names = {
            str(c.get("wa_id")): str((c.get("profile") or {}).get("name") or "")
            for c in _list(value.get("contacts"))
            if isinstance(c, dict) and isinstance(c.get("profile") or {}, dict)
        }
        for raw in _list(value.get("messages")):
            try:
                inbound = _message(raw, names, phone_id)
            except (ValueError, TypeError, OverflowError):  # (a ValidationError too)
                inbound = None  # a value of a shape Meta never sends: that message only
            if inbound is None:
                skipped += 1
            else:
                messages.append(inbound)
    return Delivery(messages=tuple(messages), statuses=statuses, skipped=skipped)


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _values(data: Any) -> list[dict[str, Any] | None]:
    """Each change's ``value`` (None for a change that is not a message change)."""
    out: list[dict[str, Any] | None] = []
    if not isinstance(data, dict):
        return [None]
    for entry in _list(data.get("entry")):
        changes = _list(entry.get("changes")) if isinstance(entry, dict) else []
        for change in changes:
            value = change.get("value") if isinstance(change, dict) else None
            ok = isinstance(value, dict) and change.get("field", "messages") == "messages"
            out.append(value if ok else None)
    return out


def _message(raw: Any, names: dict[str, str], phone_id: str) -> Inbound | None:
    if not isinstance(raw, dict):
        return None
    wamid, sender, kind = raw.get("id"), raw.get("from"), raw.get("type")
    if not isinstance(wamid, str) or not wamid or not isinstance(sender, str) or not sender:
        return None
    context = raw.get("context")
    group = raw.get("group_id")
    common: dict[str, Any] = {
        "wamid": wamid,
        "sender": sender,
        "name": names.get(sender) or sender,
        "group_id": group if isinstance(group, str) and group else None,
        "phone_number_id": phone_id,
        "timestamp": _int(raw.get("timestamp")),
        "context_id": _text(context.get("id")) if isinstance(context, dict) else None,
    }
    if kind == "text":
        body = (raw.get("text") or {}).get("body") if isinstance(raw.get("text"), dict) else None
        if not isinstance(body, str):
            return None
        return Inbound(**common, kind="text", text=body)
    if kind == "interactive":
        interactive = raw.get("interactive")
        if not isinstance(interactive, dict):
            return None
        reply = interactive.get("button_reply") or interactive.get("list_reply")
        if not isinstance(reply, dict) or not isinstance(reply.get("id"), str):
            return None
        title = reply.get("title")
        return Inbound(
            **common,
            kind="choice",
            choice_id=reply["id"],
            text=title if isinstance(title, str) else "",
        )
    if kind == "button":  # a template's quick-reply button
        button = raw.get("button")
        if not isinstance(button, dict):
            return None
        text = button.get("text")
        payload = button.get("payload")
        return Inbound(
            **common,
            kind="choice",
            choice_id=payload if isinstance(payload, str) else None,
            text=text if isinstance(text, str) else "",
        )
    if kind in ("audio", "voice"):
        audio = raw.get(kind)
        media = audio.get("id") if isinstance(audio, dict) else None
        mime = audio.get("mime_type") if isinstance(audio, dict) else None
        return Inbound(
            **common,
            kind="audio",
            media_id=media if isinstance(media, str) and media else None,
            mime_type=mime if isinstance(mime, str) and mime else None,
        )
    if kind in ("image", "video", "document"):
        media = raw.get(kind)
        if isinstance(media, dict) and isinstance(media.get("id"), str) and media["id"]:
            mime, caption, name = (
                media.get("mime_type"),
                media.get("caption"),
                media.get("filename"),
            )
            return Inbound(
                **common,
                kind="file",
                media_id=media["id"],
                mime_type=mime if isinstance(mime, str) and mime else None,
                text=caption if isinstance(caption, str) else "",
                filename=name if isinstance(name, str) and name else None,
            )
    if kind in ("image", "video", "document", "sticker", "location", "contacts"):
        return Inbound(**common, kind="media")
    return Inbound(**common, kind="other")


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):  # (int(1e400) overflows)
        return 0


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None
