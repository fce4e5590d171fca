"""``FakeSlack``: a local Slack for the real slack-bolt / slack-sdk on 127.0.0.1: the Web API
(``/api/<method>``, form, JSON or query bodies, a Bearer token) and a Socket Mode WebSocket
(``/link``) that delivers envelopes and receives their acks, with a test API to act as
users, inject faults and read channels back.

The server runs in its own thread with its own asyncio loop (trio-asyncio owns the test's),
like ``testkit.fake_telegram``. ``apps.connections.open`` (with the ``xapp-`` token) answers
the socket's URL; a new connection gets ``hello``, then every envelope waiting and every
envelope delivered before but never acknowledged. Point a client at it:
``AsyncWebClient(token=…, base_url=fake.base_url)``.
"""

from __future__ import annotations

import asyncio
import copy
import json
import threading
import time
from concurrent.futures import Future
from typing import Any

from aiohttp import WSMsgType, web

from threadspindle.testkit.fake_slack.limits import SlackRateLimits
from threadspindle.testkit.fake_slack.world import (
    BOT_USER,
    ApiError,
    Call,
    Fault,
    SlackMessage,
    World,
)

__all__ = ["APP_TOKEN", "BOT_TOKEN", "FakeSlack"]

BOT_TOKEN = "xoxb-1111-2222-fakeslackbottoken"
APP_TOKEN = "xapp-1-A0SPINDLE-3333-fakeslackapptoken"


