"""The thread state machine: ``transition(state, action) -> Transition``.

Theory of operation
-------------------
Everything that happens to a chat thread is an ``Action``; this module decides, for one
state and one action, the next state and the effects the world should see. It is the only
place where behaviour is decided, and it keeps three rules:

* **Pure.** No I/O, no clock, no randomness. Time comes in ``action.at``; ids come in
  ``action.action_id`` or are derived from counters (run ``r7``, output ``<thread>/r7/3``),
  so replaying a log gives the same effects byte for byte.
* **Total.** It never raises. An action that makes no sense now (a stale agent event, an
  answer to a request that is gone, a duplicate delivery) is recorded: a counter moves and
  ``Transition.note`` says why; nothing else changes. A bug inside a handler is caught and
  recorded the same way, so one odd input can never kill a thread's actor.
* **Run phases come from the table** in ``runtime.phase_table``; the guards in
  ``runtime.guards`` are derived from the state, never stored.

After every action the queue is drained: while ``can_dispatch_next`` holds, the head of the
queue becomes the new run. That single drain point is what makes "every prompt is
eventually dispatched" easy to see.
"""

from __future__ import annotations

from collections.abc import Callable

from runtime import actions as A
from runtime import agent_events as E
from runtime import effects as F
from runtime.frozen import Frozen
from runtime.guards import can_dispatch_next, is_busy, queue_is_full
from runtime.model import (
    AgentStatus,
    Blocker,
    Conversation,
    OpenPart,
    Phase,
    QueueItem,
    Run,
    ThreadState,
)
from runtime.phase_table import next_phase

__all__ = ["Transition", "transition"]

RECENT_ACTIONS = 64  # how many action ids are remembered to drop duplicate deliveries
RECENT_KEYS = 256  # how many emitted output keys the state keeps
TOOL_RESULT_CHARS = 600  # a tool card shows at most this much of the result
MARKER_CHARS = 200


class Transition(Frozen):
    state: ThreadState
    effects: tuple[F.Effect, ...] = ()
    note: str | None = None


class _Step:
    """The mutable scratchpad of one transition; frozen models are rebuilt as it goes."""

    def __init__(self, state: ThreadState, action: A.ActionBase) -> None:
        self.state = state
        self.action = action
        self.effects: list[F.Effect] = []
        self.note: str | None = None
        self._counts: dict[str, int] = {}

    # state helpers -----------------------------------------------------------------------
    def set(self, **update: object) -> None:
        self.state = self.state.replace(**update)

    def set_run(self, **update: object) -> None:
        assert self.state.run is not None
        self.set(run=self.state.run.replace(**update))

    def count(self, name: str, n: int = 1) -> None:
        self._counts[name] = self._counts.get(name, 0) + n

    def emit(self, effect: F.Effect) -> None:
        self.effects.append(effect)

    def record(self, reason: str, counter: str = "ignored") -> None:
        """The action made no sense (or was refused): count it and say why."""
        self.count(counter)
        self.note = reason

    def finish(self) -> Transition:
        state = self.state
        update: dict[str, object] = {}
        if self._counts:
            counters = state.counters
            update["counters"] = counters.replace(
                **{k: getattr(counters, k) + v for k, v in self._counts.items()}
            )
        new_keys = tuple(e.key for e in self.effects if isinstance(e, F.KEYED_POSTS))
        if new_keys:
            update["emitted_keys"] = (state.emitted_keys + new_keys)[-RECENT_KEYS:]
        if state.last_note != self.note:
            update["last_note"] = self.note
        if update:
            state = state.replace(**update)
        return Transition.model_construct(state=state, effects=tuple(self.effects), note=self.note)

    # output helpers ----------------------------------------------------------------------
    @property
    def thread(self) -> str:
        return self.state.thread_id

    def reply(self, text: str, *, ephemeral: bool = False, buttons: tuple = ()) -> None:
        self.count("replies")
        self.emit(
            F.ReplyToCommand(
                key=f"{self.thread}/reply/{self.action.action_id}",
                action_id=self.action.action_id,
                text=text,
                ephemeral=ephemeral,
                buttons=buttons,
            )
        )

    def new_run_key(self) -> str:
        run = self.state.run
        assert run is not None
        key = f"{self.thread}/{run.id}/{run.parts}"
        self.set_run(parts=run.parts + 1)
        return key

    def post(self, kind: F.OutputKind, text: str) -> str:
        key = self.new_run_key()
        self.emit(F.PostOutput(key=key, kind=kind, text=text, run_id=self.state.run.id))
        return key

    def seal_open_part(self) -> None:
        run = self.state.run
        if run is not None and run.open_part is not None:
            self.emit(F.SealOutput(key=run.open_part.key))
            self.set_run(open_part=None)


