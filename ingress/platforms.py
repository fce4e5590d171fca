"""One runtime serving every configured chat platform at once (Discord, Telegram, WhatsApp,
Slack, the web chat): ``run_platforms``.

Each platform's library is asyncio, so one ``trio_asyncio.open_loop()`` hosts them all;
its exception handler logs instead of re-raising (trio-asyncio's default would tear the
loop down on any stray asyncio error report). One ``open_runtime`` owns every thread;
``PlatformRouter`` is its ``renderer_factory`` and hands each thread to its platform's
``ThreadRenderers`` by the thread id (``tg:…`` is Telegram's, ``wa:…`` WhatsApp's, ``sl:…``
Slack's, ``web:…`` the web chat's, a snowflake Discord's; WhatsApp and the web chat need no
asyncio: their servers and clients run on trio, the web chat's from once the runtime is open
until after the wind-down). The
platforms connect in turn, and the wind-down at the end (every thread parked, the last
edits made) runs while all of them are still connected, shielded, before any closes.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import trio

from threadspindle.effects.asyncio_loop import open_asyncio_loop
from threadspindle.effects.platform import PlatformError, PlatformLimits
from threadspindle.effects.render import StreamRenderer
from threadspindle.effects.request_budget import (
    DISCORD_BUDGET,
    SLACK_BUDGET,
    TELEGRAM_BUDGET,
    slack_scope,
    telegram_scope,
)
from threadspindle.effects.slack_platform import SLACK_LIMITS
from threadspindle.effects.telegram_platform import TELEGRAM_LIMITS
from threadspindle.effects.thread_renderers import ThreadRenderers
from threadspindle.effects.web_platform import WEB_LIMITS, WebPlatform
from threadspindle.ingress.discord.bot import SpindleBot
from threadspindle.ingress.discord.catchup import LoggedHistory
from threadspindle.ingress.discord.host import discord_thread_opener, hosted_bot
from threadspindle.ingress.discord.settings import DiscordSettings
from threadspindle.ingress.slack.host import SlackBot, hosted_slack, slack_thread_opener
from threadspindle.ingress.slack.settings import SlackSettings
from threadspindle.ingress.telegram.host import (
    TelegramBot,
    hosted_telegram,
    telegram_thread_opener,
)
from threadspindle.ingress.telegram.settings import TelegramSettings
from threadspindle.ingress.web.app import WebChat
from threadspindle.ingress.web.host import WebServer, serve_web, web_thread_opener
from threadspindle.ingress.web.settings import WebSettings
from threadspindle.ingress.whatsapp.host import (
    WhatsAppConnection,
    hosted_whatsapp,
    whatsapp_limits,
)
from threadspindle.ingress.whatsapp.settings import WhatsAppSettings
from threadspindle.runtime.core.model import Policy
from threadspindle.runtime.live.log import EventLog
from threadspindle.runtime.live.ports import AdapterFactory, ThreadOpener
from threadspindle.runtime.live.registry import Runtime, open_runtime

__all__ = [
    "PlatformRouter",
    "PlatformsApp",
    "platform_of",
    "platform_thread_opener",
    "run_platforms",
]

_log = logging.getLogger(__name__)


def platform_of(thread_id: str) -> str:
    """Which platform a thread id belongs to: ``telegram``, ``whatsapp``, ``slack``, ``web``,
    ``discord`` or ``other``."""
    if thread_id.startswith("tg:"):
        return "telegram"
    if thread_id.startswith("wa:"):
        return "whatsapp"
    if thread_id.startswith("sl:"):
        return "slack"
    if thread_id.startswith("web:"):
        return "web"
    if thread_id.isdigit():
        return "discord"
    return "other"


class _Unavailable:
    """The platform of a thread whose platform is not configured in this run (its log
    says it was once): every call fails at once, so its effects fail and nothing hangs."""

    limits = PlatformLimits()

    def __init__(self, name: str) -> None:
        self.name = name

    async def _refuse(self, *args: Any, **kwargs: Any) -> Any:
        raise PlatformError(f"{self.name} is not configured in this run")

    send = edit = delete = typing = reply = _refuse


@dataclass
class PlatformRouter:
    """The runtime's ``renderer_factory``: each thread's renderer from its platform's."""

    renderers: dict[str, ThreadRenderers] = field(default_factory=dict)

    def renderer(self, thread_id: str) -> StreamRenderer:
        name = platform_of(thread_id)
        renderers = self.renderers.get(name)
        if renderers is None:
            return StreamRenderer(_Unavailable(name), thread_id)  # type: ignore[arg-type]
        return renderers.renderer(thread_id)

    async def open_chat_renderers(
        self,
        stack: AsyncExitStack,
        discord_limits: PlatformLimits | None,
        *,
        discord: DiscordSettings | None,
        telegram: TelegramSettings | None,
        slack: SlackSettings | None,
    ) -> None:
        """The renderers of the configured Discord, Telegram and Slack connections, each
        paced by its platform's limits and shared request budget, open until ``stack``
        closes (``spindle run`` and a cluster gateway alike)."""
        if discord is not None:
            self.renderers["discord"] = await stack.enter_async_context(
                ThreadRenderers(discord_limits, budget=DISCORD_BUDGET)
            )
        if telegram is not None:
            limits = TELEGRAM_LIMITS.model_copy(
                update={"min_edit_interval_s": telegram.min_edit_interval_s}
            )
            self.renderers["telegram"] = await stack.enter_async_context(
                ThreadRenderers(limits, budget=TELEGRAM_BUDGET, scope_of=telegram_scope)
            )
        if slack is not None:
            # The renderers drive the status refreshes: they pace them by the setting too
            # (the platform's own copy only spaced a working line after output).
            limits = SLACK_LIMITS.model_copy(
                update={
                    "min_edit_interval_s": slack.min_edit_interval_s,
                    "typing_refresh_s": slack.typing_refresh_s,
                }
            )
            self.renderers["slack"] = await stack.enter_async_context(
                ThreadRenderers(limits, budget=SLACK_BUDGET, scope_of=slack_scope)
            )

    async def flush(self) -> None:
        for renderers in self.renderers.values():
            await renderers.flush()


