"""The ports the live runtime drives, declared by the runtime and implemented outside it.

A port is declared by the side that calls it (the runtime), with every capability it uses,
so nothing in the runtime asks ``hasattr``, ``getattr`` or ``inspect.signature`` of an
implementation. Implementations live in the layers above: agent CLIs in ``agents/`` (and
``testkit`` fakes), chat rendering in ``effects/``. Nothing under ``runtime/`` imports
those layers (``tests/test_import_layers.py``).

- ``AgentPort``: one agent process or connection for one thread. ``serve`` runs for its
  whole life and emits every event, stamped (``StampedEvent``) with the run and session it
  belongs to; the thread's listener turns each into an ``AgentEventReceived`` action.
- ``AdapterFactory``: ``factory(start, thread_id)`` makes a fresh ``AgentPort`` for each
  (re)start of a thread's agent; ``start`` says which agent, workdir, session and model,
  and ``thread_id`` lets each thread have its own credentials (the process manager's
  token). Implemented by ``app/app.py``'s agent factory, ``testkit.fake_agent``.
- ``RendererPort``: one thread's chat output. The reactor hands it every chat effect
  (``apply``) and reports each ``Posted`` it answers as ``OutputPosted``; posts it makes
  by itself (a paced first send) go to its ``on_posted``, which the reactor sets; the
  registry first tells it what the log says was posted (``known``); disposal flushes it
  (``aclose``). Implemented by ``effects.render.StreamRenderer`` and
  ``testkit.fake_chat.RecordingRenderer``. ``RendererFactory`` makes one per thread.

- ``ThreadLog``: the durable log of every thread the runtime hosts. ``append`` buffers an
  action and hands out a durability ticket at once (the actor never waits on I/O);
  ``run_flusher`` writes what is buffered; whoever must not act before an action is
  durable awaits ``wait_durable``. Implemented by ``runtime.live.log.EventLog`` (SQLite, the
  embedded default of ``spindle run``) and ``effects.jetstream.log.JetStreamLog`` (NATS
  JetStream, one fenced writer per thread: docs/scale-out.md).

The chat platform (Discord, the console) is not a port of the runtime but of the renderer:
``effects/platform.py: ChatPlatform``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import trio

from threadspindle.runtime.core import actions as A
from threadspindle.runtime.core.agent_events import AgentEvent
from threadspindle.runtime.core.effect_types import (
    CheckpointWorkdir,
    Effect,
    PromptAgent,
    RollbackAgent,
    RunShell,
    StartAgent,
    SteerAgent,
    StopShell,
    WorkspaceJob,
)
from threadspindle.runtime.core.model import AgentCapabilities, ThreadState

if TYPE_CHECKING:
    from threadspindle.runtime.core.actions import Action
    from threadspindle.runtime.live.log import LogStatistics, LogUnwritable
    from threadspindle.runtime.live.log_read import LoggedAction

__all__ = [
    "AdapterFactory",
    "AgentPort",
    "AgentShell",
    "AgentShellOf",
    "EmitEvent",
    "OnPosted",
    "Posted",
    "RendererFactory",
    "RendererPort",
    "StampedEvent",
    "NoWorkspace",
    "WorkspaceEffect",
    "WorkspaceFactory",
    "WorkspacePort",
    "ThreadLog",
    "ThreadOpener",
]


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
    capabilities: AgentCapabilities
    """What it can do besides prompts and interrupts (``steer``): declared, never probed.
    The listener reports it with ``AgentConnected``; the core asks only for what it says."""

    async def serve(self, start: StartAgent, emit: EmitEvent, task_status: object) -> None:
        """Launch (or connect) and run until the process/connection ends, emitting every
        event. Call ``task_status.started()`` once ready for ``prompt``. Returns normally
        when the agent exits; the listener decides whether to start it again."""

    async def prompt(self, prompt: PromptAgent) -> None:
        """Begin a turn; later events are stamped with ``prompt.run_id``."""

    async def interrupt(self, run_id: str) -> None:
        """End the current turn in-band, keeping the process alive where the CLI can."""

    async def steer(self, steer: SteerAgent) -> None:
        """Hand ``steer.text`` to the running turn ``steer.run_id`` without aborting it, and
        emit ``SteerTaken`` (before that turn's end) or ``SteerRefused`` for ``steer_id``.
        Raises when it cannot steer at all (the core then sends the text as a prompt)."""

    async def rollback(self, rollback: RollbackAgent) -> None:
        """/undo (``capabilities.rollback``): drop the last ``rollback.turns`` turns from
        the agent's own conversation; /redo (``capabilities.restore``): bring the earliest
        turn it hid back, keeping ``rollback.turns`` after it hidden. Returns once done;
        raises when the CLI refuses or cannot (the core then tells the agent by a note)."""

    async def shell(self, command: str, output: Callable[[str], None]) -> int | None:
        """A `!` command in the agent's own shell (``capabilities.shell``), so that it is in
        the agent's context: ``output(text)`` as it comes; returns the exit code (None when
        the CLI does not say). Cancelled (abort, time limit), it stops the command first."""
        ...

    async def answer_permission(self, request_id: str, allow: bool) -> None: ...

    async def answer_question(self, request_id: str, answer: str | None) -> None: ...

    async def stop(self) -> None:
        """Stop for good: no process of it is left."""

    def statistics(self) -> object:
        """A frozen snapshot of the adapter's counters."""


