"""Scenario tests for ``transition``, one behaviour each, written as given / when / then."""

from __future__ import annotations

from threadspindle.runtime.core import agent_events as E
from threadspindle.runtime.core import effect_types as F
from threadspindle.runtime.core.model import AgentStatus, Attachment, Phase, Policy, ThreadState
from threadspindle.runtime.core.transitions import Transition, transition
from threadspindle.testkit.thread_script import ThreadScript


class Thread:
    """A thread under test: applies actions in order and keeps what came out."""

    def __init__(self, **policy: object) -> None:
        self.s = ThreadScript("t1")
        self.state = ThreadState.new("t1", Policy(allowed_roots=("/work",), **policy))
        self.last: Transition | None = None
        self.all_effects: list[F.Effect] = []

    def do(self, *actions) -> tuple[F.Effect, ...]:
        effects: list[F.Effect] = []
        for action in actions:
            self.last = transition(self.state, action)
            self.state = self.last.state
            effects.extend(self.last.effects)
        self.all_effects.extend(effects)
        return tuple(effects)

    def started(self) -> Thread:
        self.do(self.s.start())
        return self

    @property
    def run_id(self) -> str | None:
        return self.state.run.id if self.state.run else None

    def queued_texts(self) -> list[str]:
        return [q.text for q in self.state.queue]


def of(effects, kind):
    return [e for e in effects if isinstance(e, kind)]


def posts(effects, kind):
    return [e for e in effects if isinstance(e, F.PostOutput) and e.kind == kind]


def test_a_message_while_idle_is_sent_at_once():
    t = Thread().started()
    effects = t.do(t.s.user("hello"))
    prompt = of(effects, F.PromptAgent)
    assert [p.text for p in prompt] == ["hello"]
    assert t.state.run.phase is Phase.DISPATCHING
    assert of(effects, F.Typing) == [F.Typing(on=True)]
    assert posts(effects, "marker") == []  # it never waited: no marker


def test_a_plain_message_during_a_run_interrupts_it_and_runs_next():
    t = Thread().started()
    t.do(t.s.user("first"), t.s.text("r1", "working"))
    effects = t.do(t.s.user("second"))
    assert of(effects, F.InterruptAgent) == [F.InterruptAgent(run_id="r1")]
    assert t.state.run.phase is Phase.INTERRUPTING
    assert t.queued_texts() == ["second"]
    # when the interrupted turn ends, no footer for it, and "second" is dispatched
    effects = t.do(t.s.aborted("r1"))
    assert posts(effects, "footer") == []
    assert [p.text for p in of(effects, F.PromptAgent)] == ["second"]
    assert [m.text for m in posts(effects, "marker")] == ["» u1: second"]
    assert t.state.counters.interrupts == 1


def test_a_message_with_no_text_and_no_attachment_is_refused_and_interrupts_nothing():
    # A Discord sticker or embed alone arrives with empty content; a message of control
    # characters shows nothing either. Neither may end the running turn.
    t = Thread().started()
    t.do(t.s.user("first"), t.s.text("r1", "working"))
    for action in (t.s.user(""), t.s.user("\0\x1b\x9b \t"), t.s.queue(" "), t.s.steer("\x07")):
        effects = t.do(action)
        assert of(effects, F.InterruptAgent) == []
        assert [r.text for r in of(effects, F.ReplyToCommand)] == [
            "Not sent: the message has no text for the agent."
        ]
    assert t.state.run.phase is Phase.RUNNING
    assert t.queued_texts() == []
    assert t.state.counters.rejected == 4
    # An attachment alone is a prompt (the agent reads the file).
    attached = t.s.user("").replace(
        attachments=(Attachment(name="a.png", path="/work/a.png", size=1),)
    )
    effects = t.do(attached)
    assert of(effects, F.InterruptAgent) == [F.InterruptAgent(run_id="r1")]


def test_queue_never_interrupts_and_queued_items_survive_an_interrupt_in_order():
    t = Thread().started()
    t.do(t.s.user("one"))
    effects = t.do(t.s.queue("q1"), t.s.queue("q2"))
    assert of(effects, F.InterruptAgent) == []
    assert [r.text for r in of(effects, F.ReplyToCommand)] == [
        "Queued (position 1).",
        "Queued (position 2).",
    ]
    t.do(t.s.user("urgent"))  # interrupts; goes ahead of the /queue items
    assert t.queued_texts() == ["urgent", "q1", "q2"]
    order = []
    for _ in range(3):
        effects = t.do(t.s.done(t.run_id))
        order += [p.text for p in of(effects, F.PromptAgent)]
    assert order == ["urgent", "q1", "q2"]


