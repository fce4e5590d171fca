"""Hosting slack-bolt inside the trio program through trio-asyncio.

``hosted_slack(settings, runtime, since=…)`` is an async context manager: it builds an
``AsyncWebClient`` pointed at ``settings.base_url`` (Slack's, or the tests' fake) and a bolt
``AsyncApp`` over it (``process_before_response``: an envelope is acknowledged only when its
listener returns, and the listeners return once the trio side has made the action durable:
see ``bot``), asks ``auth.test`` who the app is, starts the ingress's trio task, catches up
on what was said while Spindle was down (``since``: about when the previous process last
acted), connects Socket
Mode (slack-bolt's aiohttp ``AsyncSocketModeHandler``) and yields a ``SlackBot``. On exit,
shielded: the socket is closed before the asyncio loop goes; envelopes not yet
acknowledged are delivered again by Slack to the next process.

It must run inside ``trio_asyncio.open_loop()``, and so must the reactor that drives
``SlackBot.platform``. The handler is made on the asyncio side: slack-sdk's Socket Mode
client creates its aiohttp session and a task in its constructor.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import trio
import trio_asyncio
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.app.async_app import AsyncApp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from threadspindle.effects.slack_platform import (
    BUTTON_PREFIX,
    SLACK_LIMITS,
    SlackPlatform,
    parse_thread_id,
    slack_thread_id,
)
from threadspindle.ingress.slack.bot import RuntimePort, SlackIngress
from threadspindle.ingress.slack.settings import SlackSettings
from threadspindle.runtime.live.ports import ThreadOpener

__all__ = ["SlackBot", "SlackRefused", "hosted_slack", "slack_thread_opener"]

_log = logging.getLogger(__name__)


def slack_thread_opener(platform: SlackPlatform) -> ThreadOpener:
    """The runtime's ``thread_opener`` on Slack (``/fork``, ``/btw``): a new anchor message
    of the app's own in the channel of the thread that asked, as ``/spindle <agent> start``
    posts one; its thread is the new conversation's."""

    async def opener(source: str, title: str) -> tuple[str, str]:
        channel, _ = parse_thread_id(source)
        name = title or "fork"
        anchor = await platform.say(channel, None, f"*{name}*: reply in this thread.")
        return slack_thread_id(channel, anchor), f"the thread “{name}” in <#{channel}>"

    return opener


class SlackRefused(Exception):
    """Slack refused the app's tokens at start-up (a wrong or revoked token, a missing
    scope): said in one line, without the token."""


@dataclass(frozen=True)
class SlackBot:
    client: AsyncWebClient
    app: AsyncApp
    platform: SlackPlatform
    ingress: SlackIngress
    user_id: str  # the app's bot user
    team_id: str


def _listeners(app: AsyncApp, ingress: SlackIngress, command: str) -> None:
    """Bolt's listeners: each waits for the trio side to have handled its envelope."""

    @app.event("message")
    async def on_message(body: dict[str, Any]) -> None:
        await ingress.settled(body)

    @app.event("app_mention")
    async def on_mention(body: dict[str, Any]) -> None:
        return None  # the same words come as a message event too

    @app.command(command)
    async def on_command(body: dict[str, Any], ack: Any) -> None:
        text = await ingress.settled(body)
        await (ack(text=text) if text else ack())

    @app.action(re.compile("^" + re.escape(BUTTON_PREFIX)))
    async def on_action(body: dict[str, Any], ack: Any) -> None:
        await ingress.settled(body)
        await ack()


@asynccontextmanager
async def hosted_slack(
    settings: SlackSettings, runtime: RuntimePort, *, since: float | None = None
) -> AsyncIterator[SlackBot]:
    aio = trio_asyncio.aio_as_trio

    async def build() -> tuple[AsyncWebClient, AsyncApp]:
        client = AsyncWebClient(token=settings.bot_token, base_url=settings.base_url, timeout=10)
        # A logger of our own under "slack_bolt": bolt's default one copies the root
        # logger's level (DEBUG, for the log file) and would log every socket frame.
        logger = logging.getLogger("slack_bolt.spindle")
        app = AsyncApp(client=client, process_before_response=True, logger=logger)
        return client, app

    client, app = await aio(build)()
    try:
        auth = await aio(client.auth_test)()
    except SlackApiError as error:
        raise SlackRefused(
            f"Slack refused the bot token ({error.response.get('error')}) at "
            f"{settings.base_url}: check SPINDLE_SLACK_BOT_TOKEN (docs/slack-setup.md)"
        ) from None
    user_id, team_id = str(auth["user_id"]), str(auth["team_id"])
    limits = SLACK_LIMITS.model_copy(
        update={
            "min_edit_interval_s": settings.min_edit_interval_s,
            "typing_refresh_s": settings.typing_refresh_s,
        }
    )
    platform = SlackPlatform(client, limits)
    ingress = SlackIngress(settings, platform, runtime, bot_user=user_id, team=team_id)
    _listeners(app, ingress, settings.command)

    async def make_handler() -> AsyncSocketModeHandler:
        ingress.bind(asyncio.get_running_loop())
        handler = AsyncSocketModeHandler(app, app_token=settings.app_token)
        # First of the client's listeners: it sees every frame in arrival order.
        handler.client.message_listeners.insert(0, ingress.on_envelope)
        return handler

    handler = await aio(make_handler)()
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(ingress.run)
            if since is not None:
                await ingress.catch_up(since)  # before the socket: live envelopes come after
            try:
                await aio(handler.connect_async)()
            except SlackApiError as error:
                raise SlackRefused(
                    f"Slack refused Socket Mode ({error.response.get('error')}): check "
                    "SPINDLE_SLACK_APP_TOKEN, an xapp- token with connections:write "
                    "(docs/slack-setup.md)"
                ) from None
            try:
                yield SlackBot(client, app, platform, ingress, user_id, team_id)
            finally:
                nursery.cancel_scope.cancel()
    finally:
        with trio.CancelScope(shield=True), trio.move_on_after(10):
            try:
                await aio(handler.close_async)()
            except Exception as error:  # closing must not hide why we stopped
                _log.info("closing the Slack socket: %s", error)
