"""Hosting discord.py inside the trio program through trio-asyncio.

``hosted_bot(settings, runtime)`` is an async context manager: it points discord.py at the
configured REST/gateway URLs, starts ``client.start`` as an asyncio task
(``aio_as_trio``), waits until the client is ready (logged in, commands synced, guilds
received), and yields the bot. Gateway events cross into trio through a memory channel
that one pump task drains in order into ``runtime.post`` (or ``runtime.dispose``).
On exit ``client.close()`` is awaited shielded, then the tasks are cancelled.

It must run inside ``trio_asyncio.open_loop()`` (``run_bot`` opens one), and so must the
reactor that drives ``bot.platform``: both cross into the same asyncio loop.
"""

from __future__ import annotations

import logging
import math
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Protocol

import discord
import discord.gateway
import discord.http
import trio
import trio_asyncio
import yarl

from ingress.discord.bot import IngressItem, SpindleBot
from ingress.discord.settings import DiscordSettings
from runtime.actions import Action
from runtime.model import ThreadState

__all__ = ["RuntimePort", "hosted_bot", "point_discord_at", "run_bot"]

_log = logging.getLogger(__name__)


class RuntimePort(Protocol):
    """What the bot needs from the live runtime (``runtime.registry.Runtime``)."""

    async def post(self, action: Action) -> None: ...

    def snapshot(self, thread_id: str) -> ThreadState | None: ...

    async def dispose(self, thread_id: str) -> None: ...


def point_discord_at(settings: DiscordSettings) -> None:
    """discord.py keeps both URLs as class attributes: set them process-wide."""
    discord.http.Route.BASE = settings.rest_base_url.rstrip("/")
    discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(settings.gateway_url)


async def _pump(receive: trio.MemoryReceiveChannel[IngressItem], runtime: RuntimePort) -> None:
    async with receive:
        async for item in receive:
            for action in item.actions:
                await runtime.post(action)
            if item.dispose_thread is not None:
                await runtime.dispose(item.dispose_thread)


@asynccontextmanager
async def hosted_bot(
    settings: DiscordSettings,
    runtime: RuntimePort,
    *,
    ready_timeout_s: float = 30.0,
    on_bot: Callable[[SpindleBot], None] | None = None,
) -> AsyncIterator[SpindleBot]:
    point_discord_at(settings)
    send, receive = trio.open_memory_channel[IngressItem](math.inf)
    bot = SpindleBot(settings, events=send, snapshot=runtime.snapshot)
    if on_bot is not None:
        on_bot(bot)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_pump, receive, runtime)
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
                with trio.move_on_after(10):
                    await trio_asyncio.aio_as_trio(bot.close)()
                await send.aclose()
            nursery.cancel_scope.cancel()


async def run_bot(settings: DiscordSettings, runtime: RuntimePort) -> None:
    """Run the bot until cancelled (the ``spindle run`` entry point's Discord half)."""
    async with trio_asyncio.open_loop():
        async with hosted_bot(settings, runtime) as bot:
            _log.info("Discord bot %s is ready", bot.user)
            await trio.sleep_forever()
