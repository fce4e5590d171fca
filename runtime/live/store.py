"""The central store: the one mapping thread id -> current ``ThreadState``.

Only a thread's actor swaps its state in (right after appending the action to the log), so
the store always equals the fold of the log's committed actions. Everyone else gets
read-only views: ``get`` (a frozen state is already read-only), ``snapshot`` (a read-only
mapping of every thread) and the ``ThreadStatistics`` model built from them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from types import MappingProxyType
from typing import Protocol

from threadspindle.runtime.core.actions import Action
from threadspindle.runtime.core.frozen import Frozen
from threadspindle.runtime.core.model import AgentStatus, Counters, Phase, ThreadState
from threadspindle.runtime.core.transitions import Transition
from threadspindle.runtime.live.log_read import LoggedAction

__all__ = ["Store", "ThreadStatistics", "TransitionFn", "rebuild_from_log"]

TransitionFn = Callable[[ThreadState, Action], Transition]
"""The pure transition (``runtime.core.transitions.transition``; tests may pass another)."""


class ThreadStatistics(Frozen):
    """What ``/status``, tests and metrics may know about one thread (a frozen snapshot)."""

    thread_id: str
    phase: Phase  # IDLE when there is no run
    run_id: str | None
    queue_length: int  # prompts waiting in the state's queue
    blockers: int
    agent_status: AgentStatus
    counters: Counters
    log_seq: int  # the thread's last committed seq
    mailbox_length: int = 0  # actions posted but not yet transitioned
    pending_effects: int = 0  # effects committed but not yet applied
    actor_running: bool = False
    listener_running: bool = False
    listener_starts: int = 0  # listener (re)starts in this process
    coalesced_deltas: int = 0  # agent deltas merged into the one before them (actor.py)


class Store:
    def __init__(self) -> None:
        self._states: dict[str, ThreadState] = {}

    def get(self, thread_id: str) -> ThreadState | None:
        return self._states.get(thread_id)

    def get_or_new(self, thread_id: str, new: Callable[[str], ThreadState]) -> ThreadState:
        state = self._states.get(thread_id)
        if state is None:
            state = self._states[thread_id] = new(thread_id)
        return state

    def swap(self, thread_id: str, state: ThreadState) -> None:
        """Replace the thread's state. Only the thread's actor calls this."""
        self._states[thread_id] = state

    def snapshot(self) -> Mapping[str, ThreadState]:
        """A read-only copy of every thread's state, as of now."""
        return MappingProxyType(dict(self._states))

    def thread_ids(self) -> list[str]:
        return list(self._states)

    def statistics(self, thread_id: str, log_seq: int = 0) -> ThreadStatistics | None:
        state = self._states.get(thread_id)
        if state is None:
            return None
        return ThreadStatistics(
            thread_id=thread_id,
            phase=state.run.phase if state.run else Phase.IDLE,
            run_id=state.run.id if state.run else None,
            queue_length=len(state.queue),
            blockers=len(state.blockers),
            agent_status=state.agent_status,
            counters=state.counters,
            log_seq=log_seq,
        )


class FoldableLog(Protocol):
    """What a fold needs of a log: ``runtime.live.log.EventLog`` (start-up) or
    ``runtime.live.log_read.LogReader`` (``spindle status``, on a read-only connection)."""

    def thread_ids(self) -> list[str]: ...

    def snapshots(self) -> dict[str, tuple[int, ThreadState]]: ...

    def read(self, thread_id: str, after_seq: int = 0) -> Iterator[LoggedAction]: ...


def rebuild_from_log(log: FoldableLog, transition: TransitionFn) -> tuple[Store, int]:
    """Fold the log into a fresh store: each thread starts at its newest snapshot and folds
    only the actions after it (every row read is checked: ``LogCorrupt`` names the first
    that cannot be read, or a missing seq). Returns the store and how many actions were
    folded."""
    store = Store()
    folded = 0
    snapshots = log.snapshots()
    for thread_id in log.thread_ids():
        seq, state = snapshots.get(thread_id, (0, ThreadState.new(thread_id)))
        for entry in log.read(thread_id, after_seq=seq):
            state = transition(state, entry.action).state
            folded += 1
        store.swap(thread_id, state)
    return store, folded