# --- shared moves ----------------------------------------------------------------------


def _move(step: _Step, event: str) -> bool:
    """Apply a phase move from the table; False (and nothing changed) if it has none."""
    current = step.state.run.phase if step.state.run is not None else Phase.IDLE
    target = next_phase(current, event)
    if target is None:
        return False
    if step.state.run is not None and target is not Phase.IDLE and target is not current:
        step.set_run(phase=target)
    return True


def _dismiss_blockers(step: _Step, outcome: str, *, answer_agent: bool) -> None:
    """Close every pending prompt; deny/dismiss it to the agent when it still waits."""
    for b in step.state.blockers:
        if answer_agent:
            if b.kind == "permission":
                step.emit(F.AnswerPermission(request_id=b.request_id, allow=False))
            else:
                step.emit(F.AnswerQuestion(request_id=b.request_id, answer=None))
        step.emit(F.DismissPrompt(key=b.key, request_id=b.request_id, outcome=outcome))
    step.set(blockers=())


def _interrupt(step: _Step, reason: str) -> None:
    """Ask the agent to end the active run in-band; the run gets no footer."""
    run = step.state.run
    assert run is not None
    if run.phase is not Phase.INTERRUPTING:
        step.seal_open_part()
        step.emit(F.InterruptAgent(run_id=run.id))
        step.set_run(interrupt_at=step.action.at)
    if run.end_reason is None:
        step.set_run(end_reason=reason)
    _move(step, "interrupt")


def _end_run(step: _Step, event: str) -> None:
    """The active run is over: close its outputs and prompts, stop typing."""
    run = step.state.run
    assert run is not None
    _move(step, event)
    step.seal_open_part()
    _dismiss_blockers(step, "Expired: the run ended.", answer_agent=False)
    step.emit(F.Typing(on=False))
    step.set(run=None, last_prompt=run.prompt)


def _workdir_problem(step: _Step, requested: str, resolved: str | None) -> str | None:
    """Why a workdir is refused, or None. ``resolved`` is the real path from ingress, so
    ``..`` and symlinks pointing out of the allowed roots are judged by where they land."""
    if resolved is None:
        return f"Workdir {requested!r} does not exist."
    roots = step.state.policy.allowed_roots
    for root in roots:
        root = root.rstrip("/") or "/"
        if resolved == root or resolved.startswith(root + "/") or root == "/":
            return None
    allowed = ", ".join(roots) if roots else "(none configured)"
    return f"Workdir {requested!r} ({resolved}) is outside the allowed roots: {allowed}."


def _start_agent(step: _Step) -> None:
    conv = step.state.conversation
    assert conv is not None
    step.emit(
        F.StartAgent(
            agent=conv.agent,
            workdir=conv.workdir,
            session_id=conv.session_id,
            model=conv.model,
            system_instruction=conv.system_instruction,
        )
    )
    step.set(agent_status=AgentStatus.STARTING)


def _restart_agent(step: _Step, reason: str) -> None:
    if step.state.agent_status is not AgentStatus.STOPPED:
        step.emit(F.StopAgent(reason=reason))
    _start_agent(step)


# --- user ingress ----------------------------------------------------------------------


def _enqueue(step: _Step, item: QueueItem, *, interrupt: bool, confirm: bool) -> None:
    state = step.state
    if state.conversation is None:
        step.reply(
            "No conversation in this thread: start one with /claude start "
            "(or /codex, /gemini, /opencode start).",
            ephemeral=True,
        )
        step.record("prompt without a conversation", "rejected")
        return
    if queue_is_full(state):
        step.reply(
            f"The queue is full ({state.policy.queue_limit} prompts): this prompt was "
            "not queued. Wait for the queue to drain or /clear-queue.",
            ephemeral=True,
        )
        step.record("queue full", "rejected")
        return
    if interrupt:
        # A plain message goes ahead of the /queue items but behind earlier plain ones.
        pos = next((i for i, q in enumerate(state.queue) if q.from_queue), len(state.queue))
        step.set(queue=state.queue[:pos] + (item,) + state.queue[pos:])
        if state.blockers:
            _dismiss_blockers(step, "Dismissed: a new message arrived.", answer_agent=True)
        if state.run is not None:
            if state.run.phase is not Phase.INTERRUPTING:
                step.count("interrupts")
            _interrupt(step, "interrupted")
    else:
        step.set(queue=state.queue + (item,))
    step.count("queued")
    if confirm:
        if can_dispatch_next(step.state) and step.state.queue[0].id == item.id:
            step.reply("Sending now.", ephemeral=True)
        else:
            position = [q.id for q in step.state.queue].index(item.id) + 1
            step.reply(
                f"Queued (position {position}).",
                buttons=(F.Button(label="Remove from queue", action=f"remove_queued:{item.id}"),),
            )


