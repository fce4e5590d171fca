"""``FakeTelegram``: a local Telegram Bot API on 127.0.0.1 for the real python-telegram-bot,
with a test API to act as users, inject faults and read chats back.

The server runs in its own thread with its own asyncio loop (so it serves whatever loop the
test runs), like ``testkit.fake_discord``. Requests are ``/bot<token>/<method>`` with form,
multipart or JSON bodies (PTB sends forms: strings raw, other values JSON-encoded); answers
are ``{"ok": true, "result": ...}`` or the API's error shape, a 429 with
``parameters.retry_after``. ``getUpdates`` long-polls: it answers at once when updates are
pending, else when one arrives or its ``timeout`` passes.

Point a bot at it: ``Bot(token, base_url=fake.base_url)`` (``…/bot``; PTB appends the token).
"""

from __future__ import annotations

import asyncio
import copy
import json
import threading
import time
from concurrent.futures import Future
from typing import Any

from aiohttp import web

from threadspindle.testkit.fake_telegram.limits import TelegramRateLimits
from threadspindle.testkit.fake_telegram.world import (
    BOT_ID,
    ApiError,
    Call,
    Fault,
    TgMessage,
    World,
)

__all__ = ["FakeTelegram"]

TOKEN = "123456:fake-telegram-token"
_INT_FIELDS = {"chat_id", "message_id", "message_thread_id", "offset", "limit", "timeout"}


def _decode(name: str, value: str) -> Any:
    if name in _INT_FIELDS:
        try:
            return int(value)
        except ValueError:
            return value
    return value


