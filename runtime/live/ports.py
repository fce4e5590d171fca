"""The ports the live runtime drives, declared by the runtime and implemented outside it.

A port is declared by the side that calls it (the runtime), with every capability it uses,
so nothing here asks ``hasattr`` of an implementation. Implementations live in the layers
above: agent CLIs in ``agents/`` (and ``testkit`` fakes), chat rendering in ``effects/``.
Nothing under ``runtime/`` imports those layers.

- ``AgentPort``: one agent process or connection for one thread. ``serve`` runs for its
  whole life and emits every event, stamped (``StampedEvent``) with the run and session it
  belongs to; the thread's listener turns each into an ``AgentEventReceived`` action.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from threadspindle.runtime.core.agent_events import AgentEvent
from threadspindle.runtime.core.effect_types import PromptAgent, StartAgent

__all__ = ["AdapterFactory", "AgentPort", "EmitEvent", "StampedEvent"]


@dataclass(frozen=True, slots=True)
class StampedEvent:
    """An agent event with the run (the turn named by the last ``prompt``) and the session
    it belongs to; the core drops events of another run or session (session demux)."""

    run_id: str | None
    session_id: str | None
    event: AgentEvent


EmitEvent = Callable[[StampedEvent], Awaitable[None]]


class AgentPort(Protocol):
    """What the runtime asks of an agent adapter."""

    name: str

    async def serve(self, start: StartAgent, emit: EmitEvent, task_status: object) -> None:
        """Launch (or connect) and run until the process/connection ends, emitting every
        event. Call ``task_status.started()`` once ready for ``prompt``. Returns normally
        when the agent exits; the listener decides whether to start it again."""

    async def prompt(self, prompt: PromptAgent) -> None:
        """Begin a turn; later events are stamped with ``prompt.run_id``."""

    async def interrupt(self, run_id: str) -> None:
        """End the current turn in-band, keeping the process alive where the CLI can."""

    async def answer_permission(self, request_id: str, allow: bool) -> None: ...

    async def answer_question(self, request_id: str, answer: str | None) -> None: ...

    async def stop(self) -> None:
        """Stop for good: no process of it is left."""

    def statistics(self) -> object:
        """A frozen snapshot of the adapter's counters."""


# Makes a fresh adapter for each (re)start of a thread's agent.
AdapterFactory = Callable[[str], AgentPort]
