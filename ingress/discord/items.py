"""What crosses from discord.py into trio: ``IngressItem`` (actions to post, or a thread to
dispose), and ``Emit``, the ordered way a handler hands one over (``SpindleBot._ordered``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from threadspindle.runtime.core.actions import Action

__all__ = ["Emit", "IngressItem"]


@dataclass(frozen=True)
class IngressItem:
    """What crosses from discord.py into trio: actions to post, or a thread to dispose."""

    actions: tuple[Action, ...] = ()
    dispose_thread: str | None = None
    channel_id: str | None = None  # the thread's parent channel, when known


Emit = Callable[[IngressItem], Awaitable[None]]