def _on_user_message(step: _Step, a: A.UserMessage) -> None:
    item = QueueItem(
        id=a.action_id,
        author_id=a.author_id,
        author_name=a.author_name,
        text=a.text,
        attachments=a.attachments,
        source_message_id=a.source_message_id,
        from_queue=not a.interrupt,
        queued_at=a.at,
    )
    _enqueue(step, item, interrupt=a.interrupt, confirm=not a.interrupt)


def _on_queue_command(step: _Step, a: A.QueueCommand) -> None:
    item = QueueItem(
        id=a.action_id,
        author_id=a.author_id,
        author_name=a.author_name,
        text=a.text,
        attachments=a.attachments,
        source_message_id=a.source_message_id,
        from_queue=True,
        queued_at=a.at,
    )
    _enqueue(step, item, interrupt=False, confirm=True)


def _on_abort(step: _Step, a: A.AbortRequested) -> None:
    if step.state.run is None:
        step.reply("Nothing to abort: no run is active.", ephemeral=True)
        step.record("abort while idle")
        return
    if step.state.blockers:
        _dismiss_blockers(step, "Dismissed: the run was aborted.", answer_agent=True)
    step.count("aborts")
    _interrupt(step, "aborted")
    queued = len(step.state.queue)
    step.reply(
        "Aborted the current run." + (f" {queued} queued prompt(s) follow." if queued else "")
    )


def _remove_items(step: _Step, keep: Callable[[int, QueueItem], bool]) -> int:
    before = step.state.queue
    after = tuple(q for i, q in enumerate(before) if keep(i, q))
    step.set(queue=after)
    removed = len(before) - len(after)
    step.count("removed", removed)
    return removed


def _on_clear_queue(step: _Step, a: A.QueueCleared) -> None:
    size = len(step.state.queue)
    if a.position is None:
        n = _remove_items(step, lambda i, q: False)
        step.reply(f"Cleared {n} queued prompt(s)." if n else "The queue is already empty.")
        return
    if not 1 <= a.position <= size:
        step.reply(
            f"No queued prompt at position {a.position} (the queue has {size}).", ephemeral=True
        )
        step.record("clear-queue position out of range", "rejected")
        return
    _remove_items(step, lambda i, q: i != a.position - 1)
    step.reply(f"Removed the queued prompt at position {a.position}.")


def _on_remove_queued(step: _Step, a: A.QueuedItemRemoved) -> None:
    if _remove_items(step, lambda i, q: q.id != a.item_id):
        step.reply("Removed from the queue.", ephemeral=True)
    else:
        step.reply("That prompt is no longer queued.", ephemeral=True)
        step.record("remove of an item no longer queued")


def _on_source_edited(step: _Step, a: A.SourceMessageEdited) -> None:
    queue = step.state.queue
    for i, q in enumerate(queue):
        if q.source_message_id == a.source_message_id:
            step.set(queue=queue[:i] + (q.replace(text=a.text),) + queue[i + 1 :])
            return
    step.record("edit of a message that is not queued")


def _on_source_deleted(step: _Step, a: A.SourceMessageDeleted) -> None:
    if not _remove_items(step, lambda i, q: q.source_message_id != a.source_message_id):
        step.record("delete of a message that is not queued")


def _open_conversation(
    step: _Step,
    a: A.ConversationStarted | A.ConversationResumed,
    session_id: str | None,
) -> None:
    if is_busy(step.state):
        step.reply("A run is active: /abort it (or /conversation end) first.", ephemeral=True)
        step.record("conversation start while busy", "rejected")
        return
    problem = _workdir_problem(step, a.requested_workdir, a.resolved_workdir)
    if problem:
        step.reply(problem, ephemeral=True)
        step.record(problem, "rejected")
        return
    assert a.resolved_workdir is not None
    if step.state.agent_status is not AgentStatus.STOPPED:
        step.emit(F.StopAgent(reason="a new conversation was started"))
    step.set(
        conversation=Conversation(
            agent=a.agent,
            workdir=a.resolved_workdir,
            session_id=session_id,
            model=a.model,
            system_instruction=a.system_instruction,
        )
    )
    _start_agent(step)
    verb = f"Resumed {a.agent} session {session_id}" if session_id else f"Started {a.agent}"
    step.reply(f"{verb} in {a.resolved_workdir}.")


