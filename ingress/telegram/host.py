"""Hosting python-telegram-bot inside the trio program through trio-asyncio.

``hosted_telegram(settings, runtime)`` is an async context manager: it builds a PTB
``Bot`` pointed at ``settings.base_url`` (Telegram's, a self-hosted Bot API server, or the
tests' fake), initializes it (``getMe``), registers the commands (``setMyCommands``, in
Telegram's spelling), starts the long-polling loop (``TelegramIngress.poll``) as a trio task
and yields a ``TelegramBot``. No PTB ``Application``/``Updater`` runs: the Updater would
acknowledge updates before they are handled (see ``bot``). On exit, shielded: the loop is
stopped, the handled updates confirmed, and the bot shut down (its HTTP clients closed)
before the asyncio loop goes.

It must run inside ``trio_asyncio.open_loop()``, and so must the reactor that drives
``TelegramBot.platform``.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import trio
import trio_asyncio
from telegram import Bot, BotCommand
from telegram.request import HTTPXRequest

from threadspindle.effects.telegram_platform import TELEGRAM_LIMITS, TelegramPlatform
from threadspindle.ingress.telegram.bot import RuntimePort, TelegramIngress
from threadspindle.ingress.telegram.settings import TelegramSettings
from threadspindle.ingress.telegram.translate import COMMANDS, agent_commands

__all__ = ["TelegramBot", "hosted_telegram", "make_bot"]

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TelegramBot:
    bot: Bot
    platform: TelegramPlatform
    ingress: TelegramIngress


def make_bot(settings: TelegramSettings, *, timeout_s: float = 10.0) -> Bot:
    """A PTB ``Bot`` for ``settings`` (not initialized): one HTTP client for calls, one for
    the long poll (PTB adds the poll's timeout to the read timeout itself)."""
    return Bot(
        settings.token,
        base_url=settings.base_url,
        # Files (voice notes) come from <api>/file/bot<token>/<path>.
        base_file_url=settings.base_url.removesuffix("/bot") + "/file/bot",
        request=HTTPXRequest(
            connection_pool_size=8,
            connect_timeout=timeout_s,
            read_timeout=timeout_s,
            write_timeout=timeout_s,
            pool_timeout=timeout_s,
        ),
        get_updates_request=HTTPXRequest(connect_timeout=timeout_s, read_timeout=timeout_s),
    )


def _anyio_sees_trio_asyncio() -> None:
    """PTB's HTTP client (httpx, over anyio) asks ``asyncio.get_running_loop()``, which
    trio-asyncio patches when it is imported. anyio's asyncio backend binds that function
    when *it* is imported: if that happened first (pytest's anyio plugin does it), it holds
    the unpatched one and every request fails with "no running event loop". Rebind it."""
    backend = sys.modules.get("anyio._backends._asyncio")
    if backend is not None and getattr(backend, "get_running_loop", None) is not (
        asyncio.get_running_loop
    ):
        backend.get_running_loop = asyncio.get_running_loop  # type: ignore[attr-defined]


@asynccontextmanager
async def hosted_telegram(
    settings: TelegramSettings, runtime: RuntimePort
) -> AsyncIterator[TelegramBot]:
    _anyio_sees_trio_asyncio()
    aio = trio_asyncio.aio_as_trio

    async def build() -> Bot:
        # Made on the asyncio side: its HTTP clients belong to asyncio (one made from trio
        # fails there with "no running event loop").
        return make_bot(settings)

    bot = await aio(build)()
    await aio(bot.initialize)()
    try:
        limits = TELEGRAM_LIMITS.model_copy(
            update={"min_edit_interval_s": settings.min_edit_interval_s}
        )
        platform = TelegramPlatform(bot, limits)
        ingress = TelegramIngress(settings, bot, platform, runtime)
        commands = (*agent_commands(settings.agents), *COMMANDS)
        await aio(bot.set_my_commands)([BotCommand(name, text) for name, text in commands])
        async with trio.open_nursery() as nursery:
            await nursery.start(ingress.poll)
            try:
                yield TelegramBot(bot, platform, ingress)
            finally:
                nursery.cancel_scope.cancel()
                with trio.CancelScope(shield=True), trio.move_on_after(10):
                    try:
                        await ingress.confirm()
                    except Exception as error:  # the next process drops them as duplicates
                        _log.info("could not confirm the last updates: %s", error)
    finally:
        with trio.CancelScope(shield=True), trio.move_on_after(10):
            await aio(bot.shutdown)()