def test_queue_while_idle_sends_at_once():
    t = Thread().started()
    effects = t.do(t.s.queue("now"))
    assert [p.text for p in of(effects, F.PromptAgent)] == ["now"]
    assert [r.text for r in of(effects, F.ReplyToCommand)] == ["Sending now."]


def test_the_queue_suffix_queues_without_interrupting():
    t = Thread().started()
    t.do(t.s.user("one"))
    effects = t.do(t.s.user("later", interrupt=False, source="m9"))
    assert of(effects, F.InterruptAgent) == []
    assert t.queued_texts() == ["later"]
    remove = of(effects, F.ReplyToCommand)[0].buttons[0]
    assert remove.label == "Remove from queue"


def test_a_completed_run_gets_exactly_one_footer():
    t = Thread().started()
    effects = t.do(
        t.s.user("go"),
        t.s.text("r1", "a"),
        t.s.tool("r1", "k1"),
        t.s.tool_done("r1", "k1"),
        t.s.tool("r1", "k2"),
        t.s.tool_done("r1", "k2", "bad", is_error=True),
        t.s.text("r1", "b"),
        t.s.done("r1"),
    )
    footers = posts(effects, "footer")
    assert len(footers) == 1
    assert footers[0].text == "1.2s · $0.0100 · m"
    assert len(posts(effects, "tool")) == 2
    assert of(effects, F.EditOutput)[1].text.endswith("✗ bad")
    assert effects[-1] == F.Typing(on=False)  # typing stops after the footer
    assert t.state.counters.completed == 1


def test_a_failed_run_ends_with_one_notice_and_no_footer():
    t = Thread().started()
    t.do(t.s.user("go"), t.s.text("r1", "partial"))
    failed = t.s.agent("r1", E.TurnCompleted(session_id="s1", is_error=True, error="API down"))
    effects = t.do(failed)
    assert posts(effects, "footer") == []
    assert [p.text for p in posts(effects, "notice")] == ["⚠ The turn failed: API down"]
    assert effects[-1] == F.Typing(on=False)
    assert t.state.run is None
    assert t.state.counters.failed == 1 and t.state.counters.completed == 0


def test_an_aborted_run_gets_no_footer_and_the_queue_goes_on():
    t = Thread().started()
    t.do(t.s.user("long"), t.s.tool("r1", "k"), t.s.queue("next"))
    effects = t.do(t.s.abort())
    assert of(effects, F.InterruptAgent) == [F.InterruptAgent(run_id="r1")]
    assert "1 queued prompt(s) follow" in of(effects, F.ReplyToCommand)[0].text
    # Typing stops with the abort (before its reply), not when the agent has stopped.
    assert effects.index(F.Typing(on=False)) < effects.index(of(effects, F.ReplyToCommand)[0])
    effects = t.do(t.s.done("r1"))  # a CLI may still say "completed" after an interrupt
    assert posts(effects, "footer") == []
    assert [p.text for p in of(effects, F.PromptAgent)] == ["next"]
    assert t.state.counters.aborts == 1


def test_an_abort_of_a_run_already_stopping_is_one_outcome_not_another():
    # Three /abort of one run gave three "Aborted" replies and "aborted 3" in /status.
    t = Thread().started()
    t.do(t.s.user("long"), t.s.tool("r1", "k"))
    t.do(t.s.abort())
    for _ in range(2):
        effects = t.do(t.s.abort())
        assert [e.text for e in of(effects, F.ReplyToCommand)] == ["The run is already stopping."]
        assert of(effects, F.ReplyToCommand)[0].ephemeral
        assert of(effects, F.InterruptAgent) == []
    assert t.state.counters.aborts == 1
    # A run a new message interrupted is stopping too: an /abort then counts nothing more.
    t.do(t.s.done("r1"), t.s.user("second"), t.s.tool("r2", "k2"), t.s.user("third"))
    assert t.state.counters.interrupts == 1
    effects = t.do(t.s.abort())
    assert [e.text for e in of(effects, F.ReplyToCommand)] == ["The run is already stopping."]
    assert (t.state.counters.aborts, t.state.counters.interrupts) == (1, 1)


def test_abort_while_idle_is_answered_and_recorded():
    t = Thread().started()
    effects = t.do(t.s.abort())
    assert of(effects, F.ReplyToCommand)[0].text.startswith("Nothing to abort")
    assert t.state.counters.ignored == 1


