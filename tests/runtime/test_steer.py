"""Scenario tests for steering (``/steer``), ``/compact`` and the context-use notices."""

from __future__ import annotations

from test_transitions import Thread, of, posts

from threadspindle.runtime.core import actions as A
from threadspindle.runtime.core import agent_events as E
from threadspindle.runtime.core import effect_types as F
from threadspindle.runtime.core.model import Phase


def running(steer: bool | None = True) -> Thread:
    """A thread whose agent connected (declaring ``steer``) and whose run is working."""
    t = Thread().started()
    t.do(t.s.connected("s1", steer=steer), t.s.user("build it"), t.s.text("r1", "working"))
    assert t.state.run is not None and t.state.run.phase is Phase.RUNNING
    return t


def test_a_steer_goes_to_the_running_turn_without_interrupting_it():
    t = running()
    effects = t.do(t.s.steer("also add tests"))
    steer = of(effects, F.SteerAgent)
    assert [(s.run_id, s.text) for s in steer] == [("r1", "also add tests")]
    assert of(effects, F.InterruptAgent) == [] and of(effects, F.PromptAgent) == []
    assert t.state.run.phase is Phase.RUNNING
    assert [s.text for s in t.state.run.steers] == ["also add tests"]
    assert t.state.queue == ()


def test_a_taken_steer_is_shown_once_and_never_runs_again():
    t = running()
    t.do(t.s.steer("also add tests"))
    steer_id = t.state.run.steers[0].id
    effects = t.do(t.s.agent("r1", E.SteerTaken(steer_id=steer_id)))
    markers = [m.text for m in posts(effects, "marker")]
    assert markers == ["↪ u1 (added to this turn): also add tests"]
    assert t.state.run.steers == ()
    effects = t.do(t.s.done("r1"))
    assert of(effects, F.PromptAgent) == [] and t.state.run is None
    assert t.state.counters.steers_taken == 1
    # A late duplicate of the answer changes nothing.
    effects = t.do(t.s.agent("r1", E.SteerTaken(steer_id=steer_id)))
    assert effects == () and t.state.counters.stale_drops == 1


def test_a_steer_the_turn_did_not_take_runs_next_as_a_prompt():
    t = running()
    t.do(t.s.queue("later"))
    t.do(t.s.steer("also add tests"))
    effects = t.do(t.s.done("r1"))
    prompts = of(effects, F.PromptAgent)
    assert [p.text for p in prompts] == ["also add tests"]  # ahead of the /queue item
    assert t.queued_texts() == ["later"]


def test_a_refused_steer_goes_to_the_head_of_the_queue_with_a_notice():
    t = running()
    t.do(t.s.queue("later"))
    t.do(t.s.steer("also add tests"))
    steer_id = t.state.run.steers[0].id
    effects = t.do(t.s.agent("r1", E.SteerRefused(steer_id=steer_id, reason="turn over")))
    assert any("could not take a message (turn over)" in n.text for n in posts(effects, "notice"))
    assert t.queued_texts() == ["also add tests", "later"] and t.state.run.steers == ()
    effects = t.do(t.s.done("r1"))
    assert [p.text for p in of(effects, F.PromptAgent)] == ["also add tests"]


def test_a_steer_whose_effect_failed_is_not_lost():
    t = running()
    effects = t.do(t.s.steer("also add tests"))
    key = of(effects, F.SteerAgent)[0].key
    t.do(t.s.failed("steer_agent", key=key))
    assert t.queued_texts() == ["also add tests"] and t.state.run.steers == ()


def test_an_agent_that_cannot_steer_is_interrupted_and_the_message_resent():
    t = running(steer=False)
    effects = t.do(t.s.steer("also add tests"))
    assert of(effects, F.SteerAgent) == []
    assert of(effects, F.InterruptAgent) == [F.InterruptAgent(run_id="r1")]
    assert any("cannot add to a running turn" in r.text for r in of(effects, F.ReplyToCommand))
    effects = t.do(t.s.aborted("r1"))
    assert [p.text for p in of(effects, F.PromptAgent)] == ["also add tests"]


def test_capabilities_not_yet_known_fall_back_too():
    t = running(steer=None)
    effects = t.do(t.s.steer("also add tests"))
    assert of(effects, F.InterruptAgent) and not of(effects, F.SteerAgent)


def test_a_steer_with_no_run_is_a_normal_prompt():
    t = Thread().started()
    effects = t.do(t.s.steer("hello"))
    assert [p.text for p in of(effects, F.PromptAgent)] == ["hello"]
    assert of(effects, F.ReplyToCommand) == []


def test_a_steer_while_the_run_is_being_interrupted_runs_next():
    t = running()
    t.do(t.s.abort())
    effects = t.do(t.s.steer("then this"))
    assert of(effects, F.SteerAgent) == [] and t.queued_texts() == ["then this"]
    effects = t.do(t.s.aborted("r1"))
    assert [p.text for p in of(effects, F.PromptAgent)] == ["then this"]


def test_a_steer_without_a_conversation_is_refused():
    t = Thread()
    effects = t.do(t.s.steer("hello"))
    assert "No conversation" in of(effects, F.ReplyToCommand)[0].text
    assert t.state.counters.rejected == 1


