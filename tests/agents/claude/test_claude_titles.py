"""When the Claude adapter asks the CLI for a session title (``SessionTitling``): once per
new session, after a completed turn, from the first prompts joined until they reach the
CLI's 10-character minimum (a shorter description gets no title, without a model call)."""

from __future__ import annotations

from threadspindle.agents.claude.titles import TITLE_MIN_CHARS, SessionTitling
from threadspindle.runtime.core.agent_events import TextDelta, TurnAborted, TurnCompleted

DONE = TurnCompleted(session_id="s")


def test_asked_once_after_a_completed_turn_with_enough_text() -> None:
    titling = SessionTitling()
    titling.prompted("hello")
    assert len("hello") < TITLE_MIN_CHARS
    assert titling.due([TextDelta(block="b", text="hi"), DONE]) is None  # too short yet
    titling.prompted("fix the CI")
    assert titling.due([TurnAborted(reason="interrupted")]) is None  # not completed
    assert titling.due([TurnCompleted(session_id="s", is_error=True, error="x")]) is None
    assert titling.due([DONE]) == "hello\nfix the CI"
    titling.prompted("more")  # enough already: the source stays
    assert titling.source == "hello\nfix the CI"
    assert titling.due([DONE]) is None  # never twice


def test_a_resumed_or_per_turn_session_is_not_asked() -> None:
    titling = SessionTitling(asked=True)
    titling.prompted("a long enough first prompt")
    assert titling.due([DONE]) is None