def test_dispatch_waits_for_a_permission_and_a_new_message_dismisses_it():
    t = Thread().started()
    t.do(t.s.user("touch it"), t.s.queue("after"))
    effects = t.do(t.s.permission("r1", "p1"))
    assert of(effects, F.ShowPermissionPrompt)[0].request_id == "p1"
    assert effects[-1] == F.Typing(on=False)  # typing pauses while waiting
    effects = t.do(t.s.user("never mind"))
    assert of(effects, F.AnswerPermission) == [F.AnswerPermission(request_id="p1", allow=False)]
    assert of(effects, F.DismissPrompt)[0].outcome == "Dismissed: a new message arrived."
    assert t.state.blockers == ()
    assert t.queued_texts() == ["never mind", "after"]


def test_answering_the_last_blocker_resumes_and_the_queue_drains_one_at_a_time():
    t = Thread().started()
    t.do(t.s.user("go"), t.s.queue("q1"), t.s.queue("q2"))
    t.do(t.s.permission("r1", "p1"), t.s.question("r1", "p2"))
    effects = t.do(t.s.allow("p1"))
    assert of(effects, F.AnswerPermission) == [F.AnswerPermission(request_id="p1", allow=True)]
    assert of(effects, F.Typing) == []  # still one question open
    effects = t.do(t.s.answer("p2", "b"))
    assert of(effects, F.AnswerQuestion) == [F.AnswerQuestion(request_id="p2", answer="b")]
    assert of(effects, F.Typing) == [F.Typing(on=True)]
    effects = t.do(t.s.done("r1"))
    assert [p.text for p in of(effects, F.PromptAgent)] == ["q1"]
    assert t.queued_texts() == ["q2"]


def test_an_answer_to_a_request_that_is_gone_changes_nothing():
    t = Thread().started()
    effects = t.do(t.s.allow("nope"))
    assert of(effects, F.AnswerPermission) == []
    assert "no longer pending" in of(effects, F.ReplyToCommand)[0].text


def test_stale_agent_events_are_dropped_and_counted():
    t = Thread().started()
    t.do(t.s.user("one"), t.s.user("two"), t.s.aborted("r1"))
    assert t.run_id == "r2"
    before = t.state
    effects = t.do(t.s.text("r1", "late output of the old run"))
    assert effects == ()
    assert t.state.counters.stale_drops == before.counters.stale_drops + 1
    assert t.state.run == before.run and t.state.queue == before.queue


def test_events_of_another_session_are_dropped():
    t = Thread().started()
    t.do(t.s.user("one"), t.s.done("r1", session_id="s1"), t.s.user("two"))
    effects = t.do(t.s.agent("r2", t.s.text("r2", "x").event, session_id="other"))
    assert effects == () and t.state.counters.stale_drops == 1


def test_the_queue_limit_rejects_with_a_message():
    t = Thread(queue_limit=2).started()
    t.do(t.s.user("run"), t.s.queue("q1"), t.s.queue("q2"))
    effects = t.do(t.s.queue("q3"))
    assert t.queued_texts() == ["q1", "q2"]
    assert "queue is full (2 prompts)" in of(effects, F.ReplyToCommand)[0].text
    assert t.state.counters.rejected == 1


def test_clear_queue_all_and_by_position():
    t = Thread().started()
    t.do(t.s.user("run"), t.s.queue("q1"), t.s.queue("q2"), t.s.queue("q3"))
    t.do(t.s.clear(2))
    assert t.queued_texts() == ["q1", "q3"]
    effects = t.do(t.s.clear(5))
    assert "No queued prompt at position 5" in of(effects, F.ReplyToCommand)[0].text
    t.do(t.s.clear())
    assert t.queued_texts() == []
    assert t.state.counters.removed == 3


def test_remove_button_removes_only_that_item():
    t = Thread().started()
    t.do(t.s.user("run"), t.s.queue("q1"), t.s.queue("q2"))
    target = t.state.queue[0].id
    t.do(t.s.remove(target))
    assert t.queued_texts() == ["q2"]
    effects = t.do(t.s.remove(target))
    assert of(effects, F.ReplyToCommand)[0].text == "That prompt is no longer queued."