def _on_conversation_ended(step: _Step, a: A.ConversationEnded) -> None:
    conv = step.state.conversation
    if conv is None:
        step.reply("There is no conversation to end.", ephemeral=True)
        step.record("end without a conversation")
        return
    if step.state.run is not None:
        step.set_run(end_reason="conversation ended")
        _end_run(step, "force_end")
    dropped = _remove_items(step, lambda i, q: False)
    if step.state.agent_status is not AgentStatus.STOPPED:
        step.emit(F.StopAgent(reason="conversation ended"))
    step.set(conversation=None, agent_status=AgentStatus.STOPPED)
    text = f"Conversation ended. The {conv.agent} session stays in its own history"
    text += f" (resume with /{conv.agent} resume {conv.session_id})." if conv.session_id else "."
    if dropped:
        text += f" {dropped} queued prompt(s) were dropped."
    step.reply(text)


def _on_workdir_set(step: _Step, a: A.WorkdirSet) -> None:
    conv = step.state.conversation
    if conv is None:
        step.reply("No conversation: start one with /<agent> start <workdir>.", ephemeral=True)
        step.record("workdir without a conversation", "rejected")
        return
    if is_busy(step.state):
        step.reply("A run is active: /abort it first, then change the workdir.", ephemeral=True)
        step.record("workdir change while busy", "rejected")
        return
    problem = _workdir_problem(step, a.requested_workdir, a.resolved_workdir)
    if problem:
        step.reply(problem, ephemeral=True)
        step.record(problem, "rejected")
        return
    # Agent sessions are tied to their directory: a new workdir starts a new session.
    step.set(conversation=conv.replace(workdir=a.resolved_workdir, session_id=None))
    _restart_agent(step, "workdir changed")
    step.reply(f"Workdir set to {a.resolved_workdir} (a new {conv.agent} session starts there).")


def _on_model_changed(step: _Step, a: A.ModelChanged) -> None:
    conv = step.state.conversation
    if conv is None:
        step.reply("No conversation: start one first, then choose its model.", ephemeral=True)
        step.record("model without a conversation", "rejected")
        return
    step.set(conversation=conv.replace(model=a.model))
    run = step.state.run
    if run is None:
        _restart_agent(step, "model changed")
        step.reply(f"Model set to {a.model}.")
        return
    # Abort the run and retry its prompt with the new model, in the same session.
    step.set_run(end_reason="model changed")
    step.count("interrupts")
    _end_run(step, "force_end")
    step.set(queue=(run.prompt,) + step.state.queue)
    _restart_agent(step, "model changed")
    step.reply(f"Model set to {a.model}: the current prompt is being retried with it.")


def _status_text(state: ThreadState) -> str:
    conv = state.conversation
    lines = []
    if conv is None:
        lines.append("No conversation.")
    else:
        lines.append(f"Agent: {conv.agent} ({state.agent_status.value}) in {conv.workdir}")
        lines.append(f"Session: {conv.session_id or '(new)'} · model: {conv.model or '(default)'}")
    run = state.run
    lines.append(f"Run: {run.id} {run.phase.value}" if run else "Run: idle")
    if state.blockers:
        lines.append(f"Waiting for: {len(state.blockers)} answer(s)")
    lines.append(f"Queue: {len(state.queue)}/{state.policy.queue_limit}")
    for i, q in enumerate(state.queue, 1):
        lines.append(f"  {i}. {q.author_name or q.author_id}: {q.text[:80]}")
    c = state.counters
    lines.append(
        f"Runs: {c.runs} (completed {c.completed}, failed {c.failed}, interrupted "
        f"{c.interrupts}, aborted {c.aborts}) · stale events dropped: {c.stale_drops}"
    )
    return "\n".join(lines)


def _on_status(step: _Step, a: A.StatusRequested) -> None:
    text = _status_text(step.state)
    if a.processes:
        text += "\nProcesses:\n" + "\n".join(f"  {line}" for line in a.processes)
    step.reply(text, ephemeral=True)


def _find_blocker(step: _Step, request_id: str, kind: str) -> Blocker | None:
    for b in step.state.blockers:
        if b.request_id == request_id and b.kind == kind:
            return b
    return None


