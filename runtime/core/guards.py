"""Derived guards: questions about a thread's state, answered from the state alone.

These are never stored as flags (a stored flag can disagree with the state it summarises);
the transition and the runtime ask these functions instead.
"""

from __future__ import annotations

import re

from threadspindle.runtime.core.model import Phase, ThreadState

__all__ = [
    "can_dispatch_next",
    "has_visible_text",
    "is_busy",
    "phase",
    "queue_is_full",
]


# C0 and C1 control characters and DEL: nothing a reader (or an agent) sees.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def usable_session_id(value: str | None) -> bool:
    """Whether an agent's session id can be kept and handed back to it (an argv, an
    environment variable): 1-512 characters, none of them a control character. A NUL in one
    made every later start of the thread's agent fail, restarts included."""
    return bool(value) and len(value or "") <= 512 and not _CONTROL.search(value or "")


def has_visible_text(value: str) -> bool:
    """Whether ``value`` holds anything but spaces and control characters: a message of
    NULs or escape codes is as empty as a blank one, not a prompt to send."""
    return bool(_CONTROL.sub("", value).strip())


def phase(state: ThreadState) -> Phase:
    """The run's phase; IDLE when there is no run."""
    return state.run.phase if state.run is not None else Phase.IDLE


def is_busy(state: ThreadState) -> bool:
    """A run is active (dispatching, running or being interrupted)."""
    return state.run is not None


def queue_is_full(state: ThreadState) -> bool:
    """The queue, with the steered messages the run may still hand back to it, is at its
    limit (so a requeued steer never takes the queue past it)."""
    steers = len(state.run.steers) if state.run is not None else 0
    return len(state.queue) + steers >= state.policy.queue_limit


def can_dispatch_next(state: ThreadState) -> bool:
    """Dispatch only when a conversation exists, the queue is non-empty, no run is active,
    no permission/question is waiting for an answer, no workspace job that changes the
    workdir is pending (docs/workspaces.md), and the thread is not parked."""
    return (
        not state.parked
        and state.workspace.job is None
        # A `!` command in the agent's own shell holds the agent: prompts wait for it.
        and not (state.workspace.shell is not None and state.workspace.shell.via_agent)
        and state.conversation is not None
        and bool(state.queue)
        and state.run is None
        and not state.blockers
    )
