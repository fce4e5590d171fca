"""Handlers for what users do: prompts, /queue, /abort, queue edits, conversations, answers.

Each ``on_*`` function changes a ``Step``; ``runtime.core.transitions`` picks the handler and
drains the queue afterwards.
"""

from __future__ import annotations

from collections.abc import Callable

from threadspindle.runtime.core import actions as A
from threadspindle.runtime.core import effect_types as F
from threadspindle.runtime.core.guards import (
    can_dispatch_next,
    has_visible_text,
    is_busy,
    queue_is_full,
)
from threadspindle.runtime.core.model import (
    AgentStatus,
    Blocker,
    Conversation,
    Phase,
    QueueItem,
    ThreadState,
)
from threadspindle.runtime.core.transition_step import (
    Step,
    dismiss_blockers,
    end_run,
    find_blocker,
    interrupt_run,
    restart_agent,
    workdir_problem,
)
from threadspindle.runtime.core.transitions_workspace import stop_shell

# --- user ingress ----------------------------------------------------------------------


def _enqueue(step: Step, item: QueueItem, *, interrupt: bool, confirm: bool) -> bool:
    """Queue ``item`` (interrupting the run for a plain message); False when refused."""
    state = step.state
    if state.conversation is None:
        step.refuse(
            "No conversation in this thread: start one with /<agent> start, e.g. "
            "/claude start (/help lists the agents).",
            "prompt without a conversation",
            "rejected",
        )
        return False
    if queue_is_full(state):
        step.refuse(
            f"The queue is full ({state.policy.queue_limit} prompts): this prompt was "
            "not queued. Wait for the queue to drain or /clear-queue.",
            "queue full",
            "rejected",
        )
        return False
    if interrupt:
        # A plain message goes ahead of the /queue items but behind earlier plain ones.
        pos = next((i for i, q in enumerate(state.queue) if q.from_queue), len(state.queue))
        step.set(queue=state.queue[:pos] + (item,) + state.queue[pos:])
        if state.blockers:
            dismiss_blockers(step, "Dismissed: a new message arrived.", answer_agent=True)
        if state.run is not None:
            if state.run.phase is not Phase.INTERRUPTING:
                step.count("interrupts")
            interrupt_run(step, "interrupted")
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
    return True


def _queue_item(
    a: A.UserMessage | A.QueueCommand | A.SteerCommand, *, from_queue: bool
) -> QueueItem:
    return QueueItem(
        id=a.action_id,
        author_id=a.author_id,
        author_name=a.author_name,
        text=a.text,
        attachments=a.attachments,
        source_message_id=a.source_message_id,
        from_queue=from_queue,
        queued_at=a.at,
    )


def _nothing_to_send(step: Step, a: A.UserMessage | A.QueueCommand | A.SteerCommand) -> bool:
    """A message with no text to read and no attachment (a Discord embed alone,
    a line of control characters) is no prompt: refused before it can interrupt the run."""
    if a.attachments or has_visible_text(a.text):
        return False
    step.refuse(
        "Not sent: the message has no text for the agent.", "prompt without text", "rejected"
    )
    return True


def on_user_message(step: Step, a: A.UserMessage) -> None:
    if _nothing_to_send(step, a):
        return
    item = _queue_item(a, from_queue=not a.interrupt)
    _enqueue(step, item, interrupt=a.interrupt, confirm=not a.interrupt)


def on_queue_command(step: Step, a: A.QueueCommand) -> None:
    if _nothing_to_send(step, a):
        return
    _enqueue(step, _queue_item(a, from_queue=True), interrupt=False, confirm=True)