def test_edit_and_delete_of_a_queued_message():
    t = Thread().started()
    t.do(t.s.user("run"))
    t.do(t.s.user("draft", interrupt=False, source="m1"))
    t.do(t.s.user("other", interrupt=False, source="m2"))
    t.do(t.s.edited("m1", "final"))
    assert t.queued_texts() == ["final", "other"]
    t.do(t.s.deleted("m2"))
    assert t.queued_texts() == ["final"]
    t.do(t.s.deleted("m-unknown"))
    assert t.state.last_note == "delete of a message that is not queued"


def test_a_prompt_without_a_conversation_is_rejected_not_lost():
    t = Thread()
    effects = t.do(t.s.user("hello?"))
    assert "No conversation" in of(effects, F.ReplyToCommand)[0].text
    assert t.state.counters.rejected == 1


def test_workdir_must_exist_and_stay_inside_the_allowed_roots():
    t = Thread()
    effects = t.do(t.s.start(workdir="../etc", resolved="/etc"))
    assert "outside the allowed roots: /work" in of(effects, F.ReplyToCommand)[0].text
    effects = t.do(t.s.start(workdir="app/link", resolved="/home/x"))  # a symlink out
    assert "outside the allowed roots" in of(effects, F.ReplyToCommand)[0].text
    effects = t.do(t.s.start(workdir="missing", resolved=None))
    assert "does not exist" in of(effects, F.ReplyToCommand)[0].text
    effects = t.do(t.s.start(workdir="/workshop", resolved="/workshop"))  # a prefix, not a child
    assert t.state.conversation is None
    effects = t.do(t.s.start(workdir="app", resolved="/work/app"))
    assert of(effects, F.StartAgent)[0].workdir == "/work/app"
    assert t.state.agent_status is AgentStatus.STARTING


def test_workdir_change_restarts_the_agent_with_a_new_session():
    t = Thread().started()
    t.do(t.s.connected(), t.s.user("x"), t.s.done("r1", session_id="s1"))
    effects = t.do(t.s.workdir("lib", "/work/lib"))
    assert [type(e) for e in effects[:2]] == [F.StopAgent, F.StartAgent]
    assert t.state.conversation.workdir == "/work/lib"
    assert t.state.conversation.session_id is None


def test_end_and_resume_conversation():
    t = Thread().started()
    t.do(t.s.connected(), t.s.user("x"), t.s.done("r1", session_id="sess-9"), t.s.user("y"))
    t.do(t.s.queue("z"))
    effects = t.do(t.s.end())
    reply = of(effects, F.ReplyToCommand)[0].text
    assert "/claude resume sess-9" in reply and "1 queued prompt(s) were dropped" in reply
    assert of(effects, F.StopAgent) and t.state.conversation is None and t.state.run is None
    effects = t.do(t.s.resume("sess-9"))
    assert of(effects, F.StartAgent)[0].session_id == "sess-9"
    effects = t.do(t.s.user("continue"))
    assert of(effects, F.PromptAgent)[0].session_id == "sess-9"


def test_model_change_aborts_and_retries_the_prompt_in_the_same_session():
    t = Thread().started()
    t.do(t.s.connected(), t.s.user("x"), t.s.done("r1", session_id="s1"))
    t.do(t.s.user("big task"), t.s.text("r2", "thinking..."))
    effects = t.do(t.s.model("smart"))
    prompt = of(effects, F.PromptAgent)
    assert [(p.text, p.model, p.session_id) for p in prompt] == [("big task", "smart", "s1")]
    assert posts(effects, "footer") == []
    assert t.run_id == "r3"


def test_a_crashed_agent_ends_the_run_with_a_notice_and_the_queue_goes_on():
    t = Thread().started()
    t.do(t.s.connected(), t.s.user("x"), t.s.queue("next"))
    effects = t.do(t.s.exited(code=137, stderr="Segmentation fault"))
    notice = posts(effects, "notice")[0].text
    assert "exit code 137" in notice and "Segmentation fault" in notice
    assert of(effects, F.StartAgent) and [p.text for p in of(effects, F.PromptAgent)] == ["next"]


def test_an_interrupt_that_does_not_end_is_forced_after_the_grace():
    t = Thread(interrupt_grace_s=5).started()
    t.do(t.s.user("one"), t.s.user("two"))
    assert of(t.do(t.s.tick(2)), F.StopAgent) == []
    effects = t.do(t.s.tick(4))
    assert of(effects, F.StopAgent)[0].reason == "interrupt timed out"
    assert [p.text for p in of(effects, F.PromptAgent)] == ["two"]


def test_a_silent_turn_times_out():
    t = Thread(turn_idle_timeout_s=60).started()
    t.do(t.s.user("one"))
    effects = t.do(t.s.tick(61))
    assert of(effects, F.InterruptAgent) and "No output" in posts(effects, "notice")[0].text


