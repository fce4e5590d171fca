"""Hosting discord.py inside the trio program through trio-asyncio.

``hosted_bot(settings, runtime)`` is an async context manager: it points discord.py at the
configured REST/gateway URLs, starts ``client.start`` as an asyncio task
(``aio_as_trio``), waits until the client is ready (logged in, commands synced, guilds
received), and yields the bot. Gateway events cross into trio through a memory channel
that one pump task drains in order into ``runtime.post`` (or ``runtime.dispose``).
On exit ``client.close()`` is awaited shielded, then the tasks are cancelled.

It must run inside ``trio_asyncio.open_loop()``, and so must the reactor that drives
``bot.platform``: both cross into the same asyncio loop. ``run_discord_runtime`` puts it
all together: the loop, the renderers (``DiscordRenderers``), the runtime and the bot,
with the log's account of where Spindle left off (``catchup.LoggedHistory``) so that the
bot catches up on what was posted while it was away.
"""

from __future__ import annotations

import logging
import math
import signal
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Protocol

import discord
import discord.gateway
import discord.http
import trio
import trio_asyncio
import yarl

from threadspindle.effects.platform import ChatPlatform, PlatformLimits
from threadspindle.effects.render import StreamRenderer
from threadspindle.ingress.discord.bot import IngressItem, SpindleBot
from threadspindle.ingress.discord.catchup import LoggedHistory, SeenHistory
from threadspindle.ingress.discord.settings import DiscordSettings
from threadspindle.runtime.core.actions import Action
from threadspindle.runtime.core.model import Policy, ThreadState
from threadspindle.runtime.live.log import EventLog
from threadspindle.runtime.live.ports import AdapterFactory
from threadspindle.runtime.live.registry import Runtime, open_runtime

__all__ = [
    "DiscordApp",
    "DiscordRenderers",
    "RuntimePort",
    "hosted_bot",
    "point_discord_at",
    "run_discord_runtime",
]

_log = logging.getLogger(__name__)


class RuntimePort(Protocol):
    """What the bot needs from the live runtime (``runtime.live.registry.Runtime``)."""

    async def post(self, action: Action, *, channel_id: str | None = None) -> object: ...

    def snapshot(self, thread_id: str) -> ThreadState | None: ...

    async def dispose(self, thread_id: str) -> object: ...


def point_discord_at(settings: DiscordSettings) -> None:
    """discord.py keeps both URLs as class attributes: set them process-wide."""
    discord.http.Route.BASE = settings.rest_base_url.rstrip("/")
    discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(settings.gateway_url)


async def _pump(
    receive: trio.MemoryReceiveChannel[IngressItem], runtime: RuntimePort, nursery: trio.Nursery
) -> None:
    """Post in arrival order. A refused post is logged, not fatal: the bot must outlive
    one bad event. Disposal runs beside the pump, so a slow one holds up no thread."""
    async with receive:
        async for item in receive:
            for action in item.actions:
                try:
                    await runtime.post(action, channel_id=item.channel_id)
                except Exception:
                    _log.exception("could not post %s to thread %s", action.kind, action.thread_id)
            if item.dispose_thread is not None:
                nursery.start_soon(_dispose, runtime, item.dispose_thread)


async def _dispose(runtime: RuntimePort, thread_id: str) -> None:
    try:
        await runtime.dispose(thread_id)
    except Exception:
        _log.exception("could not dispose thread %s", thread_id)