class AdapterFactory(Protocol):
    """Makes a fresh adapter for each (re)start of a thread's agent."""

    def __call__(self, start: StartAgent, thread_id: str, /) -> AgentPort:
        """An adapter for ``start.agent`` (unknown name: raise, the start then fails with
        the reason), for the thread ``thread_id``; ``start`` is what its ``serve`` gets."""
        ...


ThreadOpener = Callable[[str, str], Awaitable[tuple[str, str]]]
"""``opener(source_thread_id, title)`` opens a new chat thread beside the source one (a
Discord thread in the same channel, a Telegram topic in the same group, a console thread)
and returns its thread id and how to name it in the chat (``<#id>``); it raises when the
platform cannot. Given by the app to the runtime (``Runtime(thread_opener=...)``) for
``OpenThread`` (``/fork``, ``/btw``); the runtime seeds the new thread itself."""

Posted = tuple[str, tuple[str, ...]]
"""An output a renderer posted: its key and the message ids it got (new ones only)."""

OnPosted = Callable[[str, tuple[str, ...]], None]
"""Told each output a renderer posted by itself: ``(key, message ids)``."""


class RendererPort(Protocol):
    """What the runtime asks of one thread's chat renderer."""

    on_posted: OnPosted | None
    """Called with what the renderer posts outside ``apply`` (a paced send by its
    background task). The reactor sets it when the thread starts; a renderer that never
    posts by itself never calls it."""

    def known(self, key: str, message_ids: tuple[str, ...]) -> None:
        """Seeded from the log before the first effect: ``key`` was posted (by an earlier
        process) as these ids; it is never posted again, and may still be edited. Called
        once per logged ``OutputPosted``; the ids of one key accumulate."""
        ...

    async def apply(self, effect: Effect) -> list[Posted]:
        """Apply one chat effect; return what was posted since the last report. Raise
        when the platform refused for good (the reactor reports ``EffectFailed``).

        A renderer may also have ``apply_nowait(effect) -> list[Posted] | None``: the same
        without waiting, or None (nothing done) when the effect needs ``apply``. The
        reactor then applies such effects as soon as they are durable, when nothing is
        ahead of them (``effects.render.StreamRenderer.apply_nowait``)."""
        ...

    async def aclose(self) -> list[Posted]:
        """Make the last paced sends and edits (typing off) and return what was posted
        since the last report; called at disposal, while the runtime can still log it."""
        ...


RendererFactory = Callable[[str], RendererPort]
"""Makes the renderer of a thread (by thread id) when its actor is created."""


WorkspaceEffect = CheckpointWorkdir | WorkspaceJob | RunShell | StopShell

AgentShell = Callable[[str, Callable[[str], None]], Awaitable["int | None"]]
"""An agent's ``shell`` method (``AgentPort.shell``)."""

AgentShellOf = Callable[[], Awaitable["AgentShell | None"]]
"""Gets the running agent's shell (starting the agent), or None when it has none."""


