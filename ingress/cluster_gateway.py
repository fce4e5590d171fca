"""A gateway node's chat connections over JetStream (``spindle gateway`` with a chat platform
configured): ``run_chat_gateway``.

The gateway holds the real connections, with the same ingress and platform code as
``spindle run`` (``ingress/discord``, ``ingress/telegram``, ``ingress/slack`` hosted by
their ``hosted_*``; ``effects/*_platform.py`` behind ``ThreadRenderers`` and
``ingress.platforms.PlatformRouter``), but no runtime: in its place ``RemoteRuntime``
publishes each action to the runner of its thread's root (``effects.jetstream.gateway``),
and answers the ingress's questions about a thread (``snapshot``) from a view folded from
the thread's log (``effects.jetstream.views``).

Discord is split across gateways by discord.py's shards: a gateway holds ``shard_ids`` of
``shard_count`` (an ``AutoShardedClient``), receives only its guilds' events, and reads the
effects of the threads homed on its shards, ``discord-<shard>``, where shard = (guild_id >> 22)
% shard_count. Telegram and Slack are one connection each: one gateway holds each (homes
``telegram``, ``slack``). Every action a gateway sends names its thread's home, so the
runner publishes the thread's effects where the connection that can show them is.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import trio

from threadspindle.effects.jetstream.connection import JetStream
from threadspindle.effects.jetstream.gateway import Gateway
from threadspindle.effects.jetstream.transport import (
    GATEWAY_ACK_WAIT_S,
    Transport,
    open_transport,
)
from threadspindle.effects.jetstream.views import ThreadViews
from threadspindle.effects.platform import PlatformLimits
from threadspindle.effects.render import StreamRenderer
from threadspindle.ingress.discord.bot import SpindleBot
from threadspindle.ingress.discord.catchup import INGRESS_KINDS, discord_id
from threadspindle.ingress.discord.host import hosted_bot
from threadspindle.ingress.discord.settings import DiscordSettings
from threadspindle.ingress.platforms import PlatformRouter, platform_of, platform_thread_opener
from threadspindle.ingress.slack.host import SlackBot, hosted_slack
from threadspindle.ingress.slack.settings import SlackSettings
from threadspindle.ingress.telegram.host import TelegramBot, hosted_telegram
from threadspindle.ingress.telegram.settings import TelegramSettings
from threadspindle.runtime.core.actions import Action, ConversationStarted
from threadspindle.runtime.core.effect_types import ReplyToCommand
from threadspindle.runtime.core.model import ThreadState
from threadspindle.runtime.live.ports import Posted

__all__ = ["ChatGateway", "RemoteRuntime", "discord_shard", "run_chat_gateway"]

_log = logging.getLogger("spindle.chat_gateway")


def discord_shard(guild_id: int, shard_count: int) -> int:
    """The shard that carries a guild's events (Discord's formula)."""
    return (guild_id >> 22) % shard_count


@dataclass
class _Stored:
    """What ``RemoteRuntime.post`` hands back: the action is stored in JetStream (or was
    dropped, ``note`` says why). Ingress that waits for durability waits no more."""

    note: str | None = None

    async def durable(self) -> bool:
        return True


@dataclass
class RemoteRuntime:
    """The ``RuntimePort`` of the Discord, Telegram and Slack ingress on a gateway node."""

    gateway: Gateway
    views: ThreadViews
    roots: Sequence[str]
    discord: SpindleBot | None = None  # set once connected: the home of a Discord thread
    discord_shards: tuple[int, int] = (0, 1)  # (first shard held here, shard count)
    sent: int = 0
    dropped: list[str] = field(default_factory=list)
    # How the gateway answers, in the thread, an action no runner can take (set by
    # ``run_chat_gateway``: the thread's renderer applies the reply).
    tell: Callable[[str, ReplyToCommand], Awaitable[object]] | None = None

    def home_of(self, thread_id: str) -> str:
        kind = platform_of(thread_id)
        if kind != "discord":
            return kind
        first, count = self.discord_shards
        channel = self.discord.get_channel(int(thread_id)) if self.discord else None
        guild = getattr(channel, "guild", None)
        shard = discord_shard(guild.id, count) if guild is not None else first
        return f"discord-{shard}"

    def root_of(self, workdir: str) -> str | None:
        """The declared root a workdir lies under (the longest, if several do)."""
        real = os.path.realpath(workdir)
        under = [r for r in self.roots if real == r or real.startswith(r.rstrip("/") + "/")]
        return max(under, key=len) if under else None

    async def post(self, action: Action, *, channel_id: str | None = None) -> _Stored:
        home = self.home_of(action.thread_id)
        routed = None
        if isinstance(action, ConversationStarted):
            # A thread stays with the root it was first routed to: its runner holds the
            # thread's lease while its actor lives, and another root's runner would wait
            # for it. That runner's core refuses a workdir outside its roots, with a reply.
            routed = await self.gateway.transport.root_of(action.thread_id)
        if isinstance(action, ConversationStarted) and routed is None:
            root = self.root_of(action.resolved_workdir or action.requested_workdir)
            if root is None:
                why = f"no runner root holds {action.resolved_workdir}"
                _log.warning("conversation in %s not started: %s", action.thread_id, why)
                self.dropped.append(action.action_id)
                await self._refuse(action, not_served(action, self.roots))
                return _Stored(why)
            await self.gateway.start(root, action, home=home, channel=channel_id)
        else:
            try:
                await self.gateway.send(action, home=home, channel=channel_id)
            except LookupError as exc:  # no conversation was ever started in the thread
                _log.info("%s dropped: %s", action.kind, exc)
                self.dropped.append(action.action_id)
                return _Stored(str(exc))
        self.sent += 1
        self.views.mark(action.thread_id)
        return _Stored()

    async def _refuse(self, action: Action, text: str) -> None:
        """Say in the thread why nothing happened: no runner will, as none took it."""
        if self.tell is None:
            return
        reply = ReplyToCommand(
            key=f"{action.thread_id}/reply/{action.action_id}",
            action_id=action.action_id,
            text=text,
        )
        try:
            await self.tell(action.thread_id, reply)
        except Exception:  # the refusal is logged above; a failed answer must not stop ingress
            _log.exception("could not answer in %s", action.thread_id)

    def snapshot(self, thread_id: str) -> ThreadState | None:
        return self.views.snapshot(thread_id)

    def snapshots(self) -> dict[str, ThreadState]:
        return dict(self.views.snapshots())

    async def dispose(self, thread_id: str) -> None:
        """A thread archived or deleted on the platform: the runner serving its root stops
        its actor and agent now (``Transport.dispose``), as ``spindle run`` would."""
        try:
            disposed = await self.gateway.transport.dispose(thread_id)
        except Exception:  # a disposal is housekeeping: ingress goes on whatever happens
            _log.exception("could not ask for %s to be disposed", thread_id)
            return
        _log.info("%s %s", thread_id, "disposed" if disposed else "had nothing running")


def not_served(action: ConversationStarted, roots: Sequence[str]) -> str:
    """The answer to a conversation whose workdir lies under no runner's root."""
    workdir = action.resolved_workdir or action.requested_workdir
    return (
        f"⚠ Not started: {workdir!r} is under none of the folders this cluster's runners "
        f"serve ({', '.join(roots) or 'none'}). Start it in one of them."
    )