@dataclass(frozen=True)
class PlatformsApp:
    """What ``run_platforms`` started, for tests and tools; ``stop()`` ends it gracefully."""

    runtime: Runtime
    router: PlatformRouter
    stopping: trio.Event
    discord: SpindleBot | None = None
    telegram: TelegramBot | None = None
    whatsapp: WhatsAppConnection | None = None
    slack: SlackBot | None = None
    web: WebServer | None = None
    web_chat: WebChat | None = None

    def stop(self) -> None:
        self.stopping.set()


def _log_asyncio_error(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    _log.error("asyncio: %s", context.get("message"), exc_info=context.get("exception"))


async def run_platforms(
    *,
    discord: DiscordSettings | None = None,
    telegram: TelegramSettings | None = None,
    whatsapp: WhatsAppSettings | None = None,
    slack: SlackSettings | None = None,
    web: WebSettings | None = None,
    web_platform: WebPlatform | None = None,
    log: EventLog,
    adapter_factory: AdapterFactory,
    policy: Policy,
    discord_limits: PlatformLimits | None = None,
    stop_on_signals: bool = False,
    task_status: Any = trio.TASK_STATUS_IGNORED,
    **runtime_kwargs: Any,
) -> None:
    """Every configured platform over one runtime, until ``stop()`` or cancelled. Starts
    (``task_status``) with a ``PlatformsApp`` once every platform is connected.
    ``web_platform`` replaces the web chat's platform (tests inject failures through it)."""
    if discord is None and telegram is None and whatsapp is None and slack is None and web is None:
        raise ValueError("no chat platform is configured")
    last_alive = log.last_action_at()  # before the runtime logs anything of its own
    router = PlatformRouter()
    async with open_asyncio_loop(), AsyncExitStack() as stack:
        asyncio.get_event_loop().set_exception_handler(_log_asyncio_error)
        await router.open_chat_renderers(
            stack, discord_limits, discord=discord, telegram=telegram, slack=slack
        )
        if whatsapp is not None:
            router.renderers["whatsapp"] = await stack.enter_async_context(
                ThreadRenderers(whatsapp_limits(whatsapp), append_only=True)
            )
        web_platform = web_platform or WebPlatform()
        if web is not None:
            router.renderers["web"] = await stack.enter_async_context(ThreadRenderers(WEB_LIMITS))
            router.renderers["web"].attach(web_platform)
        runtime = await stack.enter_async_context(
            open_runtime(
                log=log,
                renderer_factory=router.renderer,
                adapter_factory=adapter_factory,
                policy=policy,
                **runtime_kwargs,
            )
        )
        discord_bot = telegram_bot = slack_bot = None
        whatsapp_connection = None
        if discord is not None:
            history = LoggedHistory(log, runtime.snapshots, last_alive)
            discord_bot = await stack.enter_async_context(
                hosted_bot(discord, runtime, history=history)
            )
            router.renderers["discord"].attach(discord_bot.platform)
            discord_bot.platform.budget = router.renderers["discord"].budget
            _log.info("Discord bot %s is ready", discord_bot.user)
        if telegram is not None:
            telegram_bot = await stack.enter_async_context(hosted_telegram(telegram, runtime))
            router.renderers["telegram"].attach(telegram_bot.platform)
            _log.info("Telegram bot @%s is polling", telegram_bot.bot.username)
        if slack is not None:
            # Catch-up reads each thread from its last logged message (Slack's clock), else
            # from a little before the last logged action: what it finds twice, the core
            # drops by its action id.
            since = last_alive - 5.0 if last_alive is not None else None
            slack_bot = await stack.enter_async_context(hosted_slack(slack, runtime, since=since))
            router.renderers["slack"].attach(slack_bot.platform)
            _log.info("Slack app %s is connected (Socket Mode)", slack_bot.user_id)
        if whatsapp is not None:
            whatsapp_connection = await stack.enter_async_context(
                hosted_whatsapp(whatsapp, runtime)
            )
            router.renderers["whatsapp"].attach(whatsapp_connection.platform)
            _log.info("WhatsApp webhook listening on %s", whatsapp_connection.webhook_url)
        web_server = web_chat = None
        if web is not None:
            web_chat = WebChat(web, web_platform, runtime, log_path=log.path)
            servers = await stack.enter_async_context(trio.open_nursery())
            stack.callback(servers.cancel_scope.cancel)  # runs first: the nursery then ends
            web_server = await servers.start(partial(serve_web, web_chat))
        runtime.thread_opener = platform_thread_opener(
            discord_bot, telegram_bot, slack_bot, web_chat
        )
        app = PlatformsApp(
            runtime,
            router,
            trio.Event(),
            discord_bot,
            telegram_bot,
            whatsapp=whatsapp_connection,
            slack=slack_bot,
            web=web_server,
            web_chat=web_chat,
        )
        try:
            task_status.started(app)
            async with trio.open_nursery() as nursery:
                if stop_on_signals:
                    nursery.start_soon(_stop_on_signals, app)
                await app.stopping.wait()
                nursery.cancel_scope.cancel()
        finally:
            # While every platform is still connected: runs end, prompts close, last edits.
            with trio.CancelScope(shield=True), trio.move_on_after(30):
                await runtime.dispose_all()
                await router.flush()


def platform_thread_opener(
    discord_bot: SpindleBot | None,
    telegram_bot: TelegramBot | None,
    slack_bot: SlackBot | None = None,
    web_chat: WebChat | None = None,
) -> ThreadOpener:
    """``/fork``, ``/btw``: a new thread on the platform of the thread asking for it, for
    ``spindle run``'s runtime and a cluster gateway's runners (WhatsApp has none: its
    ingress refuses both commands before they reach the core)."""

    async def opener(source: str, title: str) -> tuple[str, str]:
        kind = platform_of(source)
        if kind == "discord" and discord_bot is not None:
            return await discord_thread_opener(discord_bot.platform)(source, title)
        if kind == "telegram" and telegram_bot is not None:
            return await telegram_thread_opener(telegram_bot.platform)(source, title)
        if kind == "slack" and slack_bot is not None:
            return await slack_thread_opener(slack_bot.platform)(source, title)
        if kind == "web" and web_chat is not None:
            return await web_thread_opener(web_chat.ids)(source, title)
        raise PlatformError(f"no platform here can open a thread beside {source}")

    return opener


async def _stop_on_signals(app: PlatformsApp) -> None:
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for signum in signals:
            _log.info("signal %s: stopping", signum)
            app.stop()
            return
