"""A gateway node's two jobs over JetStream: send chat events to the runner of the thread's
root, and apply the effects runners publish.

- ``Gateway.send`` publishes an action to ``spindle.in.<root>.<thread>``: the root is the one
  recorded for the thread (``spindle_routes``), set when a conversation starts under it
  (``start``). The action is accepted once JetStream stored it.
- ``serve_effects`` reads ``SPINDLE_OUT`` through the durable consumer ``gateway``: for each
  effect, the thread's renderer (made on first use and seeded from the thread's log with
  every output already posted, so a restarted gateway never posts a key twice) applies it;
  what it posted goes back to the thread's runner as ``OutputPosted`` (its action id is
  derived from the key and message ids, so a resend is dropped as a duplicate); the effect
  is acked after that. An effect redelivered after a gateway crash (not acked) whose key
  the log or this gateway already knows as posted is acked without applying it: the
  renderer is never asked to post a key twice.

The one window left is the effect in hand when a gateway dies: applied but not acked, it is
delivered again; a post whose ``OutputPosted`` was not stored yet is posted again, an
``AppendOutput`` appended again (edits that set text are harmless). docs/scale-out.md.
"""

from __future__ import annotations

import hashlib
import logging
from typing import Any

import trio
from nats.aio.msg import Msg

from threadspindle.effects.jetstream.connection import JetStream
from threadspindle.effects.jetstream.log import load_thread
from threadspindle.effects.jetstream.transport import Inbox, Transport, decode_effect
from threadspindle.runtime.core.actions import Action, OutputPosted
from threadspindle.runtime.core.effect_types import KEYED_POSTS, Effect
from threadspindle.runtime.live.ports import RendererFactory, RendererPort

__all__ = ["Gateway"]

logger = logging.getLogger("spindle.gateway")


class Gateway:
    def __init__(self, conn: JetStream, transport: Transport, renderers: RendererFactory) -> None:
        self.conn = conn
        self.transport = transport
        self._factory = renderers
        self.renderers: dict[str, RendererPort] = {}
        self._roots: dict[str, str] = {}
        self._late: list[tuple[str, str, tuple[str, ...]]] = []  # posted outside apply
        self.posted_keys: dict[str, set[str]] = {}
        self.applied = 0
        self.failed = 0
        self.skipped = 0  # redelivered posts of keys already posted

    async def start(self, root: str, action: Action) -> None:
        """Route the thread to ``root`` and send its first action (``ConversationStarted``)."""
        await self.transport.route(action.thread_id, root)
        self._roots[action.thread_id] = root
        await self.send(action)

    async def send(self, action: Action) -> None:
        root = self._roots.get(action.thread_id) or await self.transport.root_of(action.thread_id)
        if root is None:
            raise LookupError(f"thread {action.thread_id} has no root: start it first")
        self._roots[action.thread_id] = root
        await self.transport.send_action(root, action)

    async def renderer(self, thread_id: str) -> RendererPort:
        renderer = self.renderers.get(thread_id)
        if renderer is None:
            renderer = self._factory(thread_id)
            renderer.on_posted = lambda key, ids: self._late.append((thread_id, key, ids))
            loaded = await load_thread(self.conn, thread_id)
            for key, message_ids in loaded.posted.items():
                renderer.known(key, message_ids)
            self.posted_keys[thread_id] = set(loaded.posted)
            self.renderers[thread_id] = renderer
        return renderer

    async def report(self, thread_id: str, key: str, message_ids: tuple[str, ...]) -> None:
        self.posted_keys.setdefault(thread_id, set()).add(key)
        digest = hashlib.blake2b(
            f"{key}\0{','.join(message_ids)}".encode(), digest_size=10
        ).hexdigest()
        await self.send(
            OutputPosted(
                thread_id=thread_id,
                action_id=f"posted-{digest}",
                at=trio.current_time(),
                key=key,
                message_ids=message_ids,
            )
        )

    async def serve_effects(
        self,
        *,
        name: str = "gateway",
        ack_wait_s: float = 30.0,
        task_status: Any = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Apply effects until cancelled, acking each right after it is applied and
        reported (so a crash leaves at most the effects in hand to be delivered again).
        The threads of a fetched batch are served concurrently, each in order."""
        outbox = await self.transport.outbox(name, ack_wait_s=ack_wait_s)
        task_status.started()
        while True:
            by_thread: dict[str, list[tuple[Msg, Effect]]] = {}
            for msg in await outbox.fetch(batch=256, timeout_s=1.0):
                thread_id, effect = decode_effect(msg)
                by_thread.setdefault(thread_id, []).append((msg, effect))
            async with trio.open_nursery() as nursery:
                for thread_id, items in by_thread.items():
                    nursery.start_soon(self._serve_thread, outbox, thread_id, items)

    async def _serve_thread(
        self, outbox: Inbox, thread_id: str, items: list[tuple[Msg, Effect]]
    ) -> None:
        renderer = await self.renderer(thread_id)
        for msg, effect in items:
            if isinstance(effect, KEYED_POSTS) and effect.key in self.posted_keys.get(
                thread_id, ()
            ):
                self.skipped += 1
                await outbox.ack(msg)
                continue
            try:
                posted = await renderer.apply(effect)
            except Exception as exc:  # refused for good by the platform: not retried
                self.failed += 1
                logger.warning("effect %s in %s failed: %s", effect.type, thread_id, exc)
                posted = []
            late, self._late = self._late, []
            for key, message_ids in posted:
                await self.report(thread_id, key, message_ids)
            for late_thread, key, message_ids in late:
                await self.report(late_thread, key, message_ids)
            self.applied += 1
            await outbox.ack(msg)
