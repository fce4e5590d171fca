"""``ThreadRenderers``: the runtime's ``renderer_factory`` for one chat platform.

One ``StreamRenderer`` per thread over the platform, each with its background task (paced
edits, typing refresh) in this object's nursery; ``PendingPlatform`` stands in for the
platform until its client is connected (threads recovered at start-up render into it and
wait). Discord, Telegram and later platforms each have one; ``spindle run`` routes a
thread to its platform's by the thread id (``app.platforms``). With ``budget`` limits, one
``RequestBudget`` (``effects.request_budget``) serves every renderer of the connection:
its task runs in this object's nursery.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial
from typing import Any

import trio

from threadspindle.effects.platform import ChatPlatform, PlatformLimits
from threadspindle.effects.render import StreamRenderer
from threadspindle.effects.request_budget import BudgetLimits, RequestBudget

__all__ = ["PendingPlatform", "ThreadRenderers"]

_log = logging.getLogger(__name__)


class PendingPlatform:
    """The bot's platform before the bot exists: renderers made while the runtime starts
    (recovered threads) wait here until ``attach``."""

    def __init__(self, limits: PlatformLimits, *, append_only: bool = False) -> None:
        self.limits = limits
        # As the platform it stands for: False where messages are edited in place
        # (Discord, Telegram), True where nothing shown changes (WhatsApp).
        self.streams_append_only = append_only
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

    async def rename_thread(self, channel_id: str, title: str) -> None:
        await (await self._ready()).rename_thread(channel_id, title)

    async def send_file(
        self, channel_id: str, filename: str, data: bytes, caption: str
    ) -> str | None:
        return await (await self._ready()).send_file(channel_id, filename, data, caption)


class ThreadRenderers:
    """The runtime's ``renderer_factory`` for one chat platform: one ``StreamRenderer`` per
    thread (a Discord thread, a Telegram topic ...) over the platform, each with its background task
    (paced edits, typing refresh) in this object's nursery. Use as an async context
    manager around the runtime; ``attach(bot.platform)`` once the bot is ready.

    A renderer its owner closed (``aclose``: the thread's actor was disposed, by the idle
    sweep or an archive) has nothing left to pace: its task stops and it is forgotten, so
    neither tasks nor renderers pile up over the bot's lifetime (each kept about 20 KB and a
    task, for every thread ever shown). A thread's actor made again gets a new renderer;
    one made while the old one was still open replaces it, and the old one makes its last
    edits and then stops."""

    def __init__(
        self,
        limits: PlatformLimits | None = None,
        *,
        append_only: bool = False,
        budget: BudgetLimits | None = None,
        scope_of: Callable[[str], tuple[str, bool]] | None = None,
    ) -> None:
        self.limits = limits or PlatformLimits()
        self.budget: RequestBudget | None = None
        if budget is not None:
            self.budget = (
                RequestBudget(budget)
                if scope_of is None
                else RequestBudget(budget, scope_of=scope_of)
            )
        self.platform = PendingPlatform(self.limits, append_only=append_only)
        self.renderers: dict[str, StreamRenderer] = {}
        self._scopes: dict[str, trio.CancelScope] = {}
        self.running = 0  # renderer background tasks alive
        self._nursery: trio.Nursery | None = None
        self._nursery_manager: Any = None

    async def __aenter__(self) -> ThreadRenderers:
        self._nursery_manager = trio.open_nursery()
        self._nursery = await self._nursery_manager.__aenter__()
        if self.budget is not None:
            await self._nursery.start(self.budget.run)
        return self

    async def __aexit__(self, *exc: Any) -> bool | None:
        assert self._nursery is not None
        self._nursery.cancel_scope.cancel()
        return bool(await self._nursery_manager.__aexit__(*exc))

    def attach(self, platform: ChatPlatform) -> None:
        if self.budget is not None and hasattr(platform, "on_inside_call"):
            # Its own calls within a granted one count in the budget (Slack's working line).
            platform.on_inside_call = self.budget.try_inside
        self.platform.attach(platform)

    async def flush(self) -> None:
        """Make every renderer's outstanding edits now (at shutdown)."""
        for renderer in list(self.renderers.values()):
            try:
                await renderer.aclose()
            except Exception as error:  # one thread's failure must not stop the others
                _log.warning("could not flush the renderer of %s: %s", renderer.channel_id, error)

    def renderer(self, thread_id: str) -> StreamRenderer:
        assert self._nursery is not None, "use ThreadRenderers as an async context manager"
        old, old_scope = self.renderers.get(thread_id), self._scopes.get(thread_id)
        if old is not None and old_scope is not None:
            self._nursery.start_soon(self._retire, old, old_scope)
        renderer = StreamRenderer(
            self.platform, thread_id, wrap_links=self.limits.wrap_links, budget=self.budget
        )
        renderer.on_closed = partial(self._forget, thread_id, renderer)
        scope = trio.CancelScope()
        self.renderers[thread_id] = renderer
        self._scopes[thread_id] = scope
        self._nursery.start_soon(self._run, renderer, scope)
        return renderer

    def _forget(self, thread_id: str, renderer: StreamRenderer) -> None:
        """``renderer`` was closed with nothing outstanding: stop its task, drop it (unless
        a newer one holds its thread already)."""
        if self.renderers.get(thread_id) is renderer:
            del self.renderers[thread_id]
            scope = self._scopes.pop(thread_id, None)
            if scope is not None:
                scope.cancel()

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
