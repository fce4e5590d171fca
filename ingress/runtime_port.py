"""What a chat platform's ingress needs of the live runtime: post an action (and learn when
it is durable, so the platform is answered only then) and read the threads' states. One
declaration for Telegram, Slack, WhatsApp and the web chat; ``runtime.live.registry.Runtime``
is the implementation, a test may pass its own."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from threadspindle.runtime.core import actions as A
from threadspindle.runtime.core.model import ThreadState

__all__ = ["Receipt", "RuntimePort"]


class Receipt(Protocol):
    """A posted action's receipt."""

    async def durable(self) -> bool: ...


class RuntimePort(Protocol):
    """The live runtime as an ingress sees it."""

    async def post(self, action: A.Action, *, channel_id: str | None = None) -> Receipt: ...

    def snapshot(self, thread_id: str) -> ThreadState | None: ...

    def snapshots(self) -> Mapping[str, ThreadState]: ...