@asynccontextmanager
async def hosted_bot(
    settings: DiscordSettings,
    runtime: RuntimePort,
    *,
    ready_timeout_s: float = 30.0,
    on_bot: Callable[[SpindleBot], None] | None = None,
    before_close: Callable[[], Awaitable[object]] | None = None,
    history: SeenHistory | None = None,
) -> AsyncIterator[SpindleBot]:
    """``before_close`` runs (shielded) while the client is still connected, so what it
    causes can still be shown: the runtime's ``dispose_all`` closes runs and prompts.
    ``history`` (where Spindle left off) turns on catching up after each fresh session."""
    point_discord_at(settings)
    send, receive = trio.open_memory_channel[IngressItem](math.inf)
    bot = SpindleBot(settings, events=send, snapshot=runtime.snapshot, history=history)
    if on_bot is not None:
        on_bot(bot)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_pump, receive, runtime, nursery)
        client_done = trio.Event()

        async def run_client() -> None:
            try:
                await trio_asyncio.aio_as_trio(bot.start)(settings.token)
            finally:
                client_done.set()

        nursery.start_soon(run_client)
        try:
            with trio.fail_after(ready_timeout_s):
                while not bot.is_ready():
                    if client_done.is_set():
                        raise RuntimeError("the Discord client stopped before it was ready")
                    await trio.sleep(0.02)
            yield bot
        finally:
            with trio.CancelScope(shield=True):
                if before_close is not None:
                    with trio.move_on_after(30):
                        await before_close()
                with trio.move_on_after(10):
                    await trio_asyncio.aio_as_trio(bot.close)()
                await send.aclose()
            nursery.cancel_scope.cancel()


class _PendingPlatform:
    """The bot's platform before the bot exists: renderers made while the runtime starts
    (recovered threads) wait here until ``attach``."""

    def __init__(self, limits: PlatformLimits) -> None:
        self.limits = limits
        self.streams_append_only = False  # the bot's DiscordPlatform: edits in place
        self._platform: ChatPlatform | None = None
        self._attached = trio.Event()

    def attach(self, platform: ChatPlatform) -> None:
        self._platform = platform
        self._attached.set()

    async def _ready(self) -> ChatPlatform:
        await self._attached.wait()
        assert self._platform is not None
        return self._platform

    async def send(self, channel_id: str, text: str, **kwargs: Any) -> str:
        return await (await self._ready()).send(channel_id, text, **kwargs)

    async def edit(self, channel_id: str, message_id: str, text: str, **kwargs: Any) -> None:
        await (await self._ready()).edit(channel_id, message_id, text, **kwargs)

    async def delete(self, channel_id: str, message_id: str) -> None:
        await (await self._ready()).delete(channel_id, message_id)

    async def typing(self, channel_id: str) -> None:
        await (await self._ready()).typing(channel_id)

    async def reply(self, channel_id: str, action_id: str, text: str, **kwargs: Any) -> str:
        return await (await self._ready()).reply(channel_id, action_id, text, **kwargs)


class DiscordRenderers:
    """The runtime's ``renderer_factory`` for Discord: one ``StreamRenderer`` per thread
    (a Discord thread is a channel) over the bot's platform, each with its background task
    (paced edits, typing refresh) in this object's nursery. Use as an async context
    manager around the runtime; ``attach(bot.platform)`` once the bot is ready.

    A thread's actor is made again after a disposal (idle sweep, archive): its new
    renderer replaces the old one, which makes its last edits and then stops, so tasks
    do not pile up over the bot's lifetime."""

    def __init__(self, limits: PlatformLimits | None = None) -> None:
        self.platform = _PendingPlatform(limits or PlatformLimits())
        self.renderers: dict[str, StreamRenderer] = {}
        self._scopes: dict[str, trio.CancelScope] = {}
        self.running = 0  # renderer background tasks alive
        self._nursery: trio.Nursery | None = None
        self._nursery_manager: Any = None

    async def __aenter__(self) -> DiscordRenderers:
        self._nursery_manager = trio.open_nursery()
        self._nursery = await self._nursery_manager.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> bool | None:
        assert self._nursery is not None
        self._nursery.cancel_scope.cancel()
        return bool(await self._nursery_manager.__aexit__(*exc))

    def attach(self, platform: ChatPlatform) -> None:
        self.platform.attach(platform)

    async def flush(self) -> None:
        """Make every renderer's outstanding edits now (at shutdown)."""
        for renderer in list(self.renderers.values()):
            try:
                await renderer.aclose()
            except Exception as error:  # one thread's failure must not stop the others
                _log.warning("could not flush the renderer of %s: %s", renderer.channel_id, error)

    def renderer(self, thread_id: str) -> StreamRenderer:
        assert self._nursery is not None, "use DiscordRenderers as an async context manager"
        old, old_scope = self.renderers.get(thread_id), self._scopes.get(thread_id)
        if old is not None and old_scope is not None:
            self._nursery.start_soon(self._retire, old, old_scope)
        renderer = StreamRenderer(self.platform, thread_id)
        scope = trio.CancelScope()
        self.renderers[thread_id] = renderer
        self._scopes[thread_id] = scope
        self._nursery.start_soon(self._run, renderer, scope)
        return renderer

    async def _run(self, renderer: StreamRenderer, scope: trio.CancelScope) -> None:
        self.running += 1
        try:
            with scope:
                await renderer.run()
        finally:
            self.running -= 1

    async def _retire(self, renderer: StreamRenderer, scope: trio.CancelScope) -> None:
        with trio.move_on_after(30):
            try:
                await renderer.aclose()
            except Exception as error:
                _log.warning("could not flush the renderer of %s: %s", renderer.channel_id, error)
        scope.cancel()


