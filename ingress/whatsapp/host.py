"""The WhatsApp webhook: an ASGI app served by hypercorn's trio worker, and the connection
around it (``hosted_whatsapp``).

``hosted_whatsapp(settings, runtime)`` is an async context manager: it binds the webhook's
socket first (a busy port is one clean ``OSError``), makes the Graph API client (httpx),
the ``WhatsAppPlatform`` and the ``WhatsAppIngress``, serves the webhook and the read
receipts in its nursery, and yields a ``WhatsAppConnection``. On exit the server stops and
the HTTP client is closed.

``WebhookApp`` answers:

- ``GET <path>?hub.mode=subscribe&hub.verify_token=T&hub.challenge=C``: Meta's
  verification handshake: ``C`` when ``T`` is the configured verify token, else 403;
- ``POST <path>``: a delivery. Its ``X-Hub-Signature-256`` must be the HMAC-SHA256 of the
  raw body with the app secret (``translate.signature_ok``): a bad or missing one is 401
  and nothing is parsed. A signed delivery is handled (one at a time, in order) and
  answered 200 only once every action it made is durable; a failure is 500, so Meta
  delivers it again (its messages are dropped by id if they were handled after all);
- anything else 404/405; a body over ``MAX_BODY`` bytes 413.

Nobody is authenticated until the whole body is read, so reading is bounded: a body not
read within ``body_timeout_s`` is 408, at most ``bodies_read_at_once`` are read at a time
(503 past that; Meta retries), and hypercorn's ``read_timeout`` drops a connection that
sends nothing (settings in ``WhatsAppSettings``). Without them a few thousand connections
that send one byte of body and stall held the process's file descriptors for ever.
"""

from __future__ import annotations

import hmac
import logging
import math
import os
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

import httpx
import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.trio import serve as hypercorn_serve

from threadspindle.effects.connection_cap import cap_connections
from threadspindle.effects.whatsapp_platform import WHATSAPP_LIMITS, WhatsAppPlatform
from threadspindle.ingress.whatsapp import translate
from threadspindle.ingress.whatsapp.bot import RuntimePort, WhatsAppIngress
from threadspindle.ingress.whatsapp.settings import WhatsAppSettings

__all__ = ["MAX_BODY", "WebhookApp", "WhatsAppConnection", "hosted_whatsapp", "whatsapp_limits"]

_log = logging.getLogger(__name__)

MAX_BODY = 1 << 20  # Meta's deliveries are a few KiB
UNSIGNED_WARNING_S = 60.0  # refused signatures are logged at most this often

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


def whatsapp_limits(settings: WhatsAppSettings) -> Any:
    """WhatsApp's limits with the configured least interval between a stream's messages."""
    return WHATSAPP_LIMITS.model_copy(
        update={"min_edit_interval_s": settings.min_message_interval_s}
    )