@dataclass
class _ViewHistory:
    """``catchup.SeenHistory`` from the views: where each Discord thread left off."""

    views: ThreadViews
    last_alive: float | None
    newest: dict[str, int]

    def open_threads(self) -> list[str]:
        return [
            t
            for t, state in self.views.snapshots().items()
            if state.conversation is not None and t.isdigit()
        ]

    def last_seen(self, thread_id: str) -> int | None:
        return self.newest.get(thread_id)


@dataclass
class ChatGateway:
    """What ``run_chat_gateway`` started, for tests and tools; ``stop()`` ends it."""

    gateway: Gateway
    runtime: RemoteRuntime
    views: ThreadViews
    homes: tuple[str, ...]
    stopping: trio.Event
    discord: SpindleBot | None = None
    telegram: TelegramBot | None = None
    slack: SlackBot | None = None

    def stop(self) -> None:
        self.stopping.set()


async def _homed_threads(transport: Transport, homes: Sequence[str]) -> list[str]:
    """The threads whose home is one of ``homes`` (``spindle_homes``)."""
    from threadspindle.effects.jetstream.runner import thread_of_token

    entries = await transport.entries(transport.homes)
    return [thread_of_token(key) for key, home in entries.items() if home.decode() in homes]


def _log_asyncio_error(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    _log.error("asyncio: %s", context.get("message"), exc_info=context.get("exception"))


async def run_chat_gateway(
    conn: JetStream,
    *,
    roots: Sequence[str],
    discord: DiscordSettings | None = None,
    telegram: TelegramSettings | None = None,
    slack: SlackSettings | None = None,
    discord_limits: PlatformLimits | None = None,
    ack_wait_s: float = GATEWAY_ACK_WAIT_S,
    task_status: Any = trio.TASK_STATUS_IGNORED,
) -> None:
    """Hold the configured chat connections until ``stop()`` or cancelled; starts with a
    ``ChatGateway`` once every connection is up and effects are being read. Runs inside
    ``open_jetstream``'s asyncio loop (the chat libraries share it with nats-py)."""
    if discord is None and telegram is None and slack is None:
        raise ValueError("no chat platform is configured for this gateway")
    asyncio.get_event_loop().set_exception_handler(_log_asyncio_error)
    transport = await open_transport(conn)
    homes: list[str] = []
    shards: tuple[int, int] = (0, 1)
    if discord is not None:
        count = discord.shard_count or 1
        ids = discord.shard_ids or tuple(range(count))
        shards = (ids[0], count)
        homes += [f"discord-{i}" for i in ids]
    if telegram is not None:
        homes.append("telegram")
    if slack is not None:
        homes.append("slack")
    newest: dict[str, int] = {}

    def seen(action: Action) -> None:
        if action.kind in INGRESS_KINDS:
            found = discord_id(action.action_id)
            if found is not None and found > newest.get(action.thread_id, 0):
                newest[action.thread_id] = found

    views = ThreadViews(conn, on_action=seen)
    # What this gateway's threads look like before any event is taken in: a restarted
    # gateway must know which threads have a conversation, and where each left off.
    await views.load(await _homed_threads(transport, homes))
    last_alive = views.last_at
    router = PlatformRouter()
    gateway = Gateway(conn, transport, router.renderer)
    gateway.on_applied = views.mark

    async def resume(
        thread_id: str, renderer: Any, posted: dict[str, tuple[str, ...]]
    ) -> list[Posted]:
        """The thread's last text outputs, whole, in the messages a dead gateway posted for
        them (it may have died before showing all of their text)."""
        made: list[Posted] = []
        if isinstance(renderer, StreamRenderer):
            for key, (text, seq, sealed) in views.recent_outputs(thread_id).items():
                made += await renderer.resume_stream(
                    key, text, seq, posted.get(key, ()), sealed=sealed
                )
        return made

    gateway.on_renderer = resume
    runtime = RemoteRuntime(gateway, views, [os.path.realpath(r) for r in roots])
    runtime.discord_shards = shards

    runtime.tell = gateway.tell
    async with AsyncExitStack() as stack:
        nursery = await stack.enter_async_context(trio.open_nursery())
        stack.callback(nursery.cancel_scope.cancel)
        await nursery.start(views.run)
        await router.open_chat_renderers(
            stack, discord_limits, discord=discord, telegram=telegram, slack=slack
        )
        discord_bot = telegram_bot = slack_bot = None
        if discord is not None:
            history = _ViewHistory(views, last_alive, newest)
            discord_bot = await stack.enter_async_context(
                hosted_bot(discord, runtime, history=history)
            )
            runtime.discord = discord_bot
            router.renderers["discord"].attach(discord_bot.platform)
            held = discord.shard_ids or tuple(range(shards[1]))
            _log.info("Discord shards %s of %s are ready", ",".join(map(str, held)), shards[1])
        if telegram is not None:
            telegram_bot = await stack.enter_async_context(hosted_telegram(telegram, runtime))
            router.renderers["telegram"].attach(telegram_bot.platform)
        if slack is not None:
            since = last_alive - 5.0 if last_alive is not None else None
            slack_bot = await stack.enter_async_context(hosted_slack(slack, runtime, since=since))
            router.renderers["slack"].attach(slack_bot.platform)
        # Entered last, so closed first: no effect is applied once a connection closes.
        effects = await stack.enter_async_context(trio.open_nursery())
        stack.callback(effects.cancel_scope.cancel)
        # /fork and /btw on a runner: the thread is opened here, where the connection is.
        opener = platform_thread_opener(discord_bot, telegram_bot, slack_bot)
        await effects.start(partial(gateway.serve_thread_opening, homes, opener))
        await effects.start(
            lambda task_status: gateway.serve_effects(
                homes=homes, ack_wait_s=ack_wait_s, task_status=task_status
            )
        )
        app = ChatGateway(
            gateway,
            runtime,
            views,
            tuple(homes),
            trio.Event(),
            discord_bot,
            telegram_bot,
            slack_bot,
        )
        task_status.started(app)
        await app.stopping.wait()
        with trio.CancelScope(shield=True):
            # The effects in hand applied and acked (the next gateway need not wait for
            # them), then the renderers' last paced edits, while the connections are up.
            left = await gateway.drain(10)
            if left:
                _log.warning("stopped with %d effects in hand: the next gateway gets them", left)
            with trio.move_on_after(10):
                await router.flush()