def _after_answer(step: _Step, blocker: Blocker) -> None:
    step.set(blockers=tuple(b for b in step.state.blockers if b is not blocker))
    if not step.state.blockers and step.state.run is not None:
        step.emit(F.Typing(on=True))


def _on_permission_answered(step: _Step, a: A.PermissionAnswered) -> None:
    blocker = _find_blocker(step, a.request_id, "permission")
    if blocker is None:
        step.reply("That permission request is no longer pending.", ephemeral=True)
        step.record("answer to a permission that is not pending")
        return
    step.emit(F.AnswerPermission(request_id=a.request_id, allow=a.allow))
    who = f" by <@{a.author_id}>" if a.author_id else ""
    step.emit(
        F.DismissPrompt(
            key=blocker.key,
            request_id=a.request_id,
            outcome=("Allowed" if a.allow else "Denied") + who + ".",
        )
    )
    _after_answer(step, blocker)


def _on_question_answered(step: _Step, a: A.QuestionAnswered) -> None:
    blocker = _find_blocker(step, a.request_id, "question")
    if blocker is None:
        step.reply("That question is no longer pending.", ephemeral=True)
        step.record("answer to a question that is not pending")
        return
    step.emit(F.AnswerQuestion(request_id=a.request_id, answer=a.answer))
    step.emit(
        F.DismissPrompt(key=blocker.key, request_id=a.request_id, outcome=f"Answered: {a.answer}")
    )
    _after_answer(step, blocker)


# --- agent events ----------------------------------------------------------------------


def _format_duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m{secs:02d}s"


def _footer(run: Run, ev: E.TurnCompleted, at: float) -> str:
    seconds = ev.duration_ms / 1000 if ev.duration_ms is not None else max(0.0, at - run.started_at)
    parts = [_format_duration(seconds)]
    if ev.cost_usd is not None:
        parts.append(f"${ev.cost_usd:.4f}")
    if ev.model:
        parts.append(ev.model)
    usage = ev.usage
    if usage and usage.context_window and usage.input_tokens is not None:
        used = usage.input_tokens + (usage.cache_read_tokens or 0)
        parts.append(f"{100 * used / usage.context_window:.0f}% context")
    return " · ".join(parts)


def _append_delta(step: _Step, run: Run, ev: E.AgentEvent, **run_update: object) -> bool:
    """Fast path: a text/thinking delta that continues the open part becomes one
    ``AppendOutput`` and one copy of the run. False when it is anything else."""
    part = run.open_part
    if part is None:
        return False
    if isinstance(ev, E.TextDelta):
        if part.kind != "text" or part.block != ev.block:
            return False
    elif not (isinstance(ev, E.ThinkingDelta) and part.kind == "thinking"):
        return False
    seq = part.seq + 1
    # Built without validation: every field comes from state the core itself made.
    step.emit(F.AppendOutput.model_construct(key=part.key, seq=seq, text=ev.text))
    step.set_run(open_part=part.replace(seq=seq), **run_update)
    return True


def _stream(step: _Step, kind: str, text: str, block: str | None) -> None:
    run = step.state.run
    assert run is not None
    part = run.open_part
    if part is not None and part.kind == kind and part.block == block:
        seq = part.seq + 1
        step.emit(F.AppendOutput(key=part.key, seq=seq, text=text))
        step.set_run(open_part=part.replace(seq=seq))
        return
    step.seal_open_part()
    key = step.post(kind, text)  # type: ignore[arg-type]
    step.set_run(open_part=OpenPart(key=key, kind=kind, block=block, seq=0))


def _tool_key(run: Run, tool_id: str) -> tuple[str, str] | None:
    keys = dict(run.tool_keys)
    if tool_id not in keys:
        return None
    return keys[tool_id], dict(run.tool_headers)[tool_id]


