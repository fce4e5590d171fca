"""The property-based harness: arbitrary interleavings of every action against ``transition``.

Hypothesis drives a ``RuleBasedStateMachine`` through user messages, ``/queue``, aborts,
queue edits, conversation changes, agent events of the current run and of stale runs,
permission and question answers, effect feedback (also duplicated), crashes, ticks and
restarts. A small reference model of the queue predicts, for each step, which prompts are
queued and in what order, and a reference of the phase events each action may cause says
which phase changes are allowed (each must be an edge of the phase table); a reference of
the thread's schedules says which exist and checks that each due time fires at most once and
none is lost (restarts, parking, crashes keep them); after every step
the invariants of ``docs/state-machine.md`` are checked. At the end the thread is driven to
completion to show that every accepted prompt is eventually dispatched.
"""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from threadspindle.runtime.core import actions as A
from threadspindle.runtime.core import agent_events as E
from threadspindle.runtime.core import effect_types as F
from threadspindle.runtime.core.guards import phase
from threadspindle.runtime.core.model import Phase, Policy, ThreadState
from threadspindle.runtime.core.phase_table import PHASE_TABLE
from threadspindle.runtime.core.transitions import transition
from threadspindle.testkit.thread_script import ThreadScript

ROOT = "/work"
QUEUE_LIMIT = 6
texts = st.sampled_from(["hi", "fix the bug", "TOOLTEST", "x" * 300, ""])


def phase_events_of(action: A.Action) -> set[str]:
    """The reference for phase moves: the phase table's events an action may cause, from its
    meaning alone (docs/state-machine.md); any step may end with a ``dispatch`` besides."""
    if isinstance(action, A.AgentEventReceived):
        ends = isinstance(action.event, E.TurnCompleted | E.TurnAborted)
        return {"turn_end"} if ends else {"agent_event"}
    if isinstance(action, A.UserMessage):
        return {"interrupt"} if action.interrupt else set()
    if isinstance(action, A.AbortRequested):
        return {"interrupt"}
    if isinstance(action, A.Tick):
        return {"interrupt", "force_end"}  # a silent turn; an interrupt past its grace
    if isinstance(action, A.AgentExited | A.EffectFailed):
        return {"agent_exit"}
    if isinstance(
        action, A.ConversationEnded | A.ModelChanged | A.RuntimeRecovered | A.ThreadParked
    ):
        return {"force_end"}
    return set()


class ThreadMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.s = ThreadScript("t1")
        self.state = ThreadState.new("t1", Policy(queue_limit=QUEUE_LIMIT, allowed_roots=(ROOT,)))
        self.history: list[A.Action] = []
        self.keys: set[str] = set()
        self.accepted: set[str] = set()
        self.dispatched: list[str] = []
        self.removed: set[str] = set()
        self.runs_started = 0
        self.runs_ended = 0
        self.request_ids: list[str] = []
        self.status_runs: set[str] = set()
        self.n_req = 0
        # The reference of schedules: id -> (due_at, cron, wakeup); fired (id, due time).
        self.schedules: dict[str, tuple[float, str | None, bool]] = {}
        self.fired: set[tuple[str, float]] = set()

    # --- applying one action and checking the step -----------------------------------
    def apply(self, action: A.Action) -> None:
        before = self.state
        result = transition(before, action)
        after = result.state
        assert not (result.note or "").startswith("internal error"), result.note
        self.check_step(before, action, result.effects, after, result.note)
        self.state = after
        self.history.append(action)

    def check_step(self, before, action, effects, after, note) -> None:
        # No chat output key is ever emitted twice.
        for e in effects:
            if isinstance(e, F.KEYED_POSTS):
                assert e.key not in self.keys, f"output key {e.key} emitted twice"
                self.keys.add(e.key)

        # Duplicate deliveries and stale agent events change nothing but a counter.
        stale = isinstance(action, A.AgentEventReceived) and (
            before.run is None or action.run_id != before.run.id
        )
        duplicate = (
            not isinstance(action, A.Tick | A.OutputPosted | A.AgentEventReceived)
            and action.action_id in before.recent_action_ids
        )
        if stale or duplicate:
            assert effects == ()
            counter = "stale_drops" if stale else "duplicates"
            expected = before.model_copy(
                update={
                    "last_note": note,
                    "counters": before.counters.model_copy(
                        update={counter: getattr(before.counters, counter) + 1}
                    ),
                }
            )
            assert after == expected
            return

        self.check_phase_moves(before, action, after)

        # At most one active run: every PromptAgent opens a run, every run ends once.
        prompts = [e for e in effects if isinstance(e, F.PromptAgent)]
        assert len(prompts) <= 1
        if before.run is not None and (after.run is None or after.run.id != before.run.id):
            self.runs_ended += 1
        if prompts:
            self.runs_started += 1
            assert after.run is not None and after.run.id == prompts[0].run_id
            # Nothing is dispatched while a blocker is pending, nor while parked.
            assert after.blockers == () and not after.parked
            self.dispatched.append(after.run.prompt.id)
        assert self.runs_started - self.runs_ended == (1 if after.run is not None else 0)

        # The queue matches the reference model, in order.
        expected = self.expected_queue(before, action, after, bool(prompts))
        assert [q.id for q in after.queue] == expected

        self.check_schedules(before, action, after)
        self.check_run_end(before, action, effects)
        self.check_typing(before, after, effects)
        self.check_retry_line(before, after, effects)

        # State round-trips through JSON unchanged.
        assert ThreadState.model_validate_json(after.model_dump_json()) == after

    def check_phase_moves(self, before, action, after) -> None:
        """Every phase change is an edge of the phase table, for an event this action may
        cause; the core never even attempts a move the table lacks."""
        assert after.counters.illegal_moves == 0, after.last_note
        events = phase_events_of(action)

        def edge(src: Phase, dst: Phase, allowed: set[str]) -> None:
            assert any(PHASE_TABLE[src].get(ev) is dst for ev in allowed), (
                f"{action.kind}: {src.value} -> {dst.value} is no edge of the phase table "
                f"for {sorted(allowed)}"
            )

        src, dst = phase(before), phase(after)
        same_run = before.run is not None and after.run is not None
        same_run = same_run and before.run.id == after.run.id
        if before.run is not None and not same_run:  # the run ended (and maybe the next began)
            edge(src, Phase.IDLE, events)
            if after.run is not None:
                edge(Phase.IDLE, dst, {"dispatch"})
        elif before.run is None and after.run is not None:
            edge(Phase.IDLE, dst, {"dispatch"})
        elif src is not dst:
            edge(src, dst, events)

    def check_schedules(self, before, action, after) -> None:
        """Schedules: a due time fires at most once; nothing but a cancel, a firing or (for
        the agent's wake-ups) a user message removes one, so none is lost to a restart,
        a park, a crash or a conversation's end; a cron schedule re-arms."""
        ref = self.schedules
        if isinstance(action, A.ScheduleAdded):
            if after.counters.schedules > before.counters.schedules:
                ref[f"s{after.counters.schedules}"] = (action.due_at, action.cron, action.wakeup)
        elif isinstance(action, A.ScheduleCancelled):
            ref.pop(action.schedule_id, None)
        elif isinstance(action, A.UserMessage | A.QueueCommand):
            for sid in [sid for sid, (_, _, wakeup) in ref.items() if wakeup]:
                del ref[sid]
        elif isinstance(action, A.ScheduleDue):
            fires = action.schedule_id in ref and ref[action.schedule_id][0] == action.due_at
            assert (after.counters.schedules_fired > before.counters.schedules_fired) == fires
            if fires:
                assert (action.schedule_id, action.due_at) not in self.fired, "fired twice"
                self.fired.add((action.schedule_id, action.due_at))
                _, cron, wakeup = ref[action.schedule_id]
                nxt = action.next_due_at
                if cron is not None and nxt is not None and nxt > action.due_at:
                    ref[action.schedule_id] = (nxt, cron, wakeup)
                else:
                    del ref[action.schedule_id]
        assert {s.id: (s.due_at, s.cron, s.wakeup) for s in after.schedules} == ref

    def check_retry_line(self, before, after, effects) -> None:
        """The model API's retries: at most one status line per run, posted for the current
        run, and finalised (edited, no longer "retry N") in the step that ends the run."""
        statuses = [e for e in effects if isinstance(e, F.PostOutput) and e.kind == "status"]
        for post in statuses:
            assert post.run_id not in self.status_runs, f"second status line in {post.run_id}"
            self.status_runs.add(post.run_id)
            assert after.run is not None and post.run_id == after.run.id
            assert after.run.retry_key == post.key
        ended = before.run is not None and (after.run is None or after.run.id != before.run.id)
        if ended and before.run.retry_key is not None:
            finals = [
                e.text
                for e in effects
                if isinstance(e, F.EditOutput) and e.key == before.run.retry_key
            ]
            assert len(finals) == 1 and "— retry " not in finals[0]

    def check_typing(self, before, after, effects) -> None:
        """Typing shows only while a run works: a step that leaves the thread without a run,
        or its run interrupting, ends with typing off (an /abort or a new message turns it
        off at once, not when the agent has stopped)."""
        typing = [e.on for e in effects if isinstance(e, F.Typing)]
        quiet = after.run is None or after.run.phase is Phase.INTERRUPTING
        was_working = before.run is not None and before.run.phase is not Phase.INTERRUPTING
        if quiet and typing:
            assert typing[-1] is False
        if quiet and was_working:
            assert typing and typing[-1] is False

    def check_run_end(self, before, action, effects) -> None:
        """How a run ends: exactly one footer for a completed run; one "⚠ The turn failed"
        notice and no footer for a failed one; neither for an interrupted one. No footer
        at any other time."""
        footers = [e for e in effects if isinstance(e, F.PostOutput) and e.kind == "footer"]
        failures = [
            e
            for e in effects
            if isinstance(e, F.PostOutput) and e.text.startswith("⚠ The turn failed")
        ]
        completion = (
            isinstance(action, A.AgentEventReceived)
            and isinstance(action.event, E.TurnCompleted)
            and before.run is not None
            and action.run_id == before.run.id
        )
        if not completion:
            assert footers == [] and failures == []
            return
        ended = action.event
        if before.run.end_reason is not None:  # interrupted, aborted, timed out
            assert footers == [] and failures == []
        elif ended.is_error:
            assert footers == [] and len(failures) == 1
        else:
            assert len(footers) == 1 and failures == []

    def expected_queue(self, before, action, after, dispatched: bool) -> list[str]:
        """The reference model: the queue predicted from the action's meaning alone."""
        q = [item.id for item in before.queue]
        by_source = {item.source_message_id: item.id for item in before.queue}
        grew = after.counters.queued > before.counters.queued
        if isinstance(action, A.UserMessage | A.QueueCommand) and grew:
            self.accepted.add(action.action_id)
            if isinstance(action, A.UserMessage) and action.interrupt:
                pos = next((i for i, it in enumerate(before.queue) if it.from_queue), len(q))
                q.insert(pos, action.action_id)
            else:
                q.append(action.action_id)
        elif isinstance(action, A.UserMessage | A.QueueCommand):
            assert before.conversation is None or len(before.queue) >= QUEUE_LIMIT
        elif isinstance(action, A.ScheduleDue) and grew:
            # A due schedule takes the /queue path: appended, never ahead of anything.
            item_id = f"{action.schedule_id}@{action.action_id}"
            self.accepted.add(item_id)
            q.append(item_id)
        gone: set[str] = set()
        if isinstance(action, A.QueueCleared):
            if action.position is None:
                gone = set(q)
            elif 1 <= action.position <= len(q):
                gone = {q[action.position - 1]}
        elif isinstance(action, A.QueuedItemRemoved):
            gone = {action.item_id} & set(q)
        elif isinstance(action, A.SourceMessageDeleted) and action.source_message_id in by_source:
            gone = {by_source[action.source_message_id]}
        elif isinstance(action, A.ConversationEnded) and before.conversation is not None:
            gone = set(q)
        self.removed |= gone
        q = [i for i in q if i not in gone]
        if isinstance(action, A.ModelChanged) and before.run is not None and before.conversation:
            q.insert(0, before.run.prompt.id)  # the interrupted prompt is retried first
        if dispatched:
            assert q and q[0] == after.run.prompt.id, "dispatch must take the queue head"
            q = q[1:]
        return q

    # --- rules -------------------------------------------------------------------------
    @initialize(agent=st.sampled_from(["claude", "codex"]))
    def begin(self, agent):
        """Threads mostly have a conversation: start one, so that most steps exercise runs and
        their phases (``end`` and the refused starts still reach the other states)."""
        self.apply(self.s.start(agent, "app", "/work/app"))

    @rule(agent=st.sampled_from(["claude", "codex"]), where=st.sampled_from(["ok", "out", "gone"]))
    def start(self, agent, where):
        resolved = {"ok": "/work/app", "out": "/etc", "gone": None}[where]
        self.apply(self.s.start(agent, "app", resolved))

    @rule(session=st.sampled_from(["s1", "s2"]))
    def resume(self, session):
        self.apply(self.s.resume(session, workdir="app", resolved="/work/app"))

    @rule()
    def end(self):
        self.apply(self.s.end())

    @rule(text=texts, interrupt=st.booleans(), with_source=st.booleans())
    def user(self, text, interrupt, with_source):
        source = f"m{self.s._n + 1}" if with_source else None
        self.apply(self.s.user(text, interrupt=interrupt, source=source))

    @rule(text=texts)
    def queue(self, text):
        self.apply(self.s.queue(text, source=f"m{self.s._n + 1}"))

    @rule(
        after=st.sampled_from([0.0, 30.0, 3600.0]),
        cron=st.sampled_from([None, "*/5 * * * *"]),
        wakeup=st.booleans(),
    )
    def add_schedule(self, after, cron, wakeup):
        self.apply(self.s.schedule("scheduled", self.s.now + after, cron=cron, wakeup=wakeup))

    @rule(data=st.data(), rearm=st.booleans(), stale=st.booleans())
    def schedule_due(self, data, rearm, stale):
        """The timer (or a restart's first scan, or a late second delivery) says one is due."""
        known = [(s.id, s.due_at) for s in self.state.schedules] or [("s1", 0.0)]
        sid, due_at = data.draw(st.sampled_from(known))
        if stale:
            due_at -= 300.0  # a delivery for a time that already fired
        nxt = due_at + 300.0 if rearm else None
        self.apply(self.s.due(sid, due_at, nxt))

    @rule(level=st.sampled_from(["text", "tools", "all"]))
    def verbosity(self, level):
        self.apply(self.s.verbosity(level))

    @rule(data=st.data())
    def cancel_schedule(self, data):
        ids = [s.id for s in self.state.schedules] + ["s99"]
        self.apply(self.s.cancel_schedule(data.draw(st.sampled_from(ids))))

    @rule()
    def abort(self):
        self.apply(self.s.abort())

    @rule(position=st.none() | st.integers(0, QUEUE_LIMIT + 1))
    def clear(self, position):
        self.apply(self.s.clear(position))

    @rule(data=st.data())
    def remove(self, data):
        ids = [q.id for q in self.state.queue] + ["nope"]
        self.apply(self.s.remove(data.draw(st.sampled_from(ids))))

    @rule(data=st.data(), delete=st.booleans())
    def edit_or_delete_source(self, data, delete):
        sources = [q.source_message_id for q in self.state.queue if q.source_message_id]
        source = data.draw(st.sampled_from(sources + ["m-unknown"]))
        self.apply(self.s.deleted(source) if delete else self.s.edited(source, "edited"))

    @rule(where=st.sampled_from(["/work/lib", "/tmp", None]))
    def workdir(self, where):
        self.apply(self.s.workdir("lib", where))

    @rule(name=st.sampled_from(["fast", "smart"]))
    def model(self, name):
        self.apply(self.s.model(name))

    @rule()
    def status(self):
        self.apply(self.s.status())

    def _current(self) -> str | None:
        return self.state.run.id if self.state.run else None

    @rule(
        event=st.sampled_from(
            [
                E.TextDelta(text="a"),
                E.TextDelta(text="b", block="2"),
                E.ThinkingDelta(text="hmm"),
                E.ToolStarted(tool_id="t1", name="Bash", display_name="Bash"),
                E.ToolFinished(tool_id="t1", result="ok"),
                E.ToolFinished(tool_id="t9", result="x" * 900, is_error=True),
                E.SessionStarted(session_id="s1"),
                E.AgentError(message="overloaded", retryable=True),
                E.AgentError(message="HTTP 529", retryable=True, attempt=2, max_retries=3),
                E.AgentError(message="bad request"),
                E.TurnCompleted(session_id="s1", cost_usd=0.1),
                E.TurnCompleted(is_error=True, error="boom"),
                E.TurnAborted(reason="exited", exit_code=1, stderr_tail="trace"),
            ]
        ),
        session=st.sampled_from([None, "s1", "s2"]),
    )
    def agent_event(self, event, session):
        self.apply(self.s.agent(self._current(), event, session_id=session))

    @rule(kind=st.sampled_from(["permission", "question"]))
    def agent_asks(self, kind):
        self.n_req += 1
        rid = f"q{self.n_req}"
        self.request_ids.append(rid)
        run = self._current()
        self.apply(
            self.s.permission(run, rid) if kind == "permission" else self.s.question(run, rid)
        )

    @rule(data=st.data(), allow=st.booleans())
    def answer(self, data, allow):
        rid = data.draw(st.sampled_from(self.request_ids + ["q-none"]))
        self.apply(self.s.allow(rid, allow) if allow else self.s.answer(rid, "a"))

    @rule(stale=st.sampled_from(["r0", "r1", "r2", "r-old", None]), text=texts)
    def stale_event(self, stale, text):
        if self.state.run is not None and stale == self.state.run.id:
            stale = "r-old"
        self.apply(self.s.text(stale, text))

    @precondition(lambda self: self.history)
    @rule(data=st.data())
    def duplicate_delivery(self, data):
        self.apply(data.draw(st.sampled_from(self.history)))

    @rule(key=st.sampled_from(["t1/r1/0", "t1/reply/a1"]))
    def output_posted(self, key):
        self.apply(self.s.posted(key, "123"))

    @rule(effect=st.sampled_from(["prompt_agent", "start_agent", "post_output"]))
    def effect_failed(self, effect):
        self.apply(self.s.failed(effect))

    @rule(session=st.sampled_from([None, "s1"]))
    def connected(self, session):
        self.apply(self.s.connected(session))

    @rule(crashed=st.booleans())
    def exited(self, crashed):
        self.apply(self.s.exited(crashed=crashed))

    @rule(after=st.sampled_from([0.5, 11.0, 700.0]))
    def tick(self, after):
        self.apply(self.s.tick(after))

    @rule()
    def recovered(self):
        self.apply(self.s.recovered())

    @rule(reason=st.sampled_from(["shutting down", "idle"]))
    def parked(self, reason):
        self.apply(self.s.parked(reason))

    # --- invariants and the end ---------------------------------------------------------
    @invariant()
    def prompts_never_lost(self):
        queued = {q.id for q in self.state.queue}
        running = {self.state.run.prompt.id} if self.state.run else set()
        dispatched = set(self.dispatched)
        # Every accepted prompt is dispatched, explicitly removed by the user, or queued.
        assert self.accepted <= dispatched | self.removed | queued
        assert queued.isdisjoint(self.removed)
        assert running <= dispatched
        # Only /model retries a prompt; otherwise each is dispatched once.
        retried = sum(1 for a in self.history if isinstance(a, A.ModelChanged))
        assert len(self.dispatched) - len(dispatched) <= retried

    @invariant()
    def a_parked_thread_has_no_run(self):
        if self.state.parked:
            assert self.state.run is None

    @invariant()
    def phase_and_blockers_agree(self):
        run = self.state.run
        if run is None:
            assert self.state.blockers == ()
        else:
            assert run.phase is not Phase.IDLE
            assert all(b.run_id == run.id for b in self.state.blockers)

    def teardown(self):
        """Drive the thread to the end: every queued prompt is dispatched in turn."""
        if self.state.conversation is None:
            return
        if self.state.parked:
            self.apply(self.s.recovered())  # what a restart does
        for _ in range(QUEUE_LIMIT + 3):
            for b in self.state.blockers:
                self.apply(
                    self.s.allow(b.request_id)
                    if b.kind == "permission"
                    else self.s.answer(b.request_id, "a")
                )
            if self.state.run is not None:
                self.apply(self.s.done(self.state.run.id, session_id=None))
        assert self.state.run is None and self.state.queue == ()
        assert self.accepted <= set(self.dispatched) | self.removed


TestThreadMachine = ThreadMachine.TestCase
# The harness is the core's proof: under the CI profile it runs 1,000 interleavings of up to
# 60 steps (about 60,000 checked transitions; ~30 s), more than the suite-wide 300.
if getattr(settings, "_current_profile", None) == "ci":  # hypothesis has no public getter
    TestThreadMachine.settings = settings(settings.default, max_examples=1000)