def on_steer(step: Step, a: A.SteerCommand) -> None:
    """Add the message to the running turn. No run (or one already being interrupted): a
    normal prompt. An agent that cannot steer: interrupt and resend, and say so."""
    if _nothing_to_send(step, a):
        return
    state = step.state
    item = _queue_item(a, from_queue=False)
    run = state.run
    if state.conversation is None or run is None or run.phase is Phase.INTERRUPTING:
        _enqueue(step, item, interrupt=True, confirm=False)
        return
    caps = state.capabilities
    if caps is None or not caps.steer:
        if _enqueue(step, item, interrupt=True, confirm=False):
            step.reply(
                f"{state.conversation.agent} cannot add to a running turn: the turn was "
                "interrupted and your message is sent as a new prompt."
            )
        return
    if queue_is_full(state):
        # Steers waiting for the agent's answer count against the queue: each may still
        # become a queued prompt.
        step.refuse(
            f"The queue is full ({state.policy.queue_limit} prompts and steered messages): "
            "this message was not sent. Wait for the queue to drain or /clear-queue.",
            "queue full",
            "rejected",
        )
        return
    key = f"{step.thread}/steer/{item.id}"
    step.emit(
        F.SteerAgent(
            key=key, run_id=run.id, steer_id=item.id, text=item.text, attachments=item.attachments
        )
    )
    step.set_run(steers=run.steers + (item,))
    step.count("steers")


def on_compact(step: Step, a: A.CompactRequested) -> None:
    """Queue the agent's own compaction as a run (never interrupting); refused when the
    agent cannot compact, or is not known yet."""
    state = step.state
    conv = state.conversation
    caps = state.capabilities
    if conv is not None and (caps is None or not caps.compact):
        why = "cannot compact its conversation" if caps else "has not started yet: try again"
        step.refuse(f"{conv.agent} {why}.", "compact not supported", "rejected")
        return
    item = QueueItem(
        id=a.action_id,
        author_id=a.author_id,
        author_name=a.author_name,
        text="/compact",
        from_queue=True,
        command="compact",
        queued_at=a.at,
    )
    _enqueue(step, item, interrupt=False, confirm=True)


FORK_TITLE_CHARS = 80  # a /btw thread is named after its question, this long at most


def on_fork(step: Step, a: A.ForkRequested) -> None:
    """``/fork`` and ``/btw``: ask the platform for a new thread whose conversation forks
    this one's session; this thread (and its run) is not touched."""
    state = step.state
    conv = state.conversation
    caps = state.capabilities
    if conv is None:
        step.refuse("There is no conversation to fork.", "fork without a conversation")
        return
    if caps is None or not caps.fork:
        why = "cannot fork a conversation" if caps else "has not started yet: try again"
        step.refuse(f"{conv.agent} {why}.", "fork not supported", "rejected")
        return
    if conv.session_id is None:
        step.refuse(
            "Nothing to fork yet: the conversation has no session (send a first prompt).",
            "fork without a session",
        )
        return
    if a.question is not None:
        title = "btw: " + " ".join(a.question.split())[:FORK_TITLE_CHARS]
    else:
        title = f"fork of {conv.agent} {conv.session_id[:8]}"
    step.emit(
        F.OpenThread(
            key=f"{step.thread}/fork/{a.action_id}",
            title=title,
            agent=conv.agent,
            workdir=conv.workdir,
            session_id=conv.session_id,
            model=conv.model,
            system_instruction=conv.system_instruction,
            prompt=a.question,
            author_id=a.author_id,
            author_name=a.author_name,
        )
    )
    step.reply("Opening a new thread that continues this conversation…", ephemeral=True)


def on_abort(step: Step, a: A.AbortRequested) -> None:
    # A running `!` command is stopped too (its whole process tree: docs/workspaces.md).
    shell = stop_shell(step, "aborted")
    if step.state.run is None:
        if shell:
            step.reply("Stopping the shell command.")
        else:
            step.refuse("Nothing to abort: no run is active.", "abort while idle")
        return
    if step.state.run.phase is Phase.INTERRUPTING:
        # Already asked to stop (an /abort, or a message that interrupts it): one outcome
        # per run. Counted again, three /abort made "aborted 3" of one run, each with
        # its own "Aborted" reply.
        if shell:
            step.reply("Stopping the shell command. The run is already stopping.")
        else:
            step.refuse("The run is already stopping.", "abort while the run is stopping")
        return
    if step.state.blockers:
        dismiss_blockers(step, "Dismissed: the run was aborted.", answer_agent=True)
    step.count("aborts")
    interrupt_run(step, "aborted")
    queued = len(step.state.queue)
    step.reply(
        "Aborted the current run." + (f" {queued} queued prompt(s) follow." if queued else "")
    )