@dataclass(frozen=True)
class DiscordApp:
    """What ``run_discord_runtime`` started with, for tests and tools to look at, and
    ``stop()``: a graceful end (runs closed, last edits made, client closed, in that
    order). Cancelling the task ends it too, but cuts those drains short."""

    runtime: Runtime
    bot: SpindleBot
    renderers: DiscordRenderers
    stopping: trio.Event

    def stop(self) -> None:
        self.stopping.set()


async def _wind_down(runtime: Runtime, renderers: DiscordRenderers) -> None:
    """Before the client closes: dispose every thread (runs end, prompts close), then
    make the renderers' last paced edits, while Discord can still be reached."""
    await runtime.dispose_all()
    await renderers.flush()


async def run_discord_runtime(
    settings: DiscordSettings,
    *,
    log: EventLog,
    adapter_factory: AdapterFactory,
    policy: Policy,
    limits: PlatformLimits | None = None,
    stop_on_signals: bool = False,
    task_status: Any = trio.TASK_STATUS_IGNORED,
    **runtime_kwargs: Any,
) -> None:
    """The whole Discord bot: runtime, renderers and client, until ``stop()`` or
    cancelled. Starts (``task_status``) with a ``DiscordApp`` once the bot is ready.
    ``stop_on_signals`` (main thread only): SIGINT/SIGTERM stop it gracefully instead of
    interrupting it, so runs are closed and the last edits made before the client goes."""
    # Read before the runtime logs anything: when the previous process last did something.
    last_alive = log.last_action_at()
    async with trio_asyncio.open_loop(), DiscordRenderers(limits) as renderers:
        async with open_runtime(
            log=log,
            renderer_factory=renderers.renderer,
            adapter_factory=adapter_factory,
            policy=policy,
            **runtime_kwargs,
        ) as runtime:
            history = LoggedHistory(log, runtime.snapshots, last_alive)
            async with hosted_bot(
                settings,
                runtime,
                before_close=lambda: _wind_down(runtime, renderers),
                history=history,
            ) as bot:
                renderers.attach(bot.platform)
                _log.info("Discord bot %s is ready", bot.user)
                app = DiscordApp(runtime, bot, renderers, trio.Event())
                task_status.started(app)
                async with trio.open_nursery() as nursery:
                    if stop_on_signals:
                        nursery.start_soon(_stop_on_signals, app)
                    await app.stopping.wait()
                    nursery.cancel_scope.cancel()


async def _stop_on_signals(app: DiscordApp) -> None:
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for signum in signals:
            _log.info("signal %s: stopping the Discord bot", signum)
            app.stop()
            return
