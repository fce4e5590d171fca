"""Scenario tests for scheduled prompts, agent wake-ups, verbosity and titles in the core."""

from __future__ import annotations

from threadspindle.runtime.core import effect_types as F
from threadspindle.runtime.core.model import Policy, ThreadState
from threadspindle.runtime.core.transitions import Transition, transition
from threadspindle.runtime.core.transitions_schedule import (
    MIN_WAKEUP_S,
    SCHEDULE_LIMIT,
    WAKEUP_CHAIN_LIMIT,
)
from threadspindle.testkit.thread_script import ThreadScript


class Thread:
    def __init__(self, **policy: object) -> None:
        self.s = ThreadScript("t1")
        self.state = ThreadState.new("t1", Policy(allowed_roots=("/work",), **policy))
        self.last: Transition | None = None

    def do(self, *actions) -> tuple[F.Effect, ...]:
        effects: list[F.Effect] = []
        for action in actions:
            self.last = transition(self.state, action)
            self.state = self.last.state
            effects.extend(self.last.effects)
        return tuple(effects)

    def started(self) -> Thread:
        self.do(self.s.start())
        return self


def texts(effects, cls=F.ReplyToCommand) -> list[str]:
    return [e.text for e in effects if isinstance(e, cls)]


def prompts(effects) -> list[str]:
    return [e.text for e in effects if isinstance(e, F.PromptAgent)]


def test_a_schedule_is_added_listed_and_fires_like_a_queued_prompt():
    t = Thread().started()
    replies = texts(t.do(t.s.schedule("check the CI", 2_000.0, label="in 2h")))
    assert len(replies) == 1 and "Scheduled s1" in replies[0] and "check the CI" in replies[0]
    assert [s.id for s in t.state.schedules] == ["s1"]
    listed = texts(t.do(t.s.list_schedules()))
    assert "s1" in listed[0] and "1970-01-01 00:33 UTC" in listed[0]
    effects = t.do(t.s.due("s1", 2_000.0))
    assert prompts(effects) == ["check the CI"]
    notices = texts(effects, F.PostOutput)
    assert any("Schedule s1 is due" in n for n in notices)
    assert any(n.startswith("» u1: check the CI") for n in notices)  # the queue's marker
    assert t.state.schedules == ()
    assert t.state.counters.schedules_fired == 1


def test_a_due_schedule_waits_behind_a_running_turn_and_never_interrupts():
    t = Thread().started()
    t.do(t.s.user("long job"), t.s.schedule("later", 1_500.0))
    run = t.state.run
    assert run is not None
    effects = t.do(t.s.due("s1", 1_500.0))
    assert not any(isinstance(e, F.InterruptAgent) for e in effects)
    assert [q.text for q in t.state.queue] == ["later"]
    assert t.state.queue[0].from_queue
    effects = t.do(t.s.done(run.id))
    assert prompts(effects) == ["later"]


def test_each_due_time_fires_at_most_once():
    t = Thread().started()
    t.do(t.s.schedule("ping", 1_500.0))
    due = t.s.due("s1", 1_500.0)
    assert prompts(t.do(due)) == ["ping"]
    assert t.do(due) == ()  # the same delivery again: a duplicate
    again = t.s.due("s1", 1_500.0)  # another delivery for the same time
    assert t.do(again) == ()
    assert "gone" in (t.last.note or "")


def test_a_cron_schedule_rearms_at_the_next_time_the_timer_gives():
    t = Thread().started()
    t.do(t.s.schedule("nightly", 1_500.0, cron="0 3 * * *"))
    t.do(t.s.due("s1", 1_500.0, next_due_at=88_000.0))
    assert [(s.id, s.due_at) for s in t.state.schedules] == [("s1", 88_000.0)]
    # A late delivery for the old time does not fire it a second time.
    assert prompts(t.do(t.s.due("s1", 1_500.0, next_due_at=88_000.0))) == []
    assert t.state.counters.schedules_fired == 1


