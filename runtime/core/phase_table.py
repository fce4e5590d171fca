"""The run-phase table: which phase a run moves to on which kind of event.

This is the one place the phase rules live, as data (after h11's ``_state.py``): the
transition looks the next phase up here, and ``docs/state-machine.md``'s diagram is drawn
from this table by ``render_mermaid`` (a test fails when the committed diagram is stale).
A (phase, event) pair missing from the table means "this event makes no sense now": the
transition records it and changes nothing.
"""

from __future__ import annotations

from threadspindle.runtime.core.model import Phase

__all__ = ["PHASE_EVENTS", "PHASE_TABLE", "next_phase", "render_mermaid"]

# The abstract events that move a run between phases.
PHASE_EVENTS = (
    "dispatch",  # the queue head is handed to the agent
    "agent_event",  # an event of the current run arrived
    "interrupt",  # a plain message, /abort, or a silent-turn time-out
    "turn_end",  # the CLI's completion (or aborted-turn) event
    "agent_exit",  # the agent process/connection died, or its start failed
    "force_end",  # interrupt grace elapsed, conversation ended, model changed, restart
)

_ACTIVE_EXITS = {"turn_end": Phase.IDLE, "agent_exit": Phase.IDLE, "force_end": Phase.IDLE}

PHASE_TABLE: dict[Phase, dict[str, Phase]] = {
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


def next_phase(current: Phase, event: str) -> Phase | None:
    """The phase after ``event``, or None when the table has no such move."""
    return PHASE_TABLE[current].get(event)


def render_mermaid() -> str:
    """The phase diagram as a Mermaid state diagram, generated from ``PHASE_TABLE``."""
    lines = ["stateDiagram-v2", "    [*] --> idle"]
    for src, moves in PHASE_TABLE.items():
        grouped: dict[Phase, list[str]] = {}
        for event, dst in moves.items():
            grouped.setdefault(dst, []).append(event)
        for dst, events in grouped.items():
            lines.append(f"    {src.value} --> {dst.value}: {', '.join(events)}")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(render_mermaid(), end="")