class FakeSlack:
    """Use as a context manager (``with FakeSlack() as fake:``) or ``start()``/``stop()``."""

    def __init__(
        self,
        bot_token: str = BOT_TOKEN,
        app_token: str = APP_TOKEN,
        *,
        rate_limits: SlackRateLimits | None = None,
    ) -> None:
        """``rate_limits``: enforce Slack's documented method tiers (``fake_slack.limits``)
        from the start; off by default."""
        self.bot_token = bot_token
        self.app_token = app_token
        self.world = World(bot_token, app_token)
        self.rate_limits = rate_limits  # read and changed under ``world.lock``
        self.port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stopped: asyncio.Event | None = None
        self._arrived: asyncio.Event | None = None
        self._sockets: list[web.WebSocketResponse] = []

    # --- lifecycle --------------------------------------------------------------------------

    def start(self) -> FakeSlack:
        started: Future[int] = Future()
        self._thread = threading.Thread(
            target=self._serve, args=(started,), name="fake-slack", daemon=True
        )
        self._thread.start()
        self.port = started.result(timeout=10)
        return self

    def stop(self) -> None:
        if self._loop is None or self._thread is None or self._stopped is None:
            return
        self._loop.call_soon_threadsafe(self._stopped.set)
        self._thread.join(timeout=10)
        self._loop = None

    def __enter__(self) -> FakeSlack:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def base_url(self) -> str:
        """The Web API's base URL, as slack-sdk takes it (ends in ``/api/``)."""
        return f"http://127.0.0.1:{self.port}/api/"

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
        app.router.add_get("/link/", self._socket)
        app.router.add_get("/link", self._socket)
        app.router.add_route("*", "/api/{method}", self._handle)
        app.router.add_post("/upload/v1/{file_id}", self._upload)
        app.router.add_get("/files-pri/{file_id}/download/{name}", self._download)
        runner = web.AppRunner(app, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        with self.world.lock:
            self.world.files_url = f"http://127.0.0.1:{port}/files-pri/"
        started.set_result(port)
        await self._stopped.wait()
        for socket in list(self._sockets):
            await socket.close()
        await runner.cleanup()

    def _notify(self) -> None:
        """Something to deliver: wake the socket (from any thread)."""
        if self._loop is not None and self._arrived is not None:
            self._loop.call_soon_threadsafe(self._arrived.set)

    # --- HTTP -------------------------------------------------------------------------------

    async def _params(self, request: web.Request) -> dict[str, Any]:
        params: dict[str, Any] = dict(request.query)
        if request.content_type == "application/json":
            body = await request.json()
            params.update(body if isinstance(body, dict) else {})
        elif request.can_read_body:
            form = await request.post()
            params.update({k: v for k, v in form.items() if isinstance(v, str)})
        return params

    async def _handle(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        params = await self._params(request)
        auth = request.headers.get("Authorization", "")
        token = auth[7:] if auth.startswith("Bearer ") else str(params.get("token", ""))
        status, headers = 200, {}
        try:
            with self.world.lock:
                if self.rate_limits is not None:
                    wait = self.rate_limits.check(method, params.get("channel"), time.monotonic())
                    if wait is not None:
                        raise ApiError("ratelimited", 429, wait)
                self.world.check_fault(method)
                body = self.world.call(method, params, token)
            if method == "files.getUploadURLExternal":
                body["upload_url"] = f"http://127.0.0.1:{self.port}{body['upload_url']}"
            if method == "apps.connections.open":
                body["url"] = f"ws://127.0.0.1:{self.port}/link/?ticket=t{time.monotonic_ns()}"
        except ApiError as error:
            status, body = error.status, {"ok": False, "error": error.error}
            if error.retry_after is not None:
                headers["Retry-After"] = str(max(1, round(error.retry_after)))
        with self.world.lock:
            self.world.calls.append(Call(time.time(), method, status, params))
        return web.Response(
            status=status, text=json.dumps(body), content_type="application/json", headers=headers
        )

    async def _upload(self, request: web.Request) -> web.Response:
        """An upload URL: the file's bytes, raw (slack-sdk) or as a form's one file."""
        if request.content_type.startswith("multipart/"):
            form = await request.post()
            parts = [v for v in form.values() if isinstance(v, web.FileField)]
            data = parts[0].file.read() if parts else b""
        else:
            data = await request.read()
        with self.world.lock:
            status = self.world.receive_upload(request.match_info["file_id"], data)
        return web.Response(status=status, text=f"OK - {len(data)}" if status == 200 else "")

    async def _download(self, request: web.Request) -> web.Response:
        """A shared file's bytes, for the bot token of an app with ``files:read`` only:
        anyone else gets, as from Slack, its sign-in page with a 200."""
        file_id = request.match_info["file_id"]
        authorization = request.headers.get("Authorization")
        with self.world.lock:
            self.world.downloads.append((file_id, authorization))
            data = self.world.shared.get(file_id)
            scoped = self.world.files_read
        if authorization != f"Bearer {self.bot_token}" or not scoped:
            return web.Response(
                text="<!DOCTYPE html><html><title>Sign in | Slack</title></html>",
                content_type="text/html",
            )
        if data is None:
            return web.Response(status=404)
        return web.Response(body=data, content_type="application/octet-stream")

    # --- Socket Mode ------------------------------------------------------------------------

    async def _socket(self, request: web.Request) -> web.WebSocketResponse:
        assert self._arrived is not None
        socket = web.WebSocketResponse(autoping=True)
        await socket.prepare(request)
        self._sockets.append(socket)
        with self.world.lock:
            self.world.connections += 1
            self.world.redeliver_unacked()
        await socket.send_str(
            json.dumps(
                {
                    "type": "hello",
                    "num_connections": 1,
                    "debug_info": {"host": "fake-slack", "approximate_connection_time": 3600},
                    "connection_info": {"app_id": "A0SPINDLE"},
                }
            )
        )
        sender = asyncio.ensure_future(self._send_envelopes(socket))
        try:
            async for frame in socket:
                if frame.type == WSMsgType.TEXT:
                    data = json.loads(frame.data)
                    if isinstance(data, dict) and "envelope_id" in data:
                        with self.world.lock:
                            self.world.ack(data)
        finally:
            sender.cancel()
            self._sockets.remove(socket)
        return socket

    async def _send_envelopes(self, socket: web.WebSocketResponse) -> None:
        assert self._arrived is not None
        while not socket.closed:
            self._arrived.clear()
            with self.world.lock:
                envelopes = self.world.take_outbox()
            for envelope in envelopes:
                await socket.send_str(json.dumps(envelope))
            if not envelopes:
                await self._arrived.wait()

    def _on_loop(self, coroutine: Any) -> None:
        if self._loop is not None:
            asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout=10)

    def disconnect(self, reason: str = "refresh_requested") -> None:
        """Ask the connected clients to reconnect, as Slack does now and then."""

        async def send() -> None:
            for socket in list(self._sockets):
                await socket.send_str(json.dumps({"type": "disconnect", "reason": reason}))

        self._on_loop(send())

    def drop_connections(self) -> None:
        """Close every socket at once (the network went away)."""

        async def close() -> None:
            for socket in list(self._sockets):
                await socket.close()

        self._on_loop(close())

    # --- the test API: acting as users ----------------------------------------------------------

    def add_user(self, name: str, team: str | None = None) -> str:
        with self.world.lock:
            return self.world.add_user(name, *(() if team is None else (team,)))

    def add_channel(self, name: str) -> str:
        with self.world.lock:
            return self.world.add_channel(name)

    def send_message(
        self,
        channel: str,
        user: str,
        text: str,
        *,
        thread_ts: str | None = None,
        files: tuple[tuple[str, bytes, str], ...] = (),
        external: bool = False,
    ) -> str:
        """A user's message (a thread reply when ``thread_ts``), with ``files`` shared in it
        as (name, bytes, mimetype), links to another service's when ``external``; its
        ``ts``."""
        with self.world.lock:
            ts = self.world.user_message(channel, user, text, thread_ts, files, external)
        self._notify()
        return ts

    def post_quietly(
        self, channel: str, user: str, text: str, *, thread_ts: str | None = None
    ) -> str:
        """A message Slack keeps but delivers no event for (it was sent while the app was
        away and the events were dropped): only ``conversations.replies`` finds it."""
        with self.world.lock:
            ts = self.world.user_message(channel, user, text, thread_ts)
            self.world.outbox.pop()
        return ts

    def edit_message(self, channel: str, ts: str, text: str) -> None:
        with self.world.lock:
            self.world.user_edit(channel, ts, text)
        self._notify()

    def delete_message(self, channel: str, ts: str) -> None:
        with self.world.lock:
            self.world.user_delete(channel, ts)
        self._notify()

    def slash(self, channel: str, user: str, text: str) -> str:
        """``/spindle <text>`` typed in ``channel``; the envelope id."""
        with self.world.lock:
            envelope = self.world.slash(channel, user, text)
        self._notify()
        return envelope

    def click(
        self,
        channel: str,
        ts: str,
        action_id: str,
        user: str,
        value: str | None = None,
        *,
        as_seen: SlackMessage | None = None,
    ) -> str:
        """Press a button, or choose ``value`` in a select; the envelope id. ``as_seen``:
        the message as a stale client shows it (a button already gone)."""
        with self.world.lock:
            envelope = self.world.click(channel, ts, action_id, user, value, as_seen)
        self._notify()
        return envelope

    def redeliver(self, envelope_id: str) -> None:
        with self.world.lock:
            self.world.redeliver(envelope_id)
        self._notify()

    def envelope_of(self, ts: str) -> str:
        """The id of the envelope that delivered the message ``ts``."""
        with self.world.lock:
            for envelope_id, envelope in self.world.issued.items():
                if (envelope["payload"].get("event") or {}).get("ts") == ts:
                    return envelope_id
        raise KeyError(ts)

    def inject_fault(
        self,
        status: int,
        *,
        method: str | None = None,
        skip: int = 0,
        times: int = 1,
        retry_after: float = 1.0,
        error: str | None = None,
    ) -> None:
        """Fail calls (of ``method``): a 429 with ``Retry-After``, a 5xx, or with status
        200 an ``error`` (e.g. ``invalid_blocks``)."""
        with self.world.lock:
            self.world.faults.append(Fault(status, method, skip, times, retry_after, error))

    def enforce_rate_limits(self, limits: SlackRateLimits | None = None) -> SlackRateLimits:
        """From now on, Slack's documented method tiers (``fake_slack.limits``); returns
        them (``rate_limit_statistics`` reads them)."""
        chosen = limits or SlackRateLimits()
        with self.world.lock:
            self.rate_limits = chosen
        return chosen

    def rate_limit_statistics(self) -> dict[str, int]:
        """Calls seen by the enforced limits and the 429s sent, by method."""
        with self.world.lock:
            return self.rate_limits.statistics() if self.rate_limits is not None else {}

    # --- the test API: reading back -------------------------------------------------------------

    def messages(self, channel: str, thread_ts: str | None = None) -> list[SlackMessage]:
        """Copies of the thread's messages (the parent first) that are not deleted and not
        ephemeral; ``thread_ts`` None: the channel's top-level messages."""
        with self.world.lock:
            found = [
                copy.deepcopy(m)
                for m in self.world.messages.values()
                if m.channel == channel
                and not m.deleted
                and m.ephemeral_to is None
                and (m.thread_ts == thread_ts or (thread_ts is not None and m.ts == thread_ts))
            ]
        return sorted(found, key=lambda m: float(m.ts))

    def bot_messages(self, channel: str, thread_ts: str | None = None) -> list[SlackMessage]:
        return [m for m in self.messages(channel, thread_ts) if m.user == BOT_USER]

    def ephemerals(self, user: str) -> list[SlackMessage]:
        with self.world.lock:
            return [
                copy.deepcopy(m) for m in self.world.messages.values() if m.ephemeral_to == user
            ]

    def message(self, channel: str, ts: str) -> SlackMessage:
        with self.world.lock:
            return copy.deepcopy(self.world.messages[(channel, ts)])

    def calls(self, method: str | None = None) -> list[Call]:
        with self.world.lock:
            return [c for c in self.world.calls if method is None or c.method == method]

    def acks(self) -> list[dict[str, Any]]:
        with self.world.lock:
            return list(self.world.acks)

    def unacked(self) -> list[str]:
        with self.world.lock:
            return list(self.world.unacked) + [e["envelope_id"] for e in self.world.outbox]

    def delivered(self) -> list[str]:
        with self.world.lock:
            return list(self.world.delivered)

    def statuses(self) -> list[tuple[str, str, str]]:
        with self.world.lock:
            return list(self.world.statuses)

    def connections(self) -> int:
        with self.world.lock:
            return self.world.connections
