"""The phase table governs: one function applies its edges, an illegal move is recorded and
changes nothing else, and every agent event type has a rule whose move the table has."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import get_args

import pytest

from threadspindle.runtime.core import actions as A
from threadspindle.runtime.core import agent_events as E
from threadspindle.runtime.core import effect_types as F
from threadspindle.runtime.core import transitions
from threadspindle.runtime.core.model import Phase, Policy, ThreadState
from threadspindle.runtime.core.phase_table import PHASE_TABLE, PhaseEvent
from threadspindle.runtime.core.transition_step import Step, move
from threadspindle.runtime.core.transitions import transition
from threadspindle.runtime.core.transitions_agent import AGENT_EVENT_RULES
from threadspindle.testkit.thread_script import ThreadScript

CORE = Path(transitions.__file__).resolve().parent


def _thread(s: ThreadScript, running: bool) -> ThreadState:
    """A thread with a conversation: idle, or with run r1 running."""
    state = ThreadState.new("t1", Policy(allowed_roots=("/work",)))
    actions = [s.start()] + ([s.user("one"), s.text("r1", "hi")] if running else [])
    for action in actions:
        state = transition(state, action).state
    return state


def _illegal_after_effects(event: PhaseEvent):
    """A handler with a bug: it emits, changes the queue, then asks for ``event``."""

    def handler(step: Step, action: A.StatusRequested) -> None:
        step.reply("half done")
        step.set(queue=())
        step.count("replies")
        move(step, event)

    return handler


@pytest.mark.parametrize(
    ("setup", "event"),
    [("idle", "interrupt"), ("idle", "turn_end"), ("running", "dispatch")],
)
def test_an_illegal_move_is_recorded_and_changes_nothing_else(
    monkeypatch: pytest.MonkeyPatch, setup: str, event: PhaseEvent
) -> None:
    s = ThreadScript("t1")
    before = _thread(s, running=setup == "running")
    if setup == "running":
        assert before.run is not None and before.run.phase is Phase.RUNNING
    monkeypatch.setitem(transitions.HANDLERS, A.StatusRequested, _illegal_after_effects(event))
    result = transition(before, s.status())
    current = before.run.phase.value if before.run else "idle"
    assert result.note == f"illegal phase move: no {event} from {current} (status)"
    assert result.effects == ()
    expected = before.replace(
        counters=before.counters.replace(illegal_moves=before.counters.illegal_moves + 1),
        last_note=result.note,
    )
    assert result.state == expected


def test_every_agent_event_type_has_a_rule_the_table_allows_in_every_active_phase() -> None:
    event_types = set(get_args(get_args(E.AgentEvent)[0]))
    assert set(AGENT_EVENT_RULES) == event_types
    for rule in AGENT_EVENT_RULES.values():
        for phase in (Phase.DISPATCHING, Phase.RUNNING, Phase.INTERRUPTING):
            assert rule.phase_event in PHASE_TABLE[phase]


def test_a_turn_end_goes_straight_from_dispatching_to_idle() -> None:
    s = ThreadScript("t1")
    state = transition(_thread(s, running=False), s.user("one")).state
    assert state.run is not None and state.run.phase is Phase.DISPATCHING
    result = transition(state, s.done("r1"))
    assert result.state.run is None and result.state.counters.completed == 1
    assert [e.kind for e in result.effects if isinstance(e, F.PostOutput)] == ["footer"]


def test_only_move_writes_a_runs_phase() -> None:
    """A static check beside the property test: no call in the core passes ``phase=`` except
    inside ``transition_step.move`` (``Run(...)``, ``set_run(...)``, ``replace(...)``)."""
    writers: list[str] = []
    for path in sorted(CORE.glob("*.py")):
        tree = ast.parse(path.read_text())
        for func in ast.walk(tree):
            if not isinstance(func, ast.FunctionDef):
                continue
            for node in ast.walk(func):
                if isinstance(node, ast.Call) and any(k.arg == "phase" for k in node.keywords):
                    writers.append(f"{path.name}:{func.name}")
    assert sorted(set(writers)) == ["transition_step.py:move"]