def _on_agent_event(step: _Step, a: A.AgentEventReceived) -> None:
    run = step.state.run
    conv = step.state.conversation
    ev = a.event
    if run is None or a.run_id != run.id:
        step.record(
            f"stale {ev.type} of run {a.run_id} (current: {run.id if run else None})", "stale_drops"
        )
        return
    known = conv.session_id if conv is not None else None
    if (
        known is not None
        and a.session_id is not None
        and a.session_id != known
        and not isinstance(ev, E.SessionStarted | E.TurnCompleted)
    ):
        step.record(f"stale {ev.type} of session {a.session_id} (current: {known})", "stale_drops")
        return
    target = next_phase(run.phase, "agent_event")
    moved = {"phase": target} if target is not None and target is not run.phase else {}
    interrupting = (target or run.phase) is Phase.INTERRUPTING
    if not interrupting and _append_delta(step, run, ev, last_event_at=a.at, **moved):
        return  # the common case, a delta continuing the open part: one copy of the run
    step.set_run(last_event_at=a.at, **moved)

    if isinstance(ev, E.SessionStarted):
        if conv is not None:
            update = {"session_id": ev.session_id}
            step.set(conversation=conv.replace(**update))
    elif isinstance(ev, E.TurnCompleted | E.TurnAborted):
        _on_turn_end(step, ev)
    elif isinstance(ev, E.PermissionRequested | E.QuestionAsked):
        if interrupting:
            # The user already moved on: refuse at once so the agent is not left waiting.
            if isinstance(ev, E.PermissionRequested):
                step.emit(F.AnswerPermission(request_id=ev.request_id, allow=False))
            else:
                step.emit(F.AnswerQuestion(request_id=ev.request_id, answer=None))
            step.note = "request during an interrupt refused"
            return
        if _find_blocker(step, ev.request_id, "permission") or _find_blocker(
            step, ev.request_id, "question"
        ):
            step.record(f"duplicate request {ev.request_id}", "duplicates")
            return
        step.seal_open_part()
        key = step.new_run_key()
        if isinstance(ev, E.PermissionRequested):
            step.emit(
                F.ShowPermissionPrompt(
                    key=key, request_id=ev.request_id, tool=ev.tool, detail=ev.detail
                )
            )
            blocker = Blocker(
                request_id=ev.request_id,
                kind="permission",
                key=key,
                run_id=run.id,
                text=f"{ev.tool}: {ev.detail}",
            )
        else:
            step.emit(
                F.ShowQuestion(
                    key=key,
                    request_id=ev.request_id,
                    question=ev.question,
                    options=ev.options,
                    multiple=ev.multiple,
                )
            )
            blocker = Blocker(
                request_id=ev.request_id, kind="question", key=key, run_id=run.id, text=ev.question
            )
        step.set(blockers=step.state.blockers + (blocker,))
        step.emit(F.Typing(on=False))
    elif interrupting:
        # Output of a run the user interrupted is not shown any more.
        step.note = f"{ev.type} while interrupting: not shown"
    elif isinstance(ev, E.TextDelta):
        _stream(step, "text", ev.text, ev.block)
    elif isinstance(ev, E.ThinkingDelta):
        _stream(step, "thinking", ev.text, None)
    elif isinstance(ev, E.ToolStarted):
        step.seal_open_part()
        header = f"{ev.display_name}({ev.input_summary})"
        key = step.post("tool", header)
        step.set_run(
            tool_keys=step.state.run.tool_keys + ((ev.tool_id, key),),
            tool_headers=step.state.run.tool_headers + ((ev.tool_id, header),),
        )
    elif isinstance(ev, E.ToolFinished):
        result = (
            ev.result
            if len(ev.result) <= TOOL_RESULT_CHARS
            else (
                ev.result[:TOOL_RESULT_CHARS] + f"… (+{len(ev.result) - TOOL_RESULT_CHARS} chars)"
            )
        )
        mark = "✗ " if ev.is_error else "→ "
        found = _tool_key(step.state.run, ev.tool_id)
        if found is None:
            step.seal_open_part()
            step.post("tool", f"(tool {ev.tool_id})\n{mark}{result}")
        else:
            key, header = found
            step.emit(F.EditOutput(key=key, text=f"{header}\n{mark}{result}"))
    elif isinstance(ev, E.AgentError):
        if ev.retryable:
            step.emit(F.LogNote(level="warning", message=f"agent retrying: {ev.message}"))
        else:
            step.seal_open_part()
            step.post("notice", f"⚠ {ev.message}")


def _on_turn_end(step: _Step, ev: E.TurnCompleted | E.TurnAborted) -> None:
    run = step.state.run
    assert run is not None
    step.seal_open_part()
    if isinstance(ev, E.TurnCompleted):
        conv = step.state.conversation
        if ev.session_id and conv is not None:
            step.set(conversation=conv.replace(session_id=ev.session_id))
        if run.end_reason is None:
            if ev.is_error:
                step.post(
                    "notice", f"⚠ The turn failed: {ev.error or 'the agent reported an error'}"
                )
                step.count("failed")
            else:
                step.count("completed")
            step.post("footer", _footer(run, ev, step.action.at))
    elif run.end_reason is None:
        detail = f" (exit code {ev.exit_code})" if ev.exit_code is not None else ""
        tail = f"\n```\n{ev.stderr_tail[-800:]}\n```" if ev.stderr_tail.strip() else ""
        step.post("notice", f"⚠ The turn ended early: {ev.reason}{detail}{tail}")
        step.count("failed")
    _end_run(step, "turn_end")


