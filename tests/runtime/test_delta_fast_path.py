"""The delta fast path (``transitions_agent.continue_delta``): it takes a delta continuing
the open part and gives what the general path gives, to the byte and the fields set; every
case it must not take (another run, session or block, a run being interrupted, thinking not
shown, a note to clear, a session the workspace has not seen) goes to the general path.
The property harness (test_state_machine.py) compares both on every delta it makes too."""

from __future__ import annotations

from threadspindle.runtime.core import actions as A
from threadspindle.runtime.core import agent_events as E
from threadspindle.runtime.core.model import Policy, ThreadState
from threadspindle.runtime.core.transitions import general_transition, transition
from threadspindle.runtime.core.transitions_agent import continue_delta
from threadspindle.testkit.thread_script import ThreadScript


def test_the_fast_path_takes_continuing_deltas_only_and_matches_the_general_path() -> None:
    s = ThreadScript("t1")
    state = ThreadState.new("t1", Policy(allowed_roots=("/work",), queue_limit=10))
    taken: list[str] = []
    declined: list[str] = []

    def apply(action: A.Action, label: str = "") -> None:
        nonlocal state
        if isinstance(action, A.AgentEventReceived):
            fast = continue_delta(state, action)
            general = general_transition(state, action)
            if fast is not None:
                assert fast.model_dump_json() == general.model_dump_json(), label
                assert fast.state == general.state and fast.effects == general.effects
                assert fast.state.__pydantic_fields_set__ == general.state.__pydantic_fields_set__
                assert fast.state.run is not None and general.state.run is not None
                assert (
                    fast.state.run.__pydantic_fields_set__
                    == general.state.run.__pydantic_fields_set__
                )
            (taken if fast is not None else declined).append(label)
        state = transition(state, action).state

    apply(s.start())
    apply(s.connected("sess-1"))
    apply(s.user("go"))
    run = state.run.id if state.run else ""
    apply(s.agent(run, E.SessionStarted(session_id="sess-1"), "sess-1"), "session")
    apply(s.text(run, "first "), "opens a part")
    for i in range(3):
        apply(s.agent(run, E.TextDelta(text=f"w{i} "), "sess-1"), "continues")
    apply(s.text(run, "no session "), "continues")  # an unstamped delta is the current one's
    apply(s.agent(run, E.TextDelta(text="old "), "sess-0"), "stale session")
    apply(s.text(run, "after a note "), "note to clear")  # the stale drop left a note
    apply(s.text(run, "again "), "continues")
    apply(s.text("r0", "stale run "), "stale run")
    apply(s.text(run, "again "), "note to clear")
    apply(s.text(run, "block b ", block="b"), "another block")
    apply(s.text(run, "more b ", block="b"), "continues")
    apply(s.agent(run, E.ThinkingDelta(text="hmm ")), "opens a part")
    apply(s.agent(run, E.ThinkingDelta(text="more ")), "continues")
    apply(s.verbosity("text"))
    apply(s.agent(run, E.ThinkingDelta(text="hidden ")), "thinking not shown")
    apply(s.verbosity("all"))
    apply(s.agent(run, E.ThinkingDelta(text="shown ")), "continues")
    apply(s.agent(run, E.SessionStarted(session_id="sess-2"), "sess-2"), "session")
    apply(s.agent(run, E.TextDelta(text="new session "), "sess-2"), "opens a part")
    apply(s.agent(run, E.TextDelta(text="on "), "sess-2"), "continues")
    apply(s.abort())
    apply(s.agent(run, E.TextDelta(text="late "), "sess-2"), "interrupting")
    apply(s.aborted(run), "turn end")

    assert set(taken) == {"continues"} and len(taken) == 9, taken
    assert "continues" not in declined
    for case in ("stale session", "note to clear", "stale run", "another block"):
        assert case in declined, case
    for case in ("thinking not shown", "interrupting", "opens a part", "session"):
        assert case in declined, case