def test_ending_the_conversation_drops_pending_steers_with_the_queue():
    t = running()
    t.do(t.s.steer("also add tests"))
    effects = t.do(t.s.end())
    assert t.state.queue == () and t.state.run is None
    assert "1 queued prompt(s) were dropped" in of(effects, F.ReplyToCommand)[0].text


def _completed(t: Thread, run_id: str, input_tokens: int):
    usage = E.Usage(input_tokens=input_tokens, context_window=1000)
    return t.do(t.s.agent(run_id, E.TurnCompleted(session_id="s1", usage=usage)))


def test_context_use_is_in_the_footer_and_told_at_80_and_95_percent_once_each():
    t = Thread().started()
    t.do(t.s.user("one"))
    effects = _completed(t, "r1", 420)
    assert "42% context" in posts(effects, "footer")[0].text
    assert posts(effects, "notice") == []
    t.do(t.s.user("two"))
    effects = _completed(t, "r2", 810)
    assert ["81% full" in n.text and "/compact" in n.text for n in posts(effects, "notice")] == [
        True
    ]
    t.do(t.s.user("three"))
    assert posts(_completed(t, "r3", 850), "notice") == []  # told already
    t.do(t.s.user("four"))
    assert len(posts(_completed(t, "r4", 960), "notice")) == 1
    t.do(t.s.user("five"))
    assert posts(_completed(t, "r5", 100), "notice") == []  # compacted: armed again
    t.do(t.s.user("six"))
    assert len(posts(_completed(t, "r6", 820), "notice")) == 1


def test_compact_is_queued_as_a_run_of_its_own_and_reported():
    t = running()
    t.state = t.state.replace(capabilities=t.state.capabilities.replace(compact=True))
    effects = t.do(t.s.compact())
    assert of(effects, F.InterruptAgent) == []  # it never interrupts
    assert "Queued (position 1)" in of(effects, F.ReplyToCommand)[0].text
    effects = t.do(t.s.done("r1"))
    prompt = of(effects, F.PromptAgent)[0]
    assert prompt.command == "compact" and prompt.text == "/compact"
    assert [m.text for m in posts(effects, "marker")] == [
        "🗜 Compacting the conversation (/compact by u1)…"
    ]
    usage = E.Usage(input_tokens=50, context_window=1000)
    effects = t.do(t.s.agent("r2", E.TurnCompleted(session_id="s1", usage=usage)))
    assert "5% context" in posts(effects, "footer")[0].text


def test_compact_is_refused_when_the_agent_cannot_or_is_not_known_yet():
    t = running()  # steers, but declared no compaction
    effects = t.do(t.s.compact())
    assert of(effects, F.ReplyToCommand)[0].text == "claude cannot compact its conversation."
    t = Thread().started()
    effects = t.do(t.s.compact())
    assert "has not started yet" in of(effects, F.ReplyToCommand)[0].text
    assert t.state.queue == ()


def test_fork_asks_for_a_new_thread_continuing_the_session_and_leaves_the_run():
    t = running()
    t.state = t.state.replace(capabilities=t.state.capabilities.replace(fork=True))
    before = t.state.run
    effects = t.do(t.s.fork("what does foo do?"))
    (opened,) = of(effects, F.OpenThread)
    assert (opened.agent, opened.session_id, opened.prompt) == ("claude", "s1", "what does foo do?")
    assert opened.title == "btw: what does foo do?"
    assert t.state.run == before and of(effects, F.InterruptAgent) == []
    effects = t.do(t.s.forked(opened.key, "t2", "<#t2>"))
    assert "Forked into <#t2>" in of(effects, F.ReplyToCommand)[0].text
    effects = t.do(t.s.failed("open_thread", reason="no permission"))
    assert (
        "Could not open a thread for the fork: no permission"
        in of(effects, F.ReplyToCommand)[0].text
    )


def test_a_forked_conversation_forks_once_then_resumes_its_own_session():
    t = Thread()
    t.do(
        A.ConversationResumed(
            **t.s._base(),
            agent="claude",
            session_id="s1",
            requested_workdir="/work/app",
            resolved_workdir="/work/app",
            fork=True,
        )
    )
    start = of(t.all_effects, F.StartAgent)[-1]
    assert start.session_id == "s1" and start.fork
    assert "Forked claude session s1" in of(t.all_effects, F.ReplyToCommand)[-1].text
    t.do(t.s.user("hi"), t.s.agent("r1", E.SessionStarted(session_id="s9")))
    assert t.state.conversation.session_id == "s9" and t.state.conversation.fork_of is None
    assert not F.StartAgent.of(t.state.conversation).fork


def test_fork_is_refused_without_a_session_or_the_capability():
    t = running()
    assert "cannot fork" in of(t.do(t.s.fork()), F.ReplyToCommand)[0].text
    t = Thread().started()
    t.do(t.s.connected(None, steer=True, fork=True))
    assert "Nothing to fork yet" in of(t.do(t.s.fork()), F.ReplyToCommand)[0].text