# --- effect feedback, timers, runtime -------------------------------------------------


def _on_output_posted(step: _Step, a: A.OutputPosted) -> None:
    # The key -> platform id mapping lives in the log (this action); nothing to decide.
    return


def _on_effect_failed(step: _Step, a: A.EffectFailed) -> None:
    step.emit(F.LogNote(level="warning", message=f"{a.effect} failed: {a.reason}"))
    run = step.state.run
    if a.effect in ("prompt_agent", "start_agent"):
        step.set(agent_status=AgentStatus.STOPPED)
        if run is not None:
            if run.end_reason is None:
                step.post("notice", f"⚠ The agent could not take the prompt: {a.reason}")
                step.count("failed")
            _end_run(step, "agent_exit")
        elif step.state.conversation is not None:
            step.reply(f"⚠ The agent could not start: {a.reason}")


def _on_agent_connected(step: _Step, a: A.AgentConnected) -> None:
    step.count("listener_starts")
    step.set(agent_status=AgentStatus.READY)
    conv = step.state.conversation
    if conv is not None and a.session_id and conv.session_id is None:
        step.set(conversation=conv.replace(session_id=a.session_id))


def _on_agent_exited(step: _Step, a: A.AgentExited) -> None:
    step.set(agent_status=AgentStatus.STOPPED)
    run = step.state.run
    if run is None:
        return
    if run.end_reason is None:
        detail = f" (exit code {a.exit_code})" if a.exit_code is not None else ""
        tail = f"\n```\n{a.stderr_tail[-800:]}\n```" if a.stderr_tail.strip() else ""
        step.post("notice", f"⚠ The agent exited during the run{detail}.{tail}")
        step.count("failed")
    _end_run(step, "agent_exit")


def _on_tick(step: _Step, a: A.Tick) -> None:
    run = step.state.run
    if run is None:
        return
    policy = step.state.policy
    if run.phase is Phase.INTERRUPTING:
        if run.interrupt_at is not None and a.at - run.interrupt_at >= policy.interrupt_grace_s:
            step.post(
                "notice",
                f"⚠ The agent did not stop within {policy.interrupt_grace_s:g}s: it was restarted.",
            )
            step.emit(F.StopAgent(reason="interrupt timed out"))
            step.set(agent_status=AgentStatus.STOPPED)
            _end_run(step, "force_end")
        return
    if not step.state.blockers and a.at - run.last_event_at >= policy.turn_idle_timeout_s:
        step.post(
            "notice",
            f"⚠ No output from the agent for {policy.turn_idle_timeout_s:g}s: ending the turn.",
        )
        _interrupt(step, "timed out")


def _on_recovered(step: _Step, a: A.RuntimeRecovered) -> None:
    # The process died: no agent is running any more, whatever the log last said.
    step.set(agent_status=AgentStatus.STOPPED)
    if step.state.run is not None:
        if step.state.run.end_reason is None:
            step.post(
                "notice",
                "⚠ Spindle restarted while this run was active: it was "
                "interrupted. Queued prompts continue.",
            )
            step.set_run(end_reason="runtime restarted")
        _end_run(step, "force_end")


def _on_parked(step: _Step, a: A.ThreadParked) -> None:
    # Stop the run here, while the chat can still be told, instead of letting the agent's
    # exit look like a crash; the queue is kept for when the thread wakes.
    if step.state.run is not None:
        if step.state.run.end_reason is None:
            queued = len(step.state.queue)
            more = f" {queued} queued prompt(s) will run when it is back." if queued else ""
            step.post("notice", f"⚠ Spindle stopped this run ({a.reason}).{more}")
            step.set_run(end_reason=a.reason)
        _end_run(step, "force_end")
    if step.state.agent_status is not AgentStatus.STOPPED:
        step.emit(F.StopAgent(reason=a.reason))
    step.set(parked=True, agent_status=AgentStatus.STOPPED)


def _on_policy_set(step: _Step, a: A.PolicySet) -> None:
    step.set(policy=a.policy)