def _remove_items(step: Step, keep: Callable[[int, QueueItem], bool]) -> int:
    before = step.state.queue
    after = tuple(q for i, q in enumerate(before) if keep(i, q))
    step.set(queue=after)
    removed = len(before) - len(after)
    step.count("removed", removed)
    return removed


def on_clear_queue(step: Step, a: A.QueueCleared) -> None:
    size = len(step.state.queue)
    if a.position is None:
        n = _remove_items(step, lambda i, q: False)
        step.reply(f"Cleared {n} queued prompt(s)." if n else "The queue is already empty.")
        return
    if not 1 <= a.position <= size:
        first = " (positions start at 1)" if a.position < 1 else ""
        step.refuse(
            f"No queued prompt at position {a.position}{first} (the queue has {size}).",
            "clear-queue position out of range",
            "rejected",
        )
        return
    index = a.position - 1
    _remove_items(step, lambda i, q: i != index)
    step.reply(f"Removed the queued prompt at position {a.position}.")


def on_remove_queued(step: Step, a: A.QueuedItemRemoved) -> None:
    if _remove_items(step, lambda i, q: q.id != a.item_id):
        step.reply("Removed from the queue.", ephemeral=True)
    else:
        step.refuse("That prompt is no longer queued.", "remove of an item no longer queued")


def on_source_edited(step: Step, a: A.SourceMessageEdited) -> None:
    queue = step.state.queue
    for i, q in enumerate(queue):
        if q.source_message_id == a.source_message_id:
            step.set(queue=queue[:i] + (q.replace(text=a.text),) + queue[i + 1 :])
            return
    step.record("edit of a message that is not queued")


def on_source_deleted(step: Step, a: A.SourceMessageDeleted) -> None:
    if not _remove_items(step, lambda i, q: q.source_message_id != a.source_message_id):
        step.record("delete of a message that is not queued")


def on_conversation_started(step: Step, a: A.ConversationStarted) -> None:
    open_conversation(step, a, None)


def on_conversation_resumed(step: Step, a: A.ConversationResumed) -> None:
    open_conversation(step, a, a.session_id)


def open_conversation(
    step: Step,
    a: A.ConversationStarted | A.ConversationResumed,
    session_id: str | None,
) -> None:
    if is_busy(step.state):
        step.refuse(
            "A run is active: /abort it (or /conversation end) first.",
            "conversation start while busy",
            "rejected",
        )
        return
    problem = workdir_problem(step, a.requested_workdir, a.resolved_workdir)
    if problem:
        step.refuse(problem, problem, "rejected")
        return
    assert a.resolved_workdir is not None
    fork = isinstance(a, A.ConversationResumed) and a.fork
    step.set(
        conversation=Conversation(
            agent=a.agent,
            workdir=a.resolved_workdir,
            session_id=session_id,
            model=a.model,
            system_instruction=a.system_instruction,
            fork_of=session_id if fork else None,
        ),
        capabilities=None,  # the new agent's come with its AgentConnected
        context_notice=0,
    )
    restart_agent(step, "a new conversation was started")
    verb = f"Resumed {a.agent} session {session_id}" if session_id else f"Started {a.agent}"
    if fork:
        verb = f"Forked {a.agent} session {session_id} (a new session continues it)"
    step.reply(f"{verb} in {a.resolved_workdir}.")


