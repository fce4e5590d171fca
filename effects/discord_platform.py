"""``DiscordPlatform``: the ``ChatPlatform`` the stream renderer drives, over discord.py.

Called from trio (the reactor); every call crosses into discord.py's asyncio world through
``trio_asyncio.aio_as_trio``, so it must run inside ``trio_asyncio.open_loop()`` (the
Discord host opens it). What it keeps:

- Messages are sent with link embeds suppressed and mentions disabled (an agent's output
  must never ping anyone), with the caller's ``nonce`` (the idempotency key's hash).
- Buttons and select menus are ``discord.ui`` components whose ``custom_id`` is the
  effect's ``Button.action`` / ``SelectMenu.custom_id``; the clicks come back through
  ``ingress.discord`` as actions, never through view callbacks, so they survive restarts.
- ``reply`` answers the interaction that produced ``action_id`` through its followup
  webhook (ingress deferred it at once, publicly, and registered it here). The first
  followup replaces the deferral's "thinking..." message; an ephemeral first answer
  deletes that message first, since Discord would keep it public. A command that came as a
  plain message (the `` queue`` suffix) is answered in its channel, as a reply to it.
- Failures become ``PlatformError``: 429 carries ``retry_after``, 5xx and disconnects are
  ``retryable``, 4xx are permanent. discord.py's own rate limiter already sleeps through
  short 429s (up to ``max_ratelimit_timeout``) before one reaches us.
- **The server's word reaches the budget.** discord.py keeps the rate-limit headers to
  itself and sleeps through short 429s, so the renderers' shared ``RequestBudget`` would
  see neither: an aiohttp trace on the client's session (``rate_limit_trace``) hands every
  answer on a message route to ``observe_response``, which tells the budget the bucket's
  size (``X-RateLimit-Limit`` / ``-Reset-After``: ``observe``), holds the channel's kind
  while the bucket is spent (``X-RateLimit-Remaining: 0``) and holds for a 429's
  ``Retry-After`` (everything for a global one). The same trace stamps when each request
  is written out (its headers, then its body: ``request_budget.request_sent``) and when
  its answer came (``request_answered``), so an attempt's token counts from when it
  reached Discord, not from when its answer got back across into trio. A request that is
  no attempt's (ingress's own calls: a conversation's thread, a notice) is counted as it
  goes out (``RequestBudget.count_outside``), unless it is an interaction's.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import io
import logging
import re
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import aiohttp
import discord
import trio_asyncio

from threadspindle.effects.chunking import EMPTY_OPTION
from threadspindle.effects.platform import PlatformError, PlatformLimits, SelectMenu
from threadspindle.effects.request_budget import (
    CallKind,
    RequestBudget,
    request_answered,
    request_sent,
)
from threadspindle.runtime.core.effect_types import Button

__all__ = ["Deferral", "DiscordPlatform", "discord_nonce", "rate_limit_trace"]

_log = logging.getLogger(__name__)

T = TypeVar("T")

# Ingress's acknowledgement of an interaction (``InteractionResponse.defer``), in flight.
Deferral = asyncio.Future[Any]

_NO_MENTIONS = discord.AllowedMentions.none()
_DEFERRAL_WAIT_S = 10.0  # Discord drops an interaction not acknowledged within 3 s
_REMEMBERED_INTERACTIONS = 512  # followup tokens live 15 minutes; keep the recent ones


def discord_nonce(key: str) -> str:
    """Discord nonces are at most 25 characters: a stable digest of the output key."""
    return hashlib.blake2b(key.encode(), digest_size=12).hexdigest()[:25]


MAX_MENU_OPTIONS = 25  # a select menu's options
MAX_OPTION_CHARS = 100  # an option's label and its value


def _select_options(options: tuple[str, ...]) -> list[discord.SelectOption]:
    """A question's options for a select menu. Discord refuses an empty label or value and
    two options with one value: an empty option reads ``EMPTY_OPTION``, and a value that
    is empty or taken (two options alike in their first 100 characters) is the option's
    number before its text, so each pick still tells which option it was (the question's
    text then lists them in full, numbered: ``chunking.question_text``)."""
    chosen: list[discord.SelectOption] = []
    taken: set[str] = set()
    for number, option in enumerate(options, start=1):
        label = option[:MAX_OPTION_CHARS].strip() or EMPTY_OPTION
        value = option[:MAX_OPTION_CHARS]
        if not value.strip() or value in taken:
            value = f"{number}. {option.strip() or EMPTY_OPTION}"[:MAX_OPTION_CHARS]
        taken.add(value)
        chosen.append(discord.SelectOption(label=label, value=value))
    return chosen


def _view(buttons: tuple[Button, ...] = (), menu: SelectMenu | None = None) -> discord.ui.View:
    view = discord.ui.View(timeout=None)
    for button in buttons:
        style = discord.ButtonStyle.secondary
        if button.action.startswith("permission:allow:"):
            style = discord.ButtonStyle.success
        elif button.action.startswith(("permission:deny:", "remove_queued:")):
            style = discord.ButtonStyle.danger
        view.add_item(
            discord.ui.Button(label=button.label[:80], custom_id=button.action[:100], style=style)
        )
    if menu is not None:
        options = _select_options(menu.options[:MAX_MENU_OPTIONS])
        view.add_item(
            discord.ui.Select(
                custom_id=menu.custom_id[:100],
                options=options,
                max_values=len(options) if menu.multiple else 1,
            )
        )
    return view


class DiscordPlatform:
    """A ``ChatPlatform`` over a logged-in ``discord.Client``."""

    def __init__(self, client: discord.Client, limits: PlatformLimits | None = None) -> None:
        self.client = client
        self.limits = limits or PlatformLimits()
        self.streams_append_only = False  # messages are edited in place
        self._interactions: OrderedDict[str, discord.Interaction] = OrderedDict()
        self._answered: OrderedDict[str, None] = OrderedDict()  # replied to at least once
        self._deferrals: dict[str, Deferral] = {}  # action id -> its deferral, if pending
        self.calls = 0  # platform calls made (each is one REST call unless discord retried)
        # The renderers' shared budget, told what the server's answers say (``attach``
        # by the host); None: nobody to tell.
        self.budget: RequestBudget | None = None

    # --- registry of deferred interactions (ingress fills it) --------------------------

    def remember_interaction(
        self,
        action_id: str,
        interaction: discord.Interaction,
        deferral: Deferral | None = None,
    ) -> None:
        """``deferral``: ingress's acknowledgement of it, still on its way; a followup
        waits for it (Discord refuses one before the interaction is acknowledged)."""
        self._interactions[action_id] = interaction
        if deferral is not None:
            self._deferrals[action_id] = deferral
        while len(self._interactions) > _REMEMBERED_INTERACTIONS:
            gone, _ = self._interactions.popitem(last=False)
            self._deferrals.pop(gone, None)

    # --- ChatPlatform -----------------------------------------------------------------

    async def send(
        self,
        channel_id: str,
        text: str,
        *,
        buttons: tuple[Button, ...] = (),
        menu: SelectMenu | None = None,
        nonce: str | None = None,
    ) -> str:
        async def send() -> str:
            channel = self.client.get_partial_messageable(int(channel_id))
            kwargs: dict[str, Any] = {}
            if buttons or menu is not None:
                kwargs["view"] = _view(buttons, menu)
            if nonce:
                kwargs["nonce"] = discord_nonce(nonce)
            message = await channel.send(
                text,
                suppress_embeds=True,
                allowed_mentions=_NO_MENTIONS,
                **kwargs,
            )
            if nonce and message.content.strip() != text.strip():
                # The nonce was used already (enforce_nonce): Discord answered with the
                # message a crashed process posted, showing what it had then. Brought to
                # what is wanted now, or it would keep the old text.
                view = {"view": kwargs["view"]} if "view" in kwargs else {}
                await message.edit(content=text, allowed_mentions=_NO_MENTIONS, **view)
            return str(message.id)

        return await self._call(send)

    async def send_file(self, channel_id: str, filename: str, data: bytes, caption: str) -> str:
        """A message with the file attached (``discord.File``: a multipart upload)."""

        async def send() -> str:
            channel = self.client.get_partial_messageable(int(channel_id))
            message = await channel.send(
                caption,
                file=discord.File(io.BytesIO(data), filename=filename),
                suppress_embeds=True,
                allowed_mentions=_NO_MENTIONS,
            )
            return str(message.id)

        return await self._call(send)

    async def edit(
        self,
        channel_id: str,
        message_id: str,
        text: str,
        *,
        buttons: tuple[Button, ...] | None = None,
    ) -> None:
        async def edit() -> None:
            channel = self.client.get_partial_messageable(int(channel_id))
            kwargs: dict[str, Any] = {}
            if buttons is not None:
                kwargs["view"] = _view(buttons) if buttons else None
            # The suppress-embeds flag set when sending survives edits.
            await channel.get_partial_message(int(message_id)).edit(
                content=text, allowed_mentions=_NO_MENTIONS, **kwargs
            )

        await self._call(edit)

    async def delete(self, channel_id: str, message_id: str) -> None:
        async def delete() -> None:
            channel = self.client.get_partial_messageable(int(channel_id))
            try:
                await channel.get_partial_message(int(message_id)).delete()
            except discord.NotFound:
                pass  # already gone: deleting is idempotent

        await self._call(delete)

    async def typing(self, channel_id: str) -> None:
        async def typing() -> None:
            await self.client.http.send_typing(int(channel_id))

        await self._call(typing)

    async def rename_thread(self, channel_id: str, title: str) -> None:
        async def rename() -> None:
            # Discord allows 2 renames per 10 minutes per thread: the renderer paces them
            # (PlatformLimits.renames_per_window); a 429 still comes back as retry_after.
            await self.client.http.edit_channel(int(channel_id), name=title[:100])

        await self._call(rename)

    async def reply(
        self,
        channel_id: str,
        action_id: str,
        text: str,
        *,
        ephemeral: bool = False,
        buttons: tuple[Button, ...] = (),
    ) -> str:
        interaction = self._interactions.get(action_id)

        async def followup() -> str:
            assert interaction is not None
            deferral = self._deferrals.pop(action_id, None)
            if deferral is not None and not deferral.done():
                # ``wait`` neither cancels the deferral with this reply nor raises its
                # failure (ingress reports that; the followup then fails on its own), and
                # gives up on one Discord would have dropped long ago.
                await asyncio.wait({deferral}, timeout=_DEFERRAL_WAIT_S)
            if (
                ephemeral
                and action_id not in self._answered
                and interaction.type is discord.InteractionType.application_command
            ):
                # The first followup would fill the public "thinking..." message that the
                # deferral showed, ignoring the ephemeral flag: remove that message first.
                with contextlib.suppress(discord.NotFound):  # gone already: a retried reply
                    await interaction.delete_original_response()
            kwargs: dict[str, Any] = {}
            if buttons:
                kwargs["view"] = _view(buttons)
            message = await interaction.followup.send(
                text,
                ephemeral=ephemeral,
                wait=True,
                suppress_embeds=True,
                allowed_mentions=_NO_MENTIONS,
                **kwargs,
            )
            self._answered[action_id] = None
            while len(self._answered) > _REMEMBERED_INTERACTIONS:
                self._answered.popitem(last=False)
            return str(message.id)

        async def in_channel() -> str:
            channel = self.client.get_partial_messageable(int(channel_id))
            kwargs: dict[str, Any] = {}
            if buttons:
                kwargs["view"] = _view(buttons)
            if action_id.startswith("msg-"):
                kwargs["reference"] = channel.get_partial_message(int(action_id[4:]))
                kwargs["mention_author"] = False
            message = await channel.send(
                text,
                suppress_embeds=True,
                allowed_mentions=_NO_MENTIONS,
                nonce=discord_nonce(f"reply/{action_id}"),
                **kwargs,
            )
            return str(message.id)

        if interaction is not None:
            try:
                return await self._call(followup)
            except PlatformError as error:
                if error.retryable:
                    raise
                # The interaction token expired (15 min): answer in the channel instead.
                _log.info("followup for %s failed (%s); answering in channel", action_id, error)
        return await self._call(in_channel)

    async def open_thread_beside(self, thread_id: str, title: str) -> str:
        """A new public thread in the channel of thread ``thread_id`` (``/fork``,
        ``/btw``), named ``title``; its id. Made the way ``/claude start`` in a channel
        makes one."""

        async def open_thread() -> str:
            source = self.client.get_channel(int(thread_id))
            if source is None:
                source = await self.client.fetch_channel(int(thread_id))
            parent = source.parent if isinstance(source, discord.Thread) else source
            if not isinstance(parent, discord.TextChannel):
                raise PlatformError(f"cannot open a thread beside channel {thread_id}")
            thread = await parent.create_thread(
                name=title[:90] or "fork", type=discord.ChannelType.public_thread
            )
            return str(thread.id)

        return await self._call(open_thread)

    # --- rate-limit headers ------------------------------------------------------------

    def observe_response(self, method: str, path: str, status: int, headers: Any) -> None:
        """One REST answer (``rate_limit_trace``): what its rate-limit headers say goes to
        the budget (see the module docstring). Unparseable headers are ignored."""
        budget = self.budget
        if budget is None:
            return
        route = _route_kind(method, path)
        try:
            if status == 429:
                retry_after = float(headers.get("Retry-After", 1.0))
                if headers.get("X-RateLimit-Global", "").lower() == "true":
                    budget.hold(retry_after)
                elif route is not None:
                    budget.hold(retry_after, channel_id=route[0], kind=route[1])
                return
            if route is None or "X-RateLimit-Limit" not in headers:
                return
            channel_id, kind = route
            limit = int(headers["X-RateLimit-Limit"])
            reset_after = float(headers.get("X-RateLimit-Reset-After", 0.0))
            budget.observe(channel_id, kind, limit, reset_after)
            if headers.get("X-RateLimit-Remaining") == "0":
                budget.spent(channel_id, kind, reset_after)
        except (TypeError, ValueError):
            _log.debug("unreadable rate-limit headers on %s %s: %r", method, path, headers)

    # --- the asyncio crossing and error mapping ----------------------------------------

    async def _call(self, fn: Callable[[], Awaitable[T]]) -> T:
        self.calls += 1
        try:
            result: T = await trio_asyncio.aio_as_trio(fn)()  # (trio_asyncio is untyped)
            return result
        except discord.RateLimited as error:
            raise PlatformError(str(error), retry_after=error.retry_after) from error
        except discord.HTTPException as error:
            if error.status == 429:
                retry_after = _retry_after(error)
                raise PlatformError(str(error), retry_after=retry_after) from error
            raise PlatformError(str(error), retryable=error.status >= 500) from error
        except (TimeoutError, discord.ConnectionClosed, aiohttp.ClientError, OSError) as error:
            raise PlatformError(f"disconnected: {error!r}", retryable=True) from error
        except RuntimeError as error:
            if self.client.is_closed():  # aiohttp's "Session is closed": we are shutting down
                raise PlatformError(f"the Discord client is closed: {error}") from error
            raise


def _retry_after(error: discord.HTTPException) -> float:
    try:
        return float(error.response.headers.get("Retry-After", 1.0))
    except (TypeError, ValueError, AttributeError):
        return 1.0


# The REST routes whose buckets the budget keeps (per channel): (method, path) -> kind.
_ROUTES = (
    ("POST", re.compile(r"/channels/(\d+)/messages$"), "send"),
    ("PATCH", re.compile(r"/channels/(\d+)/messages/\d+$"), "edit"),
    ("DELETE", re.compile(r"/channels/(\d+)/messages/\d+$"), "delete"),
    ("POST", re.compile(r"/channels/(\d+)/typing$"), "typing"),
)


def _route_kind(method: str, path: str) -> tuple[str, CallKind] | None:
    """(channel id, the budget's call kind) of a message route's request, else None."""
    for route_method, pattern, kind in _ROUTES:
        if method == route_method and (match := pattern.search(path)):
            return match.group(1), kind  # type: ignore[return-value]
    return None


def rate_limit_trace(platform: Callable[[], DiscordPlatform | None]) -> aiohttp.TraceConfig:
    """An aiohttp trace for the ``discord.Client`` (``http_trace``) that hands every REST
    answer to ``platform()``'s ``observe_response`` (looked up at each answer: the client
    is made before its platform), and stamps each request as it is written out and as its
    answer comes for the budget's attempt in progress (``request_sent``: aiohttp calls
    both its hooks just before the bytes go to the socket; ``request_answered``). The
    trace's per-request context names the request."""

    async def on_request_answered(
        session: aiohttp.ClientSession,
        context: object,
        params: aiohttp.TraceRequestEndParams,
    ) -> None:
        request_answered(context)

    async def on_request_sent(
        session: aiohttp.ClientSession,
        context: object,
        params: aiohttp.TraceRequestHeadersSentParams | aiohttp.TraceRequestChunkSentParams,
    ) -> None:
        if request_sent(context):
            return
        target = platform()
        path = params.url.path
        # Interaction endpoints are outside Discord's global limit (``global_exempt``).
        if target is not None and target.budget is not None and "/interactions/" not in path:
            if "/webhooks/" not in path:
                target.budget.count_outside(context)

    async def on_request_end(
        session: aiohttp.ClientSession,
        context: object,
        params: aiohttp.TraceRequestEndParams,
    ) -> None:
        target = platform()
        if target is not None:
            response = params.response
            target.observe_response(
                params.method, params.url.path, response.status, response.headers
            )

    trace = aiohttp.TraceConfig()
    trace.on_request_headers_sent.append(on_request_sent)
    trace.on_request_chunk_sent.append(on_request_sent)
    trace.on_request_end.append(on_request_answered)
    trace.on_request_end.append(on_request_end)
    return trace
