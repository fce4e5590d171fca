"""The base of every agent adapter, implementing the runtime's ``AgentPort``
(``runtime/live/ports.py``), and the one error a start that fails raises.

An adapter drives one agent for one thread (or, for a shared server such as
``opencode serve``, one session on it). Its ``serve`` runs for the life of the process or
connection and emits every agent event, stamped with the run id of the turn it belongs to
(the one named by the last ``prompt``) and the session id: the thread's listener posts them
into the actor's queue. Every CLI's adapter is built from the same parts: a pure launch
spec (``<cli>/launch.py``), a pure parser giving ``ParsedLine``s (``<cli>/parser.py``), the
adapter that drives the process (``<cli>/adapter.py``) and the past-sessions listing
(``<cli>/sessions.py``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable

from threadspindle.agents.base.options import AgentOptions
from threadspindle.agents.base.parsing import AgentStatistics
from threadspindle.runtime.core.effect_types import (
    PromptAgent,
    RollbackAgent,
    StartAgent,
    SteerAgent,
)
from threadspindle.runtime.core.model import AgentCapabilities
from threadspindle.runtime.live.ports import EmitEvent

__all__ = ["AgentAdapter", "AgentStartError"]


class AgentStartError(RuntimeError):
    """The agent could not be started, or is not running to take a command (the message
    says why: a missing binary or workdir, an exit before it was ready, a handshake that
    failed or timed out). ``serve`` raises it; the listener reports it to the thread."""


class AgentAdapter(ABC):
    """One agent process/connection for one thread (see the module docstring)."""

    name: str  # "claude", "codex", "gemini", "opencode", "echo", "command"
    # What the adapter can do besides prompts and interrupts; an adapter that can steer
    # says so (per instance where it depends on the options, e.g. not per turn).
    capabilities: AgentCapabilities = AgentCapabilities()

    def __init__(self, options: AgentOptions) -> None:
        self.options = options

    @abstractmethod
    async def serve(self, start: StartAgent, emit: EmitEvent, task_status: object) -> None:
        """Launch (or connect) and run until the process/connection ends, emitting every
        event. Call ``task_status.started()`` once ready for ``prompt``; raise
        ``AgentStartError`` when it cannot get ready. Returns normally when the agent exits;
        the listener decides whether to start it again."""

    @abstractmethod
    async def prompt(self, prompt: PromptAgent) -> None:
        """Begin a turn; later events are stamped with ``prompt.run_id``."""

    @abstractmethod
    async def interrupt(self, run_id: str) -> None:
        """End the current turn in-band, keeping the process alive where the CLI can."""

    async def steer(self, steer: SteerAgent) -> None:
        """Hand the text to the running turn (see ``AgentPort.steer``). An adapter that
        cannot never declares ``steer``; asked anyway (a stale capability), it raises, and
        the core sends the text as a normal prompt."""
        raise AgentStartError(f"{self.name} cannot add a message to a running turn")

    async def rollback(self, rollback: RollbackAgent) -> None:
        """Roll the agent's own conversation back or forward (see ``AgentPort.rollback``).
        An adapter that cannot never declares ``rollback``/``restore``; asked anyway, it
        raises, and the core tells the agent what /undo did in its next prompt."""
        raise AgentStartError(f"{self.name} cannot roll its conversation back")

    async def shell(self, command: str, output: Callable[[str], None]) -> int | None:
        """A `!` command in the agent's own shell (see ``AgentPort.shell``). An adapter that
        cannot never declares ``shell``; asked anyway, it raises."""
        raise AgentStartError(f"{self.name} has no shell of its own to run a command in")

    @abstractmethod
    async def answer_permission(self, request_id: str, allow: bool) -> None: ...

    @abstractmethod
    async def answer_question(self, request_id: str, answer: str | None) -> None: ...

    @abstractmethod
    async def stop(self) -> None:
        """Stop for good: in-band interrupt, SIGINT, SIGTERM, SIGKILL; no process left."""

    def statistics(self) -> AgentStatistics:
        """A frozen snapshot of the parser counters (what was read, emitted, skipped)."""
        return AgentStatistics()
