"""The property-based harness: arbitrary interleavings of every action against ``transition``.

Hypothesis drives a ``RuleBasedStateMachine`` through user messages, ``/queue``, aborts,
queue edits, conversation changes, agent events of the current run and of stale runs,
permission and question answers, effect feedback (also duplicated), crashes, ticks and
restarts, and steered messages (``/steer``) with the agent taking, refusing or never
answering them, whatever it declared it can do. A small reference model of the queue
predicts, for each step, which prompts are queued and in what order, and a reference of the
phase events each action may cause says which phase changes are allowed (each must be an
edge of the phase table); a reference of the thread's schedules says which exist and checks
that each due time fires at most once and none is lost (restarts, parking, crashes keep
them); after every step the invariants of ``docs/state-machine.md`` are checked. At the end
the thread is driven to completion to show that every accepted prompt is eventually
dispatched.
"""

from __future__ import annotations

import pytest
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
from threadspindle.runtime.core.transitions import (
    NOT_DEDUPED,
    general_transition,
    transition,
)
from threadspindle.runtime.core.transitions_schedule import MIN_WAKEUP_S, WAKEUP_CHAIN_LIMIT
from threadspindle.runtime.core.workspace_model import WorkspacePolicy
from threadspindle.testkit.thread_script import ThreadScript

ROOT = "/work"
QUEUE_LIMIT = 6
_SHOWN = (F.PostOutput, F.AppendOutput)
texts = st.sampled_from(["hi", "fix the bug", "TOOLTEST", "x" * 300, ""])


