"""The run-phase table: which phase a run moves to on which kind of event.

This is the one place the phase rules live, as data (after h11's ``_state.py``): every
phase change is one edge of this table, applied by ``transition_step.move`` (the only writer
of a run's phase), and ``docs/state-machine.md``'s diagram is drawn from it by
``render_mermaid`` (a test fails when the committed diagram is stale). IDLE means "no run":
the ``dispatch`` edge opens a run and an edge into IDLE closes it. A (phase, event) pair
missing from the table means "this event makes no sense now": the transition records it
(counter ``illegal_moves``) and changes nothing else.
"""

from __future__ import annotations

from typing import Literal, get_args

from threadspindle.runtime.core.model import Phase

__all__ = ["PHASE_EVENTS", "PHASE_TABLE", "PhaseEvent", "next_phase", "render_mermaid"]

# The abstract events that move a run between phases.
PhaseEvent = Literal[
    "dispatch",  # the queue head is handed to the agent
    "agent_event",  # an event of the current run arrived
    "interrupt",  # a plain message, /abort, or a silent-turn time-out
    "turn_end",  # the CLI's completion (or aborted-turn) event
    "agent_exit",  # the agent process/connection died, or its start failed
    "force_end",  # interrupt grace elapsed, conversation ended, model changed, restart, park
]
PHASE_EVENTS: tuple[PhaseEvent, ...] = get_args(PhaseEvent)

_ACTIVE_EXITS: dict[PhaseEvent, Phase] = {
    "turn_end": Phase.IDLE,
    "agent_exit": Phase.IDLE,
    "force_end": Phase.IDLE,
}

PHASE_TABLE: dict[Phase, dict[PhaseEvent, Phase]] = {
    Phase.IDLE: {"dispatch": Phase.DISPATCHING},
    Phase.DISPATCHING: {
        "agent_event": Phase.RUNNING,
        "interrupt": Phase.INTERRUPTING,
        **_ACTIVE_EXITS,
    },
    Phase.RUNNING: {
        "agent_event": Phase.RUNNING,
        "interrupt": Phase.INTERRUPTING,
        **_ACTIVE_EXITS,
    },
    Phase.INTERRUPTING: {
        "agent_event": Phase.INTERRUPTING,
        "interrupt": Phase.INTERRUPTING,
        **_ACTIVE_EXITS,
    },
}


def next_phase(current: Phase, event: PhaseEvent) -> Phase | None:
    """The phase after ``event``, or None when the table has no such move."""
    return PHASE_TABLE[current].get(event)


def render_mermaid() -> str:
    """The phase diagram as a Mermaid state diagram, generated from ``PHASE_TABLE``."""
    lines = ["stateDiagram-v2", "    [*] --> idle"]
    for src, moves in PHASE_TABLE.items():
        grouped: dict[Phase, list[PhaseEvent]] = {}
        for event, dst in moves.items():
            grouped.setdefault(dst, []).append(event)
        for dst, events in grouped.items():
            lines.append(f"    {src.value} --> {dst.value}: {', '.join(events)}")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(render_mermaid(), end="")
