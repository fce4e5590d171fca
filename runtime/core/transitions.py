"""The thread state machine: ``transition(state, action) -> Transition``.

Theory of operation
-------------------
Everything that happens to a chat thread is an ``Action``; ``transition`` decides, for one
state and one action, the next state and the effects the world should see. It is the only
place where behaviour is decided: this module picks the handler (``HANDLERS``) and drains
the queue; the handlers live in ``transitions_user`` (what users do) and
``transitions_agent`` (what agents and the runtime report), built from the shared moves of
``transition_step``. It keeps three rules:

* **Pure.** No I/O, no clock, no randomness. Time comes in ``action.at``; ids come in
  ``action.action_id`` or are derived from counters (run ``r7``, output ``<thread>/r7/3``),
  so replaying a log gives the same effects byte for byte.
* **Total.** It never raises. An action that makes no sense now (a stale agent event, an
  answer to a request that is gone, a duplicate delivery) is recorded: a counter moves and
  ``Transition.note`` says why; nothing else changes. A bug inside a handler is caught and
  recorded the same way, so one odd input can never kill a thread's actor.
* **Run phases come from the table** in ``runtime.core.phase_table``: every phase change
  is one of its edges, applied by ``transition_step.move`` (the only writer of
  ``run.phase``); a move the table lacks is recorded like any other unexpected action
  (counter ``illegal_moves``, a note) and the action changes nothing else. The guards in
  ``runtime.core.guards`` are derived from the state, never stored.

After every action the queue is drained: while ``can_dispatch_next`` holds, the head of the
queue becomes the new run. That single drain point is what makes "every prompt is
eventually dispatched" easy to see.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from threadspindle.runtime.core import actions as A
from threadspindle.runtime.core import effect_types as F
from threadspindle.runtime.core import transitions_agent as agent
from threadspindle.runtime.core import transitions_schedule as schedule
from threadspindle.runtime.core import transitions_user as user
from threadspindle.runtime.core import transitions_workspace as workspace
from threadspindle.runtime.core.guards import can_dispatch_next
from threadspindle.runtime.core.model import AgentStatus, ThreadState
from threadspindle.runtime.core.transition_step import (
    MARKER_CHARS,
    RECENT_ACTIONS,
    IllegalMove,
    Step,
    Transition,
    move,
    start_agent,
)

__all__ = ["HANDLERS", "NOT_DEDUPED", "Transition", "general_transition", "transition"]

# Each handler takes the action type it is registered for.
HANDLERS: dict[type[A.ActionBase], Callable[[Step, Any], None]] = {
    A.UserMessage: user.on_user_message,
    A.QueueCommand: user.on_queue_command,
    A.SteerCommand: user.on_steer,
    A.CompactRequested: user.on_compact,
    A.ForkRequested: user.on_fork,
    A.ThreadForked: agent.on_thread_forked,
    A.AbortRequested: user.on_abort,
    A.QueueCleared: user.on_clear_queue,
    A.QueuedItemRemoved: user.on_remove_queued,
    A.SourceMessageEdited: user.on_source_edited,
    A.SourceMessageDeleted: user.on_source_deleted,
    A.ConversationStarted: user.on_conversation_started,
    A.ConversationResumed: user.on_conversation_resumed,
    A.ConversationEnded: user.on_conversation_ended,
    A.WorkdirSet: user.on_workdir_set,
    A.ModelChanged: user.on_model_changed,
    A.StatusRequested: user.on_status,
    A.PermissionAnswered: user.on_permission_answered,
    A.QuestionAnswered: user.on_question_answered,
    A.AgentEventReceived: agent.on_agent_event,
    A.OutputPosted: agent.on_output_posted,
    A.EffectFailed: agent.on_effect_failed,
    A.AgentConnected: agent.on_agent_connected,
    A.AgentExited: agent.on_agent_exited,
    A.Tick: agent.on_tick,
    A.RuntimeRecovered: agent.on_recovered,
    A.ThreadParked: agent.on_parked,
    A.PolicySet: agent.on_policy_set,
    **workspace.HANDLERS,
    A.ScheduleAdded: schedule.on_schedule_added,
    A.ScheduleCancelled: schedule.on_schedule_cancelled,
    A.SchedulesListed: schedule.on_schedules_listed,
    A.ScheduleDue: schedule.on_schedule_due,
    A.VerbositySet: schedule.on_verbosity_set,
}

# A person writing in the thread voids the agent's pending wake-ups.
_CANCELS_WAKEUPS = (A.UserMessage, A.QueueCommand)

# Feedback and timer actions are not remembered for duplicate detection: they are made by
# the runtime itself, and a tick or a repeated OutputPosted is harmless by construction.
NOT_DEDUPED = (A.Tick, A.OutputPosted, A.AgentEventReceived, A.ShellOutput)

# What wakes a parked thread: anything a user does, and the runtime coming back.
_WAKES = (
    A.UserMessage,
    A.QueueCommand,
    A.SteerCommand,
    A.CompactRequested,
    A.ForkRequested,
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
    *workspace.WAKES,
    A.ScheduleDue,  # a schedule fires even in a thread the runtime put away
)


def _drain(step: Step) -> None:
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
    step.set(queue=state.queue[1:])
    move(step, "dispatch", run_id=run_id, prompt=item)
    if item.command == "compact":
        step.post(
            "marker",
            f"🗜 Compacting the conversation (/compact by {item.author_name or item.author_id})…",
        )
    elif item.id != step.action.action_id:
        # The prompt waited in the queue: say in the thread which one runs now.
        text = item.text if len(item.text) <= MARKER_CHARS else item.text[:MARKER_CHARS] + "…"
        step.post("marker", f"» {item.author_name or item.author_id}: {text}")
    if state.agent_status is AgentStatus.STOPPED:
        start_agent(step)
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
            command=item.command,
            fork_of=conv.fork_of,
        )
    )


def transition(state: ThreadState, action: A.Action) -> Transition:
    """The next state and the effects of ``action``. Never raises."""
    if type(action) is A.AgentEventReceived:
        # A delta continuing the open part, on its own: the same result in ~60% of the time.
        fast = agent.continue_delta(state, action)
        if fast is not None:
            return fast
    return general_transition(state, action)


def general_transition(state: ThreadState, action: A.Action) -> Transition:
    """``transition`` without the delta fast path (``continue_delta``): what it must equal."""
    step = Step(state, action)
    if action.thread_id != state.thread_id:
        step.record(f"action for thread {action.thread_id} sent to {state.thread_id}")
        return step.finish()
    if not isinstance(action, NOT_DEDUPED):
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
            if isinstance(action, _CANCELS_WAKEUPS):
                schedule.cancel_wakeups(step)
            handler(step, action)
        workspace.before_drain(step)
        _drain(step)
        workspace.after_step(step)
    except IllegalMove as illegal:  # the phase table has no such move: record, change nothing
        refused = Step(state, action)
        refused.record(f"{illegal} ({action.kind})", "illegal_moves")
        return refused.finish()
    except Exception as exc:  # totality: a bug is recorded, never raised into the actor
        fallback = Step(state, action)
        fallback.record(f"internal error handling {action.kind}: {exc!r}")
        fallback.emit(F.LogNote(level="warning", message=fallback.note or ""))
        return fallback.finish()
    return step.finish()