def phase_events_of(action: A.Action) -> set[str]:
    """The reference for phase moves: the phase table's events an action may cause, from its
    meaning alone (docs/state-machine.md); any step may end with a ``dispatch`` besides."""
    if isinstance(action, A.AgentEventReceived):
        ends = isinstance(action.event, E.TurnCompleted | E.TurnAborted)
        return {"turn_end"} if ends else {"agent_event"}
    if isinstance(action, A.UserMessage):
        return {"interrupt"} if action.interrupt else set()
    if isinstance(action, A.SteerCommand):
        return {"interrupt"}  # an agent that cannot steer: interrupt and resend
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
        # Workspaces on: a checkpoint before each prompt, `!` for u1 (docs/workspaces.md).
        workspace = WorkspacePolicy(checkpoints=True, footer_changes=True, shell_users=("u1",))
        policy = Policy(queue_limit=QUEUE_LIMIT, allowed_roots=(ROOT,), workspace=workspace)
        self.state = ThreadState.new("t1", policy)
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
        self.wakeup_chain = 0  # the agent's wake-ups since a person wrote
        self.fired: set[tuple[str, float]] = set()
        self.steered: set[str] = set()  # steers handed to a running turn (SteerAgent)
        self.taken: list[str] = []  # steers a run took (SteerTaken of a pending one)

    # --- applying one action and checking the step -----------------------------------
    def apply(self, action: A.Action) -> None:
        before = self.state
        result = transition(before, action)
        after = result.state
        assert not (result.note or "").startswith("internal error"), result.note
        if isinstance(action, A.AgentEventReceived):
            # The delta fast path (``continue_delta``) gives what the general path gives,
            # to the byte (logs, snapshots) and the fields set.
            general = general_transition(before, action)
            assert result.model_dump_json() == general.model_dump_json()
            assert after.__pydantic_fields_set__ == general.state.__pydantic_fields_set__
            if after.run is not None and general.state.run is not None:
                fields = after.run.__pydantic_fields_set__
                assert fields == general.state.run.__pydantic_fields_set__
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
            not isinstance(action, A.Tick | A.OutputPosted | A.AgentEventReceived | A.ShellOutput)
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
            # Nothing is dispatched while a blocker is pending, nor while parked, nor while
            # a workspace job changes the workdir; a checkpoint goes right before it.
            assert after.blockers == () and not after.parked
            assert after.workspace.job is None
            at = list(effects).index(prompts[0])
            assert at > 0 and effects[at - 1] == F.CheckpointWorkdir(
                run_id=prompts[0].run_id, workdir=prompts[0].workdir
            )
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
                due = action.due_at
                if action.wakeup:
                    # A minute ahead at the soonest; a chain held to its limit.
                    assert self.wakeup_chain < WAKEUP_CHAIN_LIMIT
                    due = max(due, action.at + MIN_WAKEUP_S)
                    self.wakeup_chain += 1
                ref[f"s{after.counters.schedules}"] = (due, action.cron, action.wakeup)
        elif isinstance(action, A.ScheduleCancelled):
            ref.pop(action.schedule_id, None)
        elif isinstance(action, A.UserMessage | A.QueueCommand):
            self.wakeup_chain = 0
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
        assert after.counters.wakeups_unattended == self.wakeup_chain

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

    @staticmethod
    def full(state) -> bool:
        """The queue's limit counts the steers the run may still hand back to it."""
        steers = len(state.run.steers) if state.run is not None else 0
        return len(state.queue) + steers >= QUEUE_LIMIT

    @staticmethod
    def empty(action) -> bool:
        """A prompt with nothing in it (no visible text, no attachment): always refused,
        and it interrupts nothing (``check_step`` then sees no phase move)."""
        return not action.attachments and not action.text.strip()

    def expected_queue(self, before, action, after, dispatched: bool) -> list[str]:
        """The reference model: the queue predicted from the action's meaning alone."""
        q = [item.id for item in before.queue]
        by_source = {item.source_message_id: item.id for item in before.queue}
        grew = after.counters.queued > before.counters.queued
        if isinstance(action, A.SteerCommand):
            if after.counters.steers > before.counters.steers:
                # Handed to the running turn: pending in the run, not queued.
                self.accepted.add(action.action_id)
                self.steered.add(action.action_id)
                assert not grew and after.run is not None
                assert after.run.steers[-1].id == action.action_id
            elif grew:  # no run, one being interrupted, or an agent that cannot steer
                self.accepted.add(action.action_id)
                pos = next((i for i, it in enumerate(before.queue) if it.from_queue), len(q))
                q.insert(pos, action.action_id)
            else:  # refused: no text, no conversation, or the queue (with steers) is full
                assert self.empty(action) or before.conversation is None or self.full(before)
        elif isinstance(action, A.CompactRequested):
            if grew:  # queued like /queue: never interrupts
                self.accepted.add(action.action_id)
                q.append(action.action_id)
            else:
                caps = before.capabilities
                assert (
                    before.conversation is None
                    or caps is None
                    or not caps.compact
                    or self.full(before)
                )
        elif isinstance(action, A.UserMessage | A.QueueCommand) and grew:
            self.accepted.add(action.action_id)
            if isinstance(action, A.UserMessage) and action.interrupt:
                pos = next((i for i, it in enumerate(before.queue) if it.from_queue), len(q))
                q.insert(pos, action.action_id)
            else:
                q.append(action.action_id)
        elif isinstance(action, A.UserMessage | A.QueueCommand):
            assert self.empty(action) or before.conversation is None or self.full(before)
        elif isinstance(action, A.ScheduleDue) and grew:
            # A due schedule takes the /queue path: appended, never ahead of anything.
            item_id = f"{action.schedule_id}@{action.action_id}"
            self.accepted.add(item_id)
            q.append(item_id)
        # A steer the run gives back (refused, its effect failed) goes to the queue head;
        # so do those left when the run ends. A taken one leaves the run for good.
        pending = [i.id for i in before.run.steers] if before.run is not None else []
        if isinstance(action, A.AgentEventReceived) and before.run is not None:
            if action.run_id == before.run.id and isinstance(action.event, E.SteerTaken):
                if action.event.steer_id in pending:
                    self.taken.append(action.event.steer_id)
                    pending.remove(action.event.steer_id)
            if action.run_id == before.run.id and isinstance(action.event, E.SteerRefused):
                if action.event.steer_id in pending:
                    q.insert(0, action.event.steer_id)
                    pending.remove(action.event.steer_id)
        if isinstance(action, A.EffectFailed) and action.effect == "steer_agent" and pending:
            back = [i for i in pending if action.key == f"t1/steer/{i}"]
            q = back + q
            pending = [i for i in pending if i not in back]
        run_ended = before.run is not None and (after.run is None or after.run.id != before.run.id)
        if run_ended:
            q = pending + q
        else:
            left = [i.id for i in after.run.steers] if after.run is not None else []
            added = [action.action_id] if action.action_id in self.steered else []
            assert left == [i for i in pending if i not in added] + added
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
    @initialize(
        agent=st.sampled_from(["claude", "codex"]), steer=st.booleans(), compact=st.booleans()
    )
    def begin(self, agent, steer, compact):
        """Threads mostly have a conversation: start one, so that most steps exercise runs and
        their phases (``end`` and the refused starts still reach the other states); its
        agent connects declaring whether it can steer."""
        self.apply(self.s.start(agent, "app", "/work/app"))
        self.apply(self.s.connected(None, steer=steer, compact=compact))

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
    def compact(self):
        self.apply(self.s.compact())

    @rule(question=st.sampled_from([None, "why?"]))
    def fork(self, question):
        """/fork and /btw: a new thread is asked for; this thread's run and queue go on."""
        before = self.state
        self.apply(self.s.fork(question))
        if before.run is not None:  # (a parked thread it wakes may dispatch its queue head)
            assert self.state.run == before.run and self.state.queue == before.queue

    @rule()
    def forked(self):
        self.apply(self.s.forked("t1/fork/a1", "t2"))

    @rule(text=texts)
    def steer(self, text):
        self.apply(self.s.steer(text, source=f"m{self.s._n + 1}"))

    @rule(data=st.data(), taken=st.booleans())
    def steer_answer(self, data, taken):
        """The agent takes (or refuses) a pending steer, or one it never had."""
        pending = [i.id for i in self.state.run.steers] if self.state.run else []
        steer_id = data.draw(st.sampled_from(pending + ["s-none"]))
        event = E.SteerTaken(steer_id=steer_id) if taken else E.SteerRefused(steer_id=steer_id)
        self.apply(self.s.agent(self._current(), event))

    @rule(text=texts, answer=st.sampled_from(["taken", "refused", "turn ends", "exit"]))
    def steer_while_running(self, text, answer):
        """A steer into a running turn, then what the agent does with it."""
        if self.state.run is not None and self.state.run.phase is Phase.DISPATCHING:
            self.apply(self.s.text(self.state.run.id, "working"))
        self.apply(self.s.steer(text))
        run, steer_id = self._current(), f"a{self.s._n}"
        if answer == "taken":
            self.apply(self.s.agent(run, E.SteerTaken(steer_id=steer_id)))
        elif answer == "refused":
            self.apply(self.s.agent(run, E.SteerRefused(steer_id=steer_id, reason="over")))
        elif answer == "turn ends":
            self.apply(self.s.done(run, session_id=None))
        else:
            self.apply(self.s.exited())

    @rule(data=st.data())
    def steer_failed(self, data):
        pending = [i.id for i in self.state.run.steers] if self.state.run else []
        steer_id = data.draw(st.sampled_from(pending + ["s-none"]))
        self.apply(self.s.failed("steer_agent", key=f"t1/steer/{steer_id}"))

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

    @rule(
        pieces=st.lists(
            st.sampled_from(
                [
                    E.TextDelta(text="a"),
                    E.TextDelta(text="b c "),
                    E.TextDelta(text="d", block="2"),
                    E.ThinkingDelta(text="hm"),
                ]
            ),
            min_size=2,
            max_size=6,
        ),
        session=st.sampled_from([None, "s1"]),
    )
    def delta_burst(self, pieces, session):
        """Deltas an agent's reader handed over together, merged as the runtime merges them
        (runtime/live/listener.py, with the core's ``continues_delta``/``joined_delta``):
        each run of deltas that continue one another is one action. It must show what the
        deltas one by one show, and move the phase the same way."""
        merged: list[tuple[E.TextDelta | E.ThinkingDelta, list[str]]] = []
        for ev in pieces:
            if merged and E.continues_delta(merged[-1][0], ev):
                merged[-1][1].append(ev.text)
            else:
                merged.append((ev, [ev.text]))
        run = self._current()
        for first, texts in merged:
            action = self.s.agent(run, E.joined_delta(first, texts), session_id=session)
            one_by_one = self.state
            shown_apart = []
            for n, text in enumerate(texts):
                single = action.replace(
                    action_id=f"{action.action_id}.{n}", event=first.replace(text=text)
                )
                result = transition(one_by_one, single)
                one_by_one = result.state
                shown_apart += [e.text for e in result.effects if isinstance(e, _SHOWN)]
            before = self.state
            self.apply(action)
            shown = [e.text for e in transition(before, action).effects if isinstance(e, _SHOWN)]
            assert "".join(shown) == "".join(shown_apart)
            assert phase(self.state) == phase(one_by_one)

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
        # The core remembers the ids of the thread's last RECENT_ACTIONS deduplicated
        # actions (bounded memory, docs/state-machine.md): a duplicate is dropped within
        # that window; the live system keeps later copies away from the core (catch-up, the
        # runner's seen ids). A 100-step run redelivering an action 64 commands later
        # started its conversation again.
        window = set(self.state.recent_action_ids)
        kept = [a for a in self.history if isinstance(a, NOT_DEDUPED) or a.action_id in window]
        self.apply(data.draw(st.sampled_from(kept or self.history[-1:])))

    @rule(key=st.sampled_from(["t1/r1/0", "t1/reply/a1"]))
    def output_posted(self, key):
        self.apply(self.s.posted(key, "123"))

    @rule(effect=st.sampled_from(["prompt_agent", "start_agent", "post_output"]))
    def effect_failed(self, effect):
        self.apply(self.s.failed(effect))

    @rule(
        session=st.sampled_from([None, "s1"]),
        steer=st.sampled_from([None, True, False]),
        compact=st.booleans(),
        fork=st.booleans(),
    )
    def connected(self, session, steer, compact, fork):
        self.apply(self.s.connected(session, steer=steer, compact=compact, fork=fork))

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

    # --- workspaces (runtime.core.transitions_workspace) --------------------------------
    @rule(
        op=st.sampled_from(
            [
                "undo",
                "redo",
                "diff",
                "worktree_new",
                "worktree_list",
                "worktree_remove",
                "worktree_merge",
            ]
        ),
        name=st.sampled_from(["feat", "wt2"]),
    )
    def workspace_command(self, op, name):
        base = self.s._base()
        self.apply(A.WorkspaceCommand(**base, op=op, author_id="u1", name=name))

    @rule(author=st.sampled_from(["u1", "u2"]), command=st.sampled_from(["ls", "", "sleep 9"]))
    def shell(self, author, command):
        self.apply(A.ShellRequested(**self.s._base(), author_id=author, command=command))

    @rule(current=st.booleans(), ok=st.booleans())
    def checkpoint_taken(self, current, ok):
        run_id = self._current() if current else "r-old"
        commit = f"c-{run_id}" if ok else None
        ref = f"refs/spindle/t1/{run_id}" if ok else None
        self.apply(
            A.CheckpointTaken(
                **self.s._base(), run_id=run_id or "r0", workdir=ROOT, commit=commit, ref=ref
            )
        )

    @rule(
        pending=st.booleans(),
        ok=st.booleans(),
        op=st.sampled_from(["undo", "redo", "diff", "worktree_new", "worktree_merge", "changes"]),
        path=st.sampled_from(["/work/wt", "/elsewhere/wt"]),
    )
    def job_finished(self, pending, ok, op, path):
        job = self.state.workspace.job
        if pending and job is not None:
            job_id, op = job.id, job.op
        else:
            job_id = "job-other"
        checkpoints = self.state.workspace.checkpoints
        run_id = checkpoints[-1].run_id if checkpoints else None
        self.apply(
            A.WorkspaceJobFinished(
                **self.s._base(),
                job_id=job_id,
                op=op,
                ok=ok,
                text="done",
                path=path,
                branch="spindle/wt",
                commit="saved",
                run_id=run_id,
                edit_key="t1/r1/0",
            )
        )

    @rule(current=st.booleans(), end=st.sampled_from([None, "exited", "timed_out", "aborted"]))
    def shell_feedback(self, current, end):
        shell = self.state.workspace.shell
        shell_id = shell.id if current and shell is not None else "sh-old"
        if end is None:
            self.apply(A.ShellOutput(**self.s._base(), shell_id=shell_id, text="out\n"))
        else:
            self.apply(A.ShellFinished(**self.s._base(), shell_id=shell_id, outcome=end))

    # --- invariants and the end ---------------------------------------------------------
    @invariant()
    def workspace_jobs_and_shells_are_consistent(self):
        ws = self.state.workspace
        if ws.job is not None:
            changing = ("undo", "redo", "worktree_new", "worktree_merge", "worktree_remove")
            assert ws.job.op in changing
        # Read-only jobs are tracked apart, each once, and never hold the queue.
        assert all(r.op in ("diff", "worktree_list") for r in ws.reads)
        assert len({r.id for r in ws.reads}) == len(ws.reads) <= 8
        # Checkpoints: undone ones form the tail (undo takes the last, redo the first undone).
        undone = [c.undone is not None for c in ws.checkpoints]
        assert undone == sorted(undone)

    @invariant()
    def prompts_never_lost(self):
        queued = {q.id for q in self.state.queue}
        running = {self.state.run.prompt.id} if self.state.run else set()
        dispatched = set(self.dispatched)
        pending = {i.id for i in self.state.run.steers} if self.state.run else set()
        taken = set(self.taken)
        # Every accepted prompt is dispatched, explicitly removed by the user, or queued;
        # a steered one may instead be pending in the run or taken by it.
        assert self.accepted <= dispatched | self.removed | queued | pending | taken
        # A steered message is never sent twice: taken at most once, and never both taken
        # and dispatched; pending in the run and queued never both.
        assert len(self.taken) == len(taken)
        assert taken.isdisjoint(dispatched)
        assert pending.isdisjoint(queued) and pending.isdisjoint(taken)
        assert queued.isdisjoint(self.removed)
        assert running <= dispatched
        # Only /model retries a prompt; otherwise each is dispatched once.
        retried = sum(1 for a in self.history if isinstance(a, A.ModelChanged))
        assert len(self.dispatched) - len(dispatched) <= retried

    @invariant()
    def a_run_is_stopped_once(self):
        # An interrupt and an /abort count when they stop a run, never again for a run
        # already stopping (three /abort made "aborted 3" of one run).
        c = self.state.counters
        assert c.interrupts + c.aborts <= c.runs

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
        job = self.state.workspace.job
        if job is not None:  # the workspace job ends (failing): the queue goes on
            self.apply(
                A.WorkspaceJobFinished(
                    **self.s._base(), job_id=job.id, op=job.op, ok=False, text="failed"
                )
            )
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
        assert self.accepted <= set(self.dispatched) | self.removed | set(self.taken)


TestThreadMachine = ThreadMachine.TestCase
# ~30 s alone; several times that on a loaded 2-core machine (pytest-xdist, other work): the
# suite-wide 120 s limit is for hangs, and this one does not hang.
pytestmark = pytest.mark.timeout(900)
# The harness is the core's proof: under the CI profile it runs 1,000 interleavings of up to
# 60 steps (about 60,000 checked transitions; ~30 s), more than the suite-wide 300.
if getattr(settings, "_current_profile", None) == "ci":  # hypothesis has no public getter
    TestThreadMachine.settings = settings(settings.default, max_examples=1000)
