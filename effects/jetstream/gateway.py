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
  is acked after that. An effect redelivered after a gateway crash finds its key known.
"""

from __future__ import annotations

import hashlib
import logging
from typing import Any

import trio

from threadspindle.effects.jetstream.connection import JetStream
from threadspindle.effects.jetstream.log import load_thread
from threadspindle.effects.jetstream.transport import Transport, decode_effect
from threadspindle.runtime.core.actions import Action, OutputPosted
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
        self.applied = 0
        self.failed = 0

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
            self.renderers[thread_id] = renderer
        return renderer

    async def report(self, thread_id: str, key: str, message_ids: tuple[str, ...]) -> None:
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
        self, *, name: str = "gateway", task_status: Any = trio.TASK_STATUS_IGNORED
    ) -> None:
        outbox = await self.transport.outbox(name)
        task_status.started()
        while True:
            for msg in await outbox.fetch(batch=64, timeout_s=1.0):
                thread_id, effect = decode_effect(msg)
                renderer = await self.renderer(thread_id)
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
