"""agents/codex/retries.py: codex's retries numbered and capped per run (pure)."""

from __future__ import annotations

from threadspindle.agents.codex.retries import RetryCap
from threadspindle.runtime.core.agent_events import (
    AgentError,
    TextDelta,
    TurnAborted,
    TurnCompleted,
)


def _retry(n: int) -> AgentError:
    return AgentError(message=f"Reconnecting... {n}/5 (Connection failed: refused)", retryable=True)


def test_retries_are_numbered_until_the_cap_then_the_turn_is_stopped_and_fails() -> None:
    cap = RetryCap(max_retries=2)
    shown = [cap.on_event("r1", _retry(n), session_id="s", model="m") for n in (1, 2)]
    assert [(d.event.attempt, d.event.max_retries, d.interrupt) for d in shown] == [  # type: ignore[union-attr]
        (1, 2, False),
        (2, 2, False),
    ]
    third = cap.on_event("r1", _retry(3), session_id="s", model="m")
    assert third.event is None and third.interrupt  # not shown: the turn is stopped
    fourth = cap.on_event("r1", _retry(4), session_id="s", model="m")
    assert fourth.event is None and not fourth.interrupt  # stopped once
    end = cap.on_event("r1", TurnAborted(reason="interrupted"), session_id="s", model="m")
    assert end.event == TurnCompleted(
        session_id="s",
        model="m",
        is_error=True,
        error="the model API failed; gave up after 2 retries: Connection failed: refused",
    )
    # The next run counts afresh.
    again = cap.on_event("r2", _retry(1), session_id="s", model="m")
    assert again.event is not None and again.event.attempt == 1  # type: ignore[union-attr]


def test_other_events_and_runs_without_retries_pass_unchanged() -> None:
    cap = RetryCap(max_retries=0)
    text = TextDelta(text="hi")
    assert cap.on_event("r1", text, session_id=None, model=None).event is text
    aborted = TurnAborted(reason="interrupted")  # the user's interrupt, not ours
    assert cap.on_event("r1", aborted, session_id=None, model=None).event is aborted
    final = AgentError(message="bad request")
    assert cap.on_event("r1", final, session_id=None, model=None).event is final