class WebhookApp:
    """The ASGI app; see the module docstring. ``statistics`` counts what it answered."""

    def __init__(self, settings: WhatsAppSettings, ingress: WhatsAppIngress) -> None:
        self.settings = settings
        self.ingress = ingress
        self._lock = trio.Lock()  # deliveries in order, one at a time
        self._reading = 0  # bodies being read now (bounded: see the module docstring)
        self.verified = 0
        self.accepted = 0
        self.refused_signatures = 0
        self.failed = 0
        self.too_slow = 0  # bodies not read in time (408)
        self.busy = 0  # refused because too many bodies were being read (503)
        self._unsigned_unsaid = 0  # refused signatures not yet in a warning
        self._unsigned_said_at = -math.inf

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        if scope.get("path") != self.settings.webhook_path:
            await _answer(send, 404, b"not found")
            return
        if scope["method"] == "GET":
            await self._verify(scope, send)
        elif scope["method"] == "POST":
            await self._deliver(scope, receive, send)
        else:
            await _answer(send, 405, b"method not allowed")

    async def _verify(self, scope: Scope, send: Send) -> None:
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        mode = query.get("hub.mode", [""])[0]
        token = query.get("hub.verify_token", [""])[0]
        challenge = query.get("hub.challenge", [""])[0]
        expected = self.settings.verify_token.encode()
        if mode == "subscribe" and expected and hmac.compare_digest(token.encode(), expected):
            self.verified += 1
            await _answer(send, 200, challenge.encode())
        else:
            await _answer(send, 403, b"forbidden")

    async def _deliver(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            body = await self._bounded_read(receive)
        except _Disconnected:
            return  # nobody to answer
        except _TooSlow:
            self.too_slow += 1
            await _answer(send, 408, b"too slow")
            return
        except _Busy:
            self.busy += 1
            await _answer(send, 503, b"busy, try again")
            return
        if body is None:
            await _answer(send, 413, b"too large")
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        if not translate.signature_ok(
            self.settings.app_secret, body, headers.get("x-hub-signature-256")
        ):
            self.refused_signatures += 1
            self._say_unsigned()
            await _answer(send, 401, b"bad signature")
            return
        delivery = translate.parse_delivery(body)
        try:
            async with self._lock:
                await self.ingress.handle_delivery(delivery)
        except Exception:
            self.failed += 1
            _log.exception("could not handle a webhook delivery (Meta will deliver it again)")
            await _answer(send, 500, b"try again")
            return
        self.accepted += 1
        await _answer(send, 200, b"ok")

    def _say_unsigned(self) -> None:
        """Warn of refused signatures: the first at once, then at most one line (with the
        count) per ``UNSIGNED_WARNING_S``. Anyone can POST here: a line per request let an
        unauthenticated client fill the disk with the log."""
        self._unsigned_unsaid += 1
        now = time.monotonic()
        if now - self._unsigned_said_at < UNSIGNED_WARNING_S:
            return
        if self._unsigned_said_at == -math.inf:
            _log.warning(
                "refused a webhook delivery with a bad or missing signature (more are "
                "counted, and said at most once a minute)"
            )
        else:
            _log.warning(
                "refused %d more webhook deliveries with a bad or missing signature",
                self._unsigned_unsaid,
            )
        self._unsigned_said_at, self._unsigned_unsaid = now, 0

    async def _bounded_read(self, receive: Receive) -> bytes | None:
        """The body (None when over ``MAX_BODY``), read within the deadline and only while
        fewer than ``bodies_read_at_once`` others are; raises ``_TooSlow``, ``_Busy`` or
        ``_Disconnected`` otherwise."""
        if self._reading >= self.settings.bodies_read_at_once:
            raise _Busy
        self._reading += 1
        try:
            with trio.move_on_after(self.settings.body_timeout_s):
                return await _read_body(receive)
            raise _TooSlow
        finally:
            self._reading -= 1


class _TooSlow(Exception):
    """The body did not arrive within ``body_timeout_s``."""


class _Busy(Exception):
    """Too many bodies are being read at once."""


class _Disconnected(Exception):
    """The client went away (or hypercorn's read timeout dropped it) mid-body."""


async def _read_body(receive: Receive) -> bytes | None:
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            raise _Disconnected
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def _answer(send: Send, status: int, body: bytes) -> None:
    headers = [(b"content-type", b"text/plain"), (b"content-length", str(len(body)).encode())]
    if status in (408, 413, 503):  # the body was not read: the connection cannot be reused
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


@dataclass(frozen=True)
class WhatsAppConnection:
    platform: WhatsAppPlatform
    ingress: WhatsAppIngress
    webhook: WebhookApp
    webhook_url: str  # where the webhook listens (behind the user's HTTPS proxy)


def _listening_socket(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    return sock


@asynccontextmanager
async def hosted_whatsapp(
    settings: WhatsAppSettings, runtime: RuntimePort, *, timeout_s: float = 10.0
) -> AsyncIterator[WhatsAppConnection]:
    sock = _listening_socket(settings.webhook_host, settings.webhook_port)
    host, port = sock.getsockname()[:2]
    # hypercorn takes the bound socket by its descriptor (as the MCP server does).
    fd = sock.detach()
    handed_over = False
    try:
        async with httpx.AsyncClient(timeout=timeout_s) as client:
            platform = WhatsAppPlatform(
                client,
                token=settings.token,
                phone_number_id=settings.phone_number_id,
                base_url=settings.base_url,
                limits=whatsapp_limits(settings),
                throttle_wait_s=settings.throttle_wait_s,
            )
            ingress = WhatsAppIngress(settings, platform, runtime)
            app = WebhookApp(settings, ingress)
            config = HypercornConfig()
            config.bind = [f"fd://{fd}"]
            config.accesslog = None
            config.errorlog = logging.getLogger("hypercorn.error")
            config.graceful_timeout = 1.0
            # A connection that sends nothing this long is dropped (None: held for ever).
            config.read_timeout = settings.read_timeout_s
            cap_connections(config, settings.max_connections, "the WhatsApp webhook")
            try:
                async with trio.open_nursery() as nursery:
                    handed_over = True
                    await nursery.start(ingress.send_read_receipts)
                    await nursery.start(hypercorn_serve, app, config)
                    shown = f"[{host}]" if ":" in host else host
                    url = f"http://{shown}:{port}{settings.webhook_path}"
                    try:
                        yield WhatsAppConnection(platform, ingress, app, url)
                    finally:
                        nursery.cancel_scope.cancel()
            finally:
                ingress.seen.close()  # the ids handled: their file, written to the end
    finally:
        if not handed_over:
            os.close(fd)
