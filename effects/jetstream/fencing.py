"""A renderer that posts nothing for a thread whose lease this runner no longer holds.

The log's fence keeps a stale runner from *appending*; effects of actions that were durable
before the lease was lost could still be applied after it (a runner paused mid-run and
resumed after another took over), and the new owner applies them too. ``FencedRenderer``
closes that gap for everything that goes through ``apply``: before each effect it asks the
log whether this runner may still write the thread (``JetStreamLog.may_write``: lease held
and renewed within its TTL, thread not fenced), and refuses otherwise.
"""

from __future__ import annotations

from threadspindle.effects.jetstream.log import JetStreamLog, ThreadFenced
from threadspindle.runtime.core.effect_types import Effect
from threadspindle.runtime.live.ports import OnPosted, Posted, RendererPort

__all__ = ["FencedRenderer"]


class FencedRenderer:
    """Wraps one thread's renderer; every post waits for a valid lease (``RendererPort``)."""

    def __init__(self, inner: RendererPort, log: JetStreamLog, thread_id: str) -> None:
        self.inner = inner
        self.log = log
        self.thread_id = thread_id
        self.refused = 0

    @property
    def on_posted(self) -> OnPosted | None:
        return self.inner.on_posted

    @on_posted.setter
    def on_posted(self, value: OnPosted | None) -> None:
        self.inner.on_posted = value

    def known(self, key: str, message_ids: tuple[str, ...]) -> None:
        self.inner.known(key, message_ids)

    def _check(self) -> None:
        if not self.log.may_write(self.thread_id):
            self.refused += 1
            why = self.log.fenced(self.thread_id) or "its lease is not held or not renewed"
            raise ThreadFenced(f"thread {self.thread_id}: not posting: {why}")

    async def apply(self, effect: Effect) -> list[Posted]:
        self._check()
        return await self.inner.apply(effect)

    async def aclose(self) -> list[Posted]:
        if not self.log.may_write(self.thread_id):
            return []
        return await self.inner.aclose()