def test_cancel_removes_a_schedule_and_an_unknown_id_is_refused():
    t = Thread().started()
    t.do(t.s.schedule("a", 1_500.0), t.s.schedule("b", 1_600.0))
    assert texts(t.do(t.s.cancel_schedule("s1"))) == ["Cancelled schedule s1."]
    assert [s.id for s in t.state.schedules] == ["s2"]
    refused = t.do(t.s.cancel_schedule("s9"))
    assert "No schedule s9" in texts(refused)[0] and refused[0].ephemeral
    assert prompts(t.do(t.s.due("s1", 1_500.0))) == []


def test_the_schedule_limit_refuses_one_more():
    t = Thread().started()
    for i in range(SCHEDULE_LIMIT):
        t.do(t.s.schedule(f"p{i}", 1_500.0 + i))
    refused = texts(t.do(t.s.schedule("one more", 1_600.0)))[0]
    assert f"already has {SCHEDULE_LIMIT} schedules" in refused
    assert len(t.state.schedules) == SCHEDULE_LIMIT


def test_a_schedule_past_ten_years_or_at_no_time_is_refused_not_a_crash():
    # (Ingress refuses such a `when`; a log row or another ingress must not make the core
    # show a date past the year 9999.)
    t = Thread().started()
    for due in (1e25, float("inf"), float("nan")):
        last = t.do(t.s.schedule("far", due))
        assert texts(last) == ["A schedule may be due at most 10 years ahead."]
        assert t.last is not None and t.last.note is not None
    assert t.state.schedules == ()
    t.do(t.s.schedule("near", t.s.now + 9 * 366 * 86400))
    assert len(t.state.schedules) == 1


def test_a_user_message_cancels_the_agents_wakeup_but_not_user_schedules():
    t = Thread().started()
    t.do(t.s.schedule("check CI", 1_500.0, wakeup=True), t.s.schedule("mine", 1_600.0))
    effects = t.do(t.s.user("actually, stop"))
    assert any("Cancelled the agent's wake-up (s1)" in n for n in texts(effects, F.PostOutput))
    assert [s.id for s in t.state.schedules] == ["s2"]
    assert prompts(t.do(t.s.due("s1", 1_500.0))) == []


def test_a_wakeup_is_a_minute_ahead_at_the_soonest():
    # A wake-up 60 ms ahead, chained turn after turn, wrote 1 MB/s to the log.
    t = Thread().started()
    action = t.s.schedule("again", t.s.now + 0.06, wakeup=True)
    effects = t.do(action)
    assert t.state.schedules[0].due_at == action.at + MIN_WAKEUP_S
    assert any("woken up at" in n for n in texts(effects, F.PostOutput))
    # A person's schedule is theirs to make: not moved.
    mine = t.s.schedule("mine", t.s.now + 1.0)
    t.do(mine)
    assert t.state.schedules[1].due_at == mine.due_at


def test_a_chain_of_wakeups_stops_at_the_limit_until_a_person_writes():
    t = Thread().started()
    for n in range(WAKEUP_CHAIN_LIMIT):
        t.do(t.s.schedule(f"loop {n}", t.s.now + 60.0, wakeup=True))
        sid = t.state.schedules[-1].id
        assert prompts(t.do(t.s.due(sid, t.s.now + 60.0))) == [f"loop {n}"]
        t.do(t.s.done(t.state.run.id))
    assert t.state.counters.wakeups_unattended == WAKEUP_CHAIN_LIMIT
    effects = t.do(t.s.schedule("one more", t.s.now + 60.0, wakeup=True))
    assert t.state.schedules == ()
    [notice] = texts(effects, F.PostOutput)
    assert "wake-up was refused" in notice and f"{WAKEUP_CHAIN_LIMIT} times" in notice
    assert "Write here" in notice
    # A person's schedules are not held to it.
    t.do(t.s.schedule("mine", t.s.now + 60.0))
    assert [s.text for s in t.state.schedules] == ["mine"]
    # A person writes: the chain starts again from none.
    t.do(t.s.user("go on"))
    assert t.state.counters.wakeups_unattended == 0
    t.do(t.s.schedule("after", t.s.now + 60.0, wakeup=True))
    assert [s.text for s in t.state.schedules] == ["mine", "after"]