def test_restart_reports_the_active_run_interrupted_and_continues_the_queue():
    t = Thread().started()
    t.do(t.s.connected(), t.s.user("one"), t.s.queue("two"))
    effects = t.do(t.s.recovered())
    assert "Spindle restarted" in posts(effects, "notice")[0].text
    assert of(effects, F.StartAgent)  # the agent process died with the runtime
    assert [p.text for p in of(effects, F.PromptAgent)] == ["two"]


def test_duplicate_delivery_changes_nothing():
    t = Thread().started()
    msg = t.s.user("once")
    t.do(msg)
    state = t.state
    assert t.do(msg) == ()
    assert t.state.counters.duplicates == 1 and t.state.run == state.run


def test_an_action_for_another_thread_is_recorded():
    t = Thread()
    other = ThreadScript("t2").user("hi")
    assert t.do(other) == ()
    assert t.state.counters.ignored == 1 and "sent to t1" in t.state.last_note


def test_output_keys_are_unique_and_stable():
    t = Thread().started()
    t.do(t.s.user("a"), t.s.text("r1", "x"), t.s.tool("r1", "k"), t.s.done("r1"))
    keys = [e.key for e in t.all_effects if isinstance(e, F.KEYED_POSTS)]
    assert len(keys) == len(set(keys))
    assert [k for k in keys if "/r1/" in k] == ["t1/r1/0", "t1/r1/1", "t1/r1/2"]
    # replaying the same actions from scratch gives byte-identical effects
    replay = Thread()
    replay.s = ThreadScript("t1")
    replay.started()
    replay.do(replay.s.user("a"), replay.s.text("r1", "x"), replay.s.tool("r1", "k"))
    replay.do(replay.s.done("r1"))
    dump = [e.model_dump_json() for e in replay.all_effects]
    assert dump == [e.model_dump_json() for e in t.all_effects]


def test_streamed_text_appends_with_increasing_sequence_numbers():
    t = Thread().started()
    effects = t.do(
        t.s.user("a"),
        t.s.text("r1", "Hel"),
        t.s.text("r1", "lo"),
        t.s.text("r1", "new block", block="b2"),
    )
    appends = of(effects, F.AppendOutput)
    assert [(a.seq, a.text) for a in appends] == [(1, "lo")]
    assert [p.text for p in posts(effects, "text")] == ["Hel", "new block"]
    assert of(effects, F.SealOutput)[0].key == posts(effects, "text")[0].key


def test_status_describes_the_thread():
    t = Thread().started()
    t.do(t.s.user("a"), t.s.queue("later"))
    text = of(t.do(t.s.status()), F.ReplyToCommand)[0].text
    assert "Agent: claude" in text and "Run: r1 dispatching" in text
    assert "Queue: 1/50" in text and "1. u1: later" in text


def test_parking_stops_the_run_and_keeps_the_queue_until_woken():
    t = Thread().started()
    t.do(t.s.connected(), t.s.user("long"), t.s.queue("next"), t.s.permission("r1", "p1"))
    effects = t.do(t.s.parked("shutting down"))
    notice = posts(effects, "notice")[0].text
    assert "Spindle stopped this run (shutting down)" in notice and "1 queued prompt(s)" in notice
    assert of(effects, F.StopAgent) and of(effects, F.PromptAgent) == []
    assert t.state.run is None and t.queued_texts() == ["next"] and t.state.blockers == ()
    # the agent's exit that follows is not a crash, and nothing is dispatched
    effects = t.do(t.s.exited(code=0, crashed=False))
    assert effects == () and t.queued_texts() == ["next"]
    # a restart wakes the thread and the queue goes on
    effects = t.do(t.s.recovered())
    assert [p.text for p in of(effects, F.PromptAgent)] == ["next"]


def test_status_counts_the_runs_spindle_stopped():
    """A run ended by a shutdown (park) or by a restart counts as stopped by Spindle, so
    the status line adds up; with none, the line stays as it was."""
    t = Thread().started()
    t.do(t.s.connected(), t.s.user("a"))
    assert "stopped by Spindle" not in of(t.do(t.s.status()), F.ReplyToCommand)[0].text
    t.do(t.s.parked("shutting down"))
    t.do(t.s.recovered(), t.s.connected(), t.s.user("b"))
    assert t.state.run is not None
    t.do(t.s.recovered())  # the process died mid-run
    assert t.state.counters.stopped == 2 and t.state.counters.runs == 2
    text = of(t.do(t.s.status()), F.ReplyToCommand)[0].text
    assert "Runs: 2 (completed 0, failed 0, interrupted 0, aborted 0, stopped by Spindle 2)" in text
    t.do(t.s.recovered())  # no run: nothing more to count
    assert t.state.counters.stopped == 2