class FakeTelegram:
    """Use as a context manager (``with FakeTelegram() as fake:``) or ``start()``/``stop()``."""

    def __init__(
        self, token: str = TOKEN, *, rate_limits: TelegramRateLimits | None = None
    ) -> None:
        """``rate_limits``: enforce Telegram's documented message limits
        (``fake_telegram.limits``) from the start; off by default."""
        self.token = token
        self.world = World(token)
        self.rate_limits = rate_limits  # read and changed under ``world.lock``
        self.port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stopped: asyncio.Event | None = None
        self._arrived: asyncio.Event | None = None
        self.polls_open = 0  # getUpdates calls waiting right now
        self._closing = False  # stop(): a waiting getUpdates answers at once

    # --- lifecycle --------------------------------------------------------------------------

    def start(self) -> FakeTelegram:
        started: Future[int] = Future()
        self._thread = threading.Thread(
            target=self._serve, args=(started,), name="fake-telegram", daemon=True
        )
        self._thread.start()
        self.port = started.result(timeout=10)
        return self

    def stop(self) -> None:
        if self._loop is None or self._thread is None or self._stopped is None:
            return
        self._loop.call_soon_threadsafe(self._close)
        self._thread.join(timeout=10)
        self._loop = None

    def _close(self) -> None:
        # The server's cleanup waits for every handler still running, and a getUpdates
        # left by a bot that stopped polling would hold it for the rest of its timeout.
        assert self._stopped is not None and self._arrived is not None
        self._closing = True
        self._arrived.set()
        self._stopped.set()

    def __enter__(self) -> FakeTelegram:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def base_url(self) -> str:
        """The ``base_url`` a bot is given (PTB appends the token)."""
        return f"http://127.0.0.1:{self.port}/bot"

    def _serve(self, started: Future[int]) -> None:
        loop = asyncio.new_event_loop()  # in this thread: trio-asyncio owns the test's
        self._loop = loop
        try:
            loop.run_until_complete(self._main(started))
        finally:
            loop.close()

    async def _main(self, started: Future[int]) -> None:
        self._stopped = asyncio.Event()
        self._arrived = asyncio.Event()
        app = web.Application()
        app.router.add_route("*", "/bot{token}/{method}", self._handle)
        app.router.add_route("GET", "/file/bot{token}/{folder}/{file}", self._file)
        runner = web.AppRunner(app, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        started.set_result(site._server.sockets[0].getsockname()[1])  # type: ignore[union-attr]
        await self._stopped.wait()
        await runner.cleanup()

    def _notify(self) -> None:
        """A new update: wake the long polls (from any thread)."""
        if self._loop is not None and self._arrived is not None:
            self._loop.call_soon_threadsafe(self._arrived.set)

    # --- HTTP -------------------------------------------------------------------------------

    async def _params(self, request: web.Request) -> dict[str, Any]:
        params: dict[str, Any] = {k: _decode(k, v) for k, v in request.query.items()}
        if request.content_type == "application/json":
            body = await request.json()
            params.update(body if isinstance(body, dict) else {})
        elif request.can_read_body:
            form = await request.post()
            params.update({k: _decode(k, v) for k, v in form.items() if isinstance(v, str)})
            # Uploaded files (sendDocument's ``document``) ride along by field name.
            uploads = {
                k: (v.filename, v.file.read())
                for k, v in form.items()
                if isinstance(v, web.FileField)
            }
            if uploads:
                params["_files"] = uploads
        return params

    async def _handle(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        params = await self._params(request)
        status, body = 200, None
        try:
            if request.match_info["token"] != self.token:
                raise ApiError(401, "Unauthorized")
            with self.world.lock:
                self.world.check_fault(method)  # an injected fault counts against nothing
                if self.rate_limits is not None:
                    wait = self.rate_limits.check(method, params.get("chat_id"), time.monotonic())
                    if wait is not None:
                        raise ApiError(429, f"Too Many Requests: retry after {wait}", wait)
            if method == "getUpdates":
                result = await self._get_updates(params)
            else:
                with self.world.lock:
                    result = self.world.call(method, params)
            body = {"ok": True, "result": result}
        except ApiError as error:
            status, body = error.status, error.body()
        with self.world.lock:
            self.world.calls.append(Call(time.time(), method, status, params))
        return web.Response(status=status, text=json.dumps(body), content_type="application/json")

    async def _file(self, request: web.Request) -> web.Response:
        """A file's content, as api.telegram.org/file/bot<token>/<file_path> serves it."""
        if request.match_info["token"] != self.token:
            return web.Response(status=401)
        file_id = request.match_info["file"].removesuffix(".oga")
        with self.world.lock:
            data = self.world.files.get(file_id)
            self.world.downloads.append(file_id)
        if data is None:
            return web.Response(status=404)
        voice = request.match_info["folder"] == "voice"
        return web.Response(
            body=data, content_type="audio/ogg" if voice else "application/octet-stream"
        )

    async def _get_updates(self, params: dict[str, Any]) -> list[dict[str, Any]]:
        assert self._arrived is not None
        offset = params.get("offset")
        limit = int(params.get("limit") or 100)
        deadline = time.monotonic() + float(params.get("timeout") or 0)
        with self.world.lock:
            self.world.offsets.append(offset)
            self.world.confirm(offset)
        self.polls_open += 1
        try:
            while True:
                self._arrived.clear()
                with self.world.lock:
                    updates = self.world.pending_updates(limit)
                if updates or self._closing or time.monotonic() >= deadline:
                    return copy.deepcopy(updates)
                try:
                    await asyncio.wait_for(self._arrived.wait(), deadline - time.monotonic())
                except TimeoutError:
                    pass
        finally:
            self.polls_open -= 1

    # --- the test API: acting as users ----------------------------------------------------------

    def add_user(self, name: str) -> int:
        with self.world.lock:
            return self.world.add_user(name)

    def add_private_chat(self, user_id: int) -> int:
        with self.world.lock:
            return self.world.add_private_chat(user_id)

    def add_group(self, title: str, *, forum: bool = True) -> int:
        with self.world.lock:
            return self.world.add_group(title, forum=forum)

    def add_topic(self, chat_id: int, name: str) -> int:
        with self.world.lock:
            return int(
                self.world.api_createForumTopic({"chat_id": chat_id, "name": name})[
                    "message_thread_id"
                ]
            )

    def send_voice(
        self, chat_id: int, user_id: int, audio: bytes, *, topic: int | None = None
    ) -> int:
        """A user's voice message (its audio served by getFile and /file/); its id."""
        with self.world.lock:
            message = self.world.user_voice(chat_id, user_id, audio, topic, duration=2)
        self._notify()
        return message.message_id

    def send_file(
        self,
        chat_id: int,
        user_id: int,
        data: bytes,
        *,
        caption: str = "",
        topic: int | None = None,
        file_name: str | None = None,
        mime_type: str | None = None,
        media_group_id: str | None = None,
    ) -> int:
        """A user's photo (no ``file_name``) or document, with an optional caption; its id."""
        with self.world.lock:
            message = self.world.user_file(
                chat_id,
                user_id,
                data,
                caption=caption,
                topic=topic,
                file_name=file_name,
                mime_type=mime_type,
                media_group_id=media_group_id,
            )
        self._notify()
        return message.message_id

    def send_message(
        self, chat_id: int, user_id: int, text: str, *, topic: int | None = None
    ) -> int:
        """A user's message (a ``/command`` gets its bot_command entity); its message id."""
        with self.world.lock:
            message = self.world.user_message(chat_id, user_id, text, topic)
        self._notify()
        return message.message_id

    def edit_message(self, chat_id: int, message_id: int, text: str) -> None:
        with self.world.lock:
            self.world.user_edit(chat_id, message_id, text)
        self._notify()

    def click(self, chat_id: int, message_id: int, callback_data: str, user_id: int) -> str:
        """Press an inline button; the callback query's id."""
        with self.world.lock:
            callback_id = self.world.click(chat_id, message_id, callback_data, user_id)
        self._notify()
        return callback_id

    def redeliver(self, update_id: int) -> None:
        with self.world.lock:
            self.world.redeliver(update_id)
        self._notify()

    def issued_updates(self) -> list[int]:
        """Ids of every update made so far, oldest first."""
        with self.world.lock:
            return list(self.world.issued)

    def inject_fault(
        self,
        status: int,
        *,
        method: str | None = None,
        skip: int = 0,
        times: int = 1,
        retry_after: int = 1,
        description: str | None = None,
    ) -> None:
        """Fail calls (of ``method``): a 429 with ``retry_after``, a 5xx, or a 400 with
        ``description`` (e.g. "Bad Request: can't parse entities: ...")."""
        with self.world.lock:
            self.world.faults.append(Fault(status, method, skip, times, retry_after, description))

    def enforce_rate_limits(self, limits: TelegramRateLimits | None = None) -> TelegramRateLimits:
        """From now on, Telegram's documented message limits (``fake_telegram.limits``);
        returns them (``rate_limit_statistics`` reads them)."""
        chosen = limits or TelegramRateLimits()
        with self.world.lock:
            self.rate_limits = chosen
        return chosen

    def rate_limit_statistics(self) -> dict[str, int]:
        """Requests seen by the enforced limits and the 429s sent, by limit."""
        with self.world.lock:
            return self.rate_limits.statistics() if self.rate_limits is not None else {}

    # --- the test API: reading back -------------------------------------------------------------

    def messages(self, chat_id: int, topic: int | None = None) -> list[TgMessage]:
        """Copies of the chat's (topic's) messages that are not deleted, oldest first;
        ``topic`` None: the messages outside any topic (General, or a private chat)."""
        with self.world.lock:
            return [
                copy.deepcopy(m)
                for (chat, _), m in sorted(self.world.messages.items())
                if chat == chat_id and m.topic == topic and not m.deleted and m.service is None
            ]

    def message(self, chat_id: int, message_id: int) -> TgMessage:
        with self.world.lock:
            return copy.deepcopy(self.world.messages[(chat_id, message_id)])

    def bot_messages(self, chat_id: int, topic: int | None = None) -> list[TgMessage]:
        return [m for m in self.messages(chat_id, topic) if m.from_id == BOT_ID]

    def topics(self, chat_id: int) -> dict[int, str]:
        with self.world.lock:
            return dict(self.world.topics.get(chat_id, {}))

    def calls(self, method: str | None = None) -> list[Call]:
        with self.world.lock:
            return [c for c in self.world.calls if method is None or c.method == method]

    def chat_actions(self, chat_id: int, topic: int | None = None) -> list[float]:
        """When ``sendChatAction`` was called for the chat (topic)."""
        with self.world.lock:
            return [
                at for at, chat, t, _ in self.world.chat_actions if chat == chat_id and t == topic
            ]

    def callback_answer(self, callback_id: str) -> dict[str, Any] | None:
        with self.world.lock:
            return self.world.callback_answers.get(callback_id)

    def commands(self) -> list[dict[str, Any]]:
        with self.world.lock:
            return list(self.world.commands)

    def unconfirmed(self) -> list[int]:
        """Ids of the updates Telegram still holds (not confirmed by an offset)."""
        with self.world.lock:
            return [u["update_id"] for u in self.world.updates]

    def offsets(self) -> list[int | None]:
        with self.world.lock:
            return list(self.world.offsets)