def test_a_due_schedule_wakes_a_parked_thread():
    t = Thread().started()
    t.do(t.s.schedule("wake", 1_500.0), t.s.parked("idle"))
    assert t.state.parked
    effects = t.do(t.s.due("s1", 1_500.0))
    assert not t.state.parked
    assert prompts(effects) == ["wake"]


def test_schedules_survive_a_restart():
    t = Thread().started()
    t.do(t.s.schedule("after restart", 1_500.0), t.s.recovered())
    assert [s.id for s in t.state.schedules] == ["s1"]
    assert prompts(t.do(t.s.due("s1", 1_500.0))) == ["after restart"]


def run_with_tool_and_thinking(t: Thread) -> tuple[F.Effect, ...]:
    from threadspindle.runtime.core import agent_events as E

    t.do(t.s.user("go"))
    run = t.state.run.id
    return t.do(
        t.s.agent(run, E.ThinkingDelta(text="hmm")),
        t.s.tool(run, "tool1", summary="ls"),
        t.s.tool_done(run, "tool1", result="secret output"),
        t.s.text(run, "the answer", block="b2"),
        t.s.done(run),
    )


def shown(effects) -> str:
    parts = []
    for e in effects:
        if isinstance(e, F.PostOutput | F.AppendOutput | F.EditOutput):
            parts.append(e.text)
    return "\n".join(parts)


def test_verbosity_all_shows_thinking_and_tool_output():
    t = Thread().started()
    out = shown(run_with_tool_and_thinking(t))
    assert "hmm" in out and "Bash(ls)" in out and "secret output" in out and "the answer" in out


def test_verbosity_tools_shows_one_line_per_tool_and_no_thinking():
    t = Thread().started()
    assert "Verbosity: tools" in texts(t.do(t.s.verbosity("tools")))[0]
    effects = run_with_tool_and_thinking(t)
    out = shown(effects)
    assert "hmm" not in out and "secret output" not in out
    assert "Bash(ls) ✓" in out and "the answer" in out
    assert not any(isinstance(e, F.PostOutput) and e.kind == "thinking" for e in effects)


def test_verbosity_text_shows_only_the_answer_and_the_footer():
    t = Thread().started()
    t.do(t.s.verbosity("text"))
    effects = run_with_tool_and_thinking(t)
    kinds = [e.kind for e in effects if isinstance(e, F.PostOutput)]
    assert "tool" not in kinds and "thinking" not in kinds
    assert "text" in kinds and "footer" in kinds
    assert "the answer" in shown(effects)


def test_the_policy_gives_the_default_verbosity():
    t = Thread(verbosity="text").started()
    effects = run_with_tool_and_thinking(t)
    assert "Bash(ls)" not in shown(effects)


def test_a_title_renames_the_thread_once_per_new_title_even_between_turns():
    t = Thread().started()
    effects = t.do(t.s.title("Fix the flaky CI"))
    assert [e.title for e in effects if isinstance(e, F.RenameThread)] == ["Fix the flaky CI"]
    assert t.do(t.s.title("Fix  the flaky CI ")) == ()
    assert t.state.title == "Fix the flaky CI"
    long = t.do(t.s.title("x" * 300))
    assert [len(e.title) for e in long if isinstance(e, F.RenameThread)] == [100]


def test_a_title_keeps_printable_text_only():
    t = Thread().started()
    effects = t.do(t.s.title("Fix\x00 the\x1b[31m CI\u202e\nnow\x7f"))
    assert [e.title for e in effects if isinstance(e, F.RenameThread)] == ["Fix the [31m CI now"]
    assert t.do(t.s.title("\x00\x01\u200b")) == ()  # nothing printable: no rename