def test_a_user_message_wakes_a_parked_thread():
    t = Thread().started()
    t.do(t.s.parked("idle"))
    effects = t.do(t.s.user("hello again"))
    assert [p.text for p in of(effects, F.PromptAgent)] == ["hello again"]
    assert not t.state.parked


def test_status_lists_the_processes_ingress_found():
    from threadspindle.runtime.core.actions import StatusRequested

    t = Thread().started()
    action = StatusRequested(
        thread_id="t1", action_id="st", at=2000.0, processes=("web: running, pid 42, up 3s",)
    )
    text = of(t.do(action), F.ReplyToCommand)[0].text
    assert text.endswith("Processes:\n  web: running, pid 42, up 3s")


def _retry(t: Thread, attempt: int, of: int | None = 3) -> object:
    error = E.AgentError(
        message="API request failed (overloaded, HTTP 529)",
        retryable=True,
        attempt=attempt,
        max_retries=of,
    )
    return t.s.agent("r1", error)


def test_model_api_retries_show_as_one_status_line_edited_in_place():
    t = Thread().started()
    t.do(t.s.user("go"))
    first = t.do(_retry(t, 1))
    (line,) = posts(first, "status")
    assert line.text == (
        "⚠ The model API is unreachable — retry 1 of 3\n"
        "-# API request failed (overloaded, HTTP 529)"
    )
    second = t.do(_retry(t, 2))
    assert posts(second, "status") == []
    (edit,) = of(second, F.EditOutput)
    assert edit.key == line.key and edit.text.startswith(
        "⚠ The model API is unreachable — retry 2 of 3"
    )
    # The model answers at last: the line is finalised, the run gets its footer.
    done = t.do(t.s.text("r1", "hi"), t.s.done("r1"))
    finals = [e for e in of(done, F.EditOutput) if e.key == line.key]
    assert [e.text for e in finals] == [
        "The model API was unreachable — it answered after 2 retries."
    ]
    assert len(posts(done, "footer")) == 1


def test_a_run_that_gives_up_retrying_finalises_its_status_line_and_fails():
    t = Thread().started()
    t.do(t.s.user("go"), _retry(t, 1, of=None))
    key = t.state.run.retry_key
    failed = t.s.agent("r1", E.TurnCompleted(is_error=True, error="API Error: 529"))
    effects = t.do(failed)
    finals = [e.text for e in of(effects, F.EditOutput) if e.key == key]
    assert finals == ["⚠ The model API was unreachable — 1 retry, then the run ended."]
    assert [p.text for p in posts(effects, "notice")] == ["⚠ The turn failed: API Error: 529"]
    assert posts(effects, "footer") == []


def test_an_aborted_run_finalises_its_retry_line_too():
    t = Thread().started()
    t.do(t.s.user("go"), _retry(t, 1), _retry(t, 2))
    key = t.state.run.retry_key
    t.do(t.s.abort())
    effects = t.do(t.s.aborted("r1"))
    finals = [e.text for e in of(effects, F.EditOutput) if e.key == key]
    assert finals == ["⚠ The model API was unreachable — 2 retries, then the run ended."]
    # The next run starts without one.
    t.do(t.s.user("again"))
    assert t.state.run.retry_key is None


def test_a_session_id_that_could_not_be_handed_back_is_not_kept():
    # A NUL in it made every later start of the agent fail ("embedded null byte" in its
    # argv or environment), restarts included: the thread was broken for good.
    t = Thread().started()
    t.do(t.s.user("hello"))
    run = t.run_id
    t.do(t.s.agent(run, E.SessionStarted(session_id="abc\x00def")))
    assert t.state.conversation.session_id is None
    assert "unusable session id" in (t.last.note or "")
    t.do(t.s.agent(run, E.TurnCompleted(session_id="x" * 600)))
    assert t.state.conversation.session_id is None
    fine = Thread().started()
    fine.do(fine.s.user("hello"))
    fine.do(fine.s.agent(fine.run_id, E.SessionStarted(session_id="s-42 (ok)")))
    assert fine.state.conversation.session_id == "s-42 (ok)"
