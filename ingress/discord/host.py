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

from threadspindle.effects.asyncio_loop import open_asyncio_loop
from threadspindle.effects.discord_platform import DiscordPlatform
from threadspindle.effects.platform import PlatformLimits
from threadspindle.effects.request_budget import DISCORD_BUDGET, BudgetLimits
from threadspindle.effects.thread_renderers import ThreadRenderers
from threadspindle.ingress.discord.bot import IngressItem, ShardedSpindleBot, SpindleBot
from threadspindle.ingress.discord.catchup import LoggedHistory, SeenHistory
from threadspindle.ingress.discord.settings import DiscordSettings
from threadspindle.runtime.core.actions import Action
from threadspindle.runtime.core.model import Policy, ThreadState
from threadspindle.runtime.live.log import EventLog
from threadspindle.runtime.live.ports import AdapterFactory, ThreadOpener
from threadspindle.runtime.live.registry import Runtime, open_runtime

__all__ = [
    "DiscordApp",
    "DiscordRenderers",
    "RuntimePort",
    "discord_thread_opener",
    "hosted_bot",
    "point_discord_at",
    "run_discord_runtime",
]

_log = logging.getLogger(__name__)

# One StreamRenderer per thread over the bot's platform (effects.thread_renderers).
DiscordRenderers = ThreadRenderers


class RuntimePort(Protocol):
    """What the bot needs from the live runtime (``runtime.live.registry.Runtime``)."""

    async def post(self, action: Action, *, channel_id: str | None = None) -> object: ...

    def snapshot(self, thread_id: str) -> ThreadState | None: ...

    async def dispose(self, thread_id: str) -> object: ...


def discord_thread_opener(platform: DiscordPlatform) -> ThreadOpener:
    """The runtime's ``thread_opener`` on Discord: a public thread in the channel of the
    thread that asked (``/fork``, ``/btw``), named as a mention."""

    async def opener(source: str, title: str) -> tuple[str, str]:
        thread_id = await platform.open_thread_beside(source, title)
        return thread_id, f"<#{thread_id}>"

    return opener


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
    kind = ShardedSpindleBot if settings.shard_count else SpindleBot
    bot = kind(settings, events=send, snapshot=runtime.snapshot, history=history)
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
    budget: BudgetLimits = DISCORD_BUDGET,
    stop_on_signals: bool = False,
    task_status: Any = trio.TASK_STATUS_IGNORED,
    **runtime_kwargs: Any,
) -> None:
    """The whole Discord bot: runtime, renderers and client, until ``stop()`` or
    cancelled. Starts (``task_status``) with a ``DiscordApp`` once the bot is ready.
    ``stop_on_signals`` (main thread only): SIGINT/SIGTERM stop it gracefully instead of
    interrupting it, so runs are closed and the last edits made before the client goes.
    ``budget``: the request budget the renderers share (Discord's documented limits)."""
    # Read before the runtime logs anything: when the previous process last did something.
    last_alive = log.last_action_at()
    async with (
        open_asyncio_loop(),
        DiscordRenderers(limits, budget=budget) as renderers,
    ):
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
                bot.platform.budget = renderers.budget  # the server's rate-limit word
                runtime.thread_opener = discord_thread_opener(bot.platform)
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