HANDLERS: dict[type, Callable[[_Step, object], None]] = {
    A.UserMessage: _on_user_message,
    A.QueueCommand: _on_queue_command,
    A.AbortRequested: _on_abort,
    A.QueueCleared: _on_clear_queue,
    A.QueuedItemRemoved: _on_remove_queued,
    A.SourceMessageEdited: _on_source_edited,
    A.SourceMessageDeleted: _on_source_deleted,
    A.ConversationStarted: lambda s, a: _open_conversation(s, a, None),
    A.ConversationResumed: lambda s, a: _open_conversation(s, a, a.session_id),
    A.ConversationEnded: _on_conversation_ended,
    A.WorkdirSet: _on_workdir_set,
    A.ModelChanged: _on_model_changed,
    A.StatusRequested: _on_status,
    A.PermissionAnswered: _on_permission_answered,
    A.QuestionAnswered: _on_question_answered,
    A.AgentEventReceived: _on_agent_event,
    A.OutputPosted: _on_output_posted,
    A.EffectFailed: _on_effect_failed,
    A.AgentConnected: _on_agent_connected,
    A.AgentExited: _on_agent_exited,
    A.Tick: _on_tick,
    A.RuntimeRecovered: _on_recovered,
    A.ThreadParked: _on_parked,
    A.PolicySet: _on_policy_set,
}

# Feedback and timer actions are not remembered for duplicate detection: they are made by
# the runtime itself, and a tick or a repeated OutputPosted is harmless by construction.
_NOT_DEDUPED = (A.Tick, A.OutputPosted, A.AgentEventReceived)

# What wakes a parked thread: anything a user does, and the runtime coming back.
_WAKES = (
    A.UserMessage,
    A.QueueCommand,
    A.AbortRequested,
    A.QueueCleared,
    A.QueuedItemRemoved,
    A.ConversationStarted,
    A.ConversationResumed,
    A.ConversationEnded,
    A.WorkdirSet,
    A.ModelChanged,
    A.PermissionAnswered,
    A.QuestionAnswered,
    A.RuntimeRecovered,
)


def _drain(step: _Step) -> None:
    """Start the next run when the guard allows: the one place prompts are dispatched."""
    if not can_dispatch_next(step.state):
        return
    state = step.state
    conv = state.conversation
    assert conv is not None
    item = state.queue[0]
    run_id = f"r{state.counters.runs + 1}"
    step.count("runs")
    step.count("dequeued")
    step.set(
        queue=state.queue[1:],
        run=Run(
            id=run_id,
            prompt=item,
            phase=Phase.DISPATCHING,
            started_at=step.action.at,
            last_event_at=step.action.at,
        ),
    )
    if item.id != step.action.action_id:
        # The prompt waited in the queue: say in the thread which one runs now.
        text = item.text if len(item.text) <= MARKER_CHARS else item.text[:MARKER_CHARS] + "…"
        step.post("marker", f"» {item.author_name or item.author_id}: {text}")
    if state.agent_status is AgentStatus.STOPPED:
        _start_agent(step)
    step.emit(F.Typing(on=True))
    step.emit(
        F.PromptAgent(
            run_id=run_id,
            text=item.text,
            attachments=item.attachments,
            agent=conv.agent,
            workdir=conv.workdir,
            session_id=conv.session_id,
            model=conv.model,
            system_instruction=conv.system_instruction,
        )
    )


def transition(state: ThreadState, action: A.Action) -> Transition:
    """The next state and the effects of ``action``. Never raises."""
    step = _Step(state, action)
    if action.thread_id != state.thread_id:
        step.record(f"action for thread {action.thread_id} sent to {state.thread_id}")
        return step.finish()
    if not isinstance(action, _NOT_DEDUPED):
        if action.action_id in state.recent_action_ids:
            step.record(f"duplicate delivery of {action.kind} {action.action_id}", "duplicates")
            return step.finish()
        step.set(
            recent_action_ids=(state.recent_action_ids + (action.action_id,))[-RECENT_ACTIONS:]
        )
    handler = HANDLERS.get(type(action))
    if state.parked and isinstance(action, _WAKES):
        step.set(parked=False)
    try:
        if handler is None:
            step.record(f"no handler for {type(action).__name__}")
        else:
            handler(step, action)
        _drain(step)
    except Exception as exc:  # totality: a bug is recorded, never raised into the actor
        fallback = _Step(state, action)
        fallback.record(f"internal error handling {action.kind}: {exc!r}")
        fallback.emit(F.LogNote(level="warning", message=fallback.note or ""))
        return fallback.finish()
    return step.finish()