def on_conversation_ended(step: Step, a: A.ConversationEnded) -> None:
    conv = step.state.conversation
    if conv is None:
        step.refuse("There is no conversation to end.", "end without a conversation")
        return
    if step.state.run is not None:
        step.set_run(end_reason="conversation ended")
        end_run(step, "force_end")
    dropped = _remove_items(step, lambda i, q: False)
    if step.state.agent_status is not AgentStatus.STOPPED:
        step.emit(F.StopAgent(reason="conversation ended"))
    step.set(conversation=None, agent_status=AgentStatus.STOPPED)
    text = f"Conversation ended. The {conv.agent} session stays in its own history"
    text += f" (resume with /{conv.agent} resume {conv.session_id})." if conv.session_id else "."
    if dropped:
        text += f" {dropped} queued prompt(s) were dropped."
    step.reply(text)


def on_workdir_set(step: Step, a: A.WorkdirSet) -> None:
    conv = step.state.conversation
    if conv is None:
        step.refuse(
            "No conversation: start one with /<agent> start <workdir>.",
            "workdir without a conversation",
            "rejected",
        )
        return
    if is_busy(step.state):
        step.refuse(
            "A run is active: /abort it first, then change the workdir.",
            "workdir change while busy",
            "rejected",
        )
        return
    problem = workdir_problem(step, a.requested_workdir, a.resolved_workdir)
    if problem:
        step.refuse(problem, problem, "rejected")
        return
    # Agent sessions are tied to their directory: a new workdir starts a new session.
    step.set(conversation=conv.replace(workdir=a.resolved_workdir, session_id=None))
    restart_agent(step, "workdir changed")
    step.reply(f"Workdir set to {a.resolved_workdir} (a new {conv.agent} session starts there).")


def on_model_changed(step: Step, a: A.ModelChanged) -> None:
    conv = step.state.conversation
    if conv is None:
        step.refuse(
            "No conversation: start one first, then choose its model.",
            "model without a conversation",
            "rejected",
        )
        return
    step.set(conversation=conv.replace(model=a.model))
    run = step.state.run
    if run is None:
        restart_agent(step, "model changed")
        step.reply(f"Model set to {a.model}.")
        return
    # Abort the run and retry its prompt with the new model, in the same session.
    step.set_run(end_reason="model changed")
    if run.phase is not Phase.INTERRUPTING:  # a run already stopping was counted then
        step.count("interrupts")
    end_run(step, "force_end")
    step.set(queue=(run.prompt,) + step.state.queue)
    restart_agent(step, "model changed")
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
    # Runs Spindle ended itself (shut down or restarted mid-run) are named when there are
    # any: otherwise such a run is in no count and the line does not add up.
    stopped = f", stopped by Spindle {c.stopped}" if c.stopped else ""
    lines.append(
        f"Runs: {c.runs} (completed {c.completed}, failed {c.failed}, interrupted "
        f"{c.interrupts}, aborted {c.aborts}{stopped}) · stale events dropped: {c.stale_drops}"
    )
    return "\n".join(lines)


def on_status(step: Step, a: A.StatusRequested) -> None:
    text = _status_text(step.state)
    if a.processes:
        text += "\nProcesses:\n" + "\n".join(f"  {line}" for line in a.processes)
    step.reply(text, ephemeral=True)


def _after_answer(step: Step, blocker: Blocker) -> None:
    step.set(blockers=tuple(b for b in step.state.blockers if b is not blocker))
    if not step.state.blockers and step.state.run is not None:
        step.emit(F.Typing(on=True))


def on_permission_answered(step: Step, a: A.PermissionAnswered) -> None:
    blocker = find_blocker(step, a.request_id, "permission")
    if blocker is None:
        step.refuse(
            "That permission request is no longer pending.",
            "answer to a permission that is not pending",
        )
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


def on_question_answered(step: Step, a: A.QuestionAnswered) -> None:
    blocker = find_blocker(step, a.request_id, "question")
    if blocker is None:
        step.refuse(
            "That question is no longer pending.", "answer to a question that is not pending"
        )
        return
    step.emit(F.AnswerQuestion(request_id=a.request_id, answer=a.answer))
    step.emit(
        F.DismissPrompt(key=blocker.key, request_id=a.request_id, outcome=f"Answered: {a.answer}")
    )
    _after_answer(step, blocker)