class WorkspacePort(Protocol):
    """What the runtime asks of one thread's workspace (git checkpoints and jobs, shell
    commands: docs/workspaces.md). Implemented by ``effects.workspace_port``."""

    async def apply(
        self,
        effect: WorkspaceEffect,
        nursery: trio.Nursery,
        agent: AgentShellOf | None = None,
    ) -> None:
        """Apply one workspace effect. A ``RunShell`` with ``via_agent`` runs in the shell
        of the agent ``agent()`` gives (None: the agent has none; or no ``agent``: directly).
        A ``CheckpointWorkdir`` is done before this returns (the prompt after it waits);
        slow work (jobs, shell commands) is started in ``nursery`` and reports back only by
        posting actions (``CheckpointTaken``, ``WorkspaceJobFinished``, ``ShellOutput``,
        ``ShellFinished``): every effect gets its answer, a failure included. Never raises
        for a failure of the work itself."""
        ...


WorkspaceFactory = Callable[
    [str, Callable[[A.Action], object], Callable[[], float], Callable[[], str]], WorkspacePort
]
"""Makes the workspace port of a thread: ``factory(thread_id, post, clock, ids)``."""


class NoWorkspace:
    """The workspace port when none is configured: every effect is answered as
    unavailable, so nothing waits for an answer that never comes."""

    REASON = "workspaces are not available in this runtime"

    def __init__(
        self,
        thread_id: str,
        post: Callable[[A.Action], object],
        clock: Callable[[], float],
        ids: Callable[[], str],
    ) -> None:
        self._thread_id, self._post, self._clock, self._ids = thread_id, post, clock, ids

    async def apply(
        self,
        effect: WorkspaceEffect,
        nursery: trio.Nursery,
        agent: AgentShellOf | None = None,
    ) -> None:
        base: dict[str, Any] = {
            "thread_id": self._thread_id,
            "action_id": self._ids(),
            "at": self._clock(),
        }
        if isinstance(effect, CheckpointWorkdir):
            self._post(
                A.CheckpointTaken(
                    **base, run_id=effect.run_id, workdir=effect.workdir, reason=self.REASON
                )
            )
        elif isinstance(effect, WorkspaceJob):
            self._post(
                A.WorkspaceJobFinished(
                    **base, job_id=effect.job_id, op=effect.op, ok=False, text=self.REASON
                )
            )
        elif isinstance(effect, RunShell):
            self._post(
                A.ShellFinished(
                    **base, shell_id=effect.shell_id, outcome="failed", detail=self.REASON
                )
            )


class ThreadLog(Protocol):
    """What the runtime (registry, actor, reactor, receipts) asks of the durable log."""

    path: Path
    """Where the log is, for messages: a file, or ``jetstream:<stream>``."""

    unwritable: LogUnwritable | None
    """Why the log cannot store anything right now (disk full, no JetStream quorum); None
    while it can. Actions from people are refused meanwhile."""

    def append(self, action: Action, state_after: ThreadState | None = None) -> int:
        """Buffer the thread's next action; return its durability ticket (no I/O)."""
        ...

    def flush(self) -> int:
        """Write what is buffered now, where the log can without waiting (else 0)."""
        ...

    def is_durable(self, ticket: int) -> bool: ...

    async def wait_durable(self, ticket: int) -> None:
        """Return once the action with this ticket is stored (never, if it never is)."""
        ...

    async def wait_durable_or_unwritable(self, ticket: int) -> bool:
        """True once stored; False as soon as the log cannot store it (for ingress)."""
        ...

    def when_durable(self, ticket: int, callback: Callable[[], object]) -> None:
        """Call ``callback()`` (synchronously) once the action with this ticket is stored,
        at once when it already is; callbacks of one thread run in ticket order. The reactor
        hands a batch of effects to its lane this way: a lane wakes once per batch."""
        ...

    def flush_now(self) -> None:
        """Start writing what is buffered now rather than on the flusher's next turn (an
        ``/abort``'s interrupt must not wait behind streaming threads); never raises."""
        ...

    def on_writability(
        self, listener: Callable[[LogUnwritable | None], object]
    ) -> Callable[[], None]: ...

    async def run_flusher(self, *, task_status: Any = ...) -> None:
        """Write whatever is buffered, until cancelled."""
        ...

    def thread_ids(self) -> list[str]: ...

    def last_seq(self, thread_id: str) -> int: ...

    def snapshots(self) -> dict[str, tuple[int, ThreadState]]: ...

    def read(self, thread_id: str, after_seq: int = 0) -> Iterator[LoggedAction]: ...

    def posted_outputs(self, thread_id: str) -> dict[str, tuple[str, ...]]: ...

    def check_posted_outputs(self) -> None: ...

    def statistics(self) -> LogStatistics: ...
