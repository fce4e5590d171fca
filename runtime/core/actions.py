"""Every thing that can happen to a thread, as one discriminated union: ``Action``.

Ingress (chat, console, agent listener, reactor feedback, timers) builds these; the actor
serializes them through the thread's one queue; the log stores them. Each carries the
thread it is for, when it happened (``at``, seconds since the epoch, read by ingress) and
an id unique within the thread (``action_id``, made by ingress): the core never reads a
clock and never makes an id.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from threadspindle.runtime.core.agent_events import AgentEvent
from threadspindle.runtime.core.frozen import Frozen
from threadspindle.runtime.core.model import Attachment, Policy, Verbosity

__all__ = [
    "Action",
    "AbortRequested",
    "ActionBase",
    "AgentConnected",
    "AgentEventReceived",
    "AgentExited",
    "ConversationEnded",
    "ConversationResumed",
    "ConversationStarted",
    "EffectFailed",
    "ModelChanged",
    "OutputPosted",
    "PermissionAnswered",
    "PolicySet",
    "QueueCleared",
    "QueueCommand",
    "QueuedItemRemoved",
    "QuestionAnswered",
    "RuntimeRecovered",
    "ScheduleAdded",
    "ScheduleCancelled",
    "ScheduleDue",
    "SchedulesListed",
    "SourceMessageDeleted",
    "SourceMessageEdited",
    "StatusRequested",
    "ThreadParked",
    "Tick",
    "UserMessage",
    "VerbositySet",
    "WorkdirSet",
]


class ActionBase(Frozen):
    thread_id: str
    action_id: str
    at: float


# --- user ingress -----------------------------------------------------------------------


class UserMessage(ActionBase):
    """A plain message. ``interrupt`` is false for the `` queue`` suffix convention."""

    kind: Literal["user_message"] = "user_message"
    author_id: str
    author_name: str = ""
    text: str
    attachments: tuple[Attachment, ...] = ()
    source_message_id: str | None = None
    interrupt: bool = True


class QueueCommand(ActionBase):
    """``/queue <message>``: add a prompt without interrupting anything."""

    kind: Literal["queue_command"] = "queue_command"
    author_id: str
    author_name: str = ""
    text: str
    attachments: tuple[Attachment, ...] = ()
    source_message_id: str | None = None


class AbortRequested(ActionBase):
    kind: Literal["abort"] = "abort"
    author_id: str = ""


class QueueCleared(ActionBase):
    """``/clear-queue [position]``: all items, or the one at 1-based ``position``."""

    kind: Literal["clear_queue"] = "clear_queue"
    position: int | None = None


class QueuedItemRemoved(ActionBase):
    """The "Remove from queue" button of one item."""

    kind: Literal["remove_queued"] = "remove_queued"
    item_id: str


class SourceMessageEdited(ActionBase):
    """A queued item's chat message was edited (still carrying the queue suffix)."""

    kind: Literal["source_edited"] = "source_edited"
    source_message_id: str
    text: str


class SourceMessageDeleted(ActionBase):
    """A queued item's chat message was deleted, or its queue suffix was edited away."""

    kind: Literal["source_deleted"] = "source_deleted"
    source_message_id: str


class ConversationStarted(ActionBase):
    """``/<agent> start [workdir]``. Ingress resolves the path (``resolved`` is its real
    path, or None when it does not exist); the core checks it against the allowed roots."""

    kind: Literal["conversation_started"] = "conversation_started"
    agent: str
    requested_workdir: str
    resolved_workdir: str | None
    model: str | None = None
    system_instruction: str | None = None


class ConversationResumed(ActionBase):
    """``/<agent> resume <id>``: a conversation on an existing agent session."""

    kind: Literal["conversation_resumed"] = "conversation_resumed"
    agent: str
    session_id: str
    requested_workdir: str
    resolved_workdir: str | None
    model: str | None = None
    system_instruction: str | None = None


class ConversationEnded(ActionBase):
    kind: Literal["conversation_ended"] = "conversation_ended"


class WorkdirSet(ActionBase):
    kind: Literal["workdir_set"] = "workdir_set"
    requested_workdir: str
    resolved_workdir: str | None


class ModelChanged(ActionBase):
    """``/model <name>``: abort the active run and retry its prompt with the new model."""

    kind: Literal["model_changed"] = "model_changed"
    model: str


class StatusRequested(ActionBase):
    """``/status``. ``processes`` is what ingress knows that the core cannot (one line per
    process the thread's agent started through the process manager)."""

    kind: Literal["status"] = "status"
    processes: tuple[str, ...] = ()


class PermissionAnswered(ActionBase):
    kind: Literal["permission_answered"] = "permission_answered"
    request_id: str
    allow: bool
    author_id: str = ""


class QuestionAnswered(ActionBase):
    kind: Literal["question_answered"] = "question_answered"
    request_id: str
    answer: str
    author_id: str = ""


class ScheduleAdded(ActionBase):
    """``/schedule <when> <prompt>``, or an agent's wake-up (``wakeup``, from the MCP
    tool). Ingress turns ``when`` into ``due_at`` (its clock, its time zone) and, for a
    cron expression, keeps the expression in ``cron``; ``label`` is what the user said."""

    kind: Literal["schedule_added"] = "schedule_added"
    author_id: str
    author_name: str = ""
    text: str
    due_at: float
    cron: str | None = None
    label: str = ""
    wakeup: bool = False


class ScheduleCancelled(ActionBase):
    """``/schedule cancel <id>``."""

    kind: Literal["schedule_cancelled"] = "schedule_cancelled"
    schedule_id: str


class SchedulesListed(ActionBase):
    """``/schedule list``."""

    kind: Literal["schedules_listed"] = "schedules_listed"


class VerbositySet(ActionBase):
    """``/verbosity text|tools|all``: what this thread's runs show from now on."""

    kind: Literal["verbosity_set"] = "verbosity_set"
    verbosity: Verbosity


# --- the agent listener -----------------------------------------------------------------


class AgentEventReceived(ActionBase):
    """An agent event, stamped by the listener with the run and session it belongs to."""

    kind: Literal["agent_event"] = "agent_event"
    run_id: str | None
    session_id: str | None = None
    event: AgentEvent


# --- effect feedback (posted by the reactor) --------------------------------------------


class OutputPosted(ActionBase):
    """A chat output was delivered; ``message_ids`` are the platform's ids for it."""

    kind: Literal["output_posted"] = "output_posted"
    key: str
    message_ids: tuple[str, ...] = ()


class EffectFailed(ActionBase):
    """Applying an effect failed for good (after the reactor's own retries)."""

    kind: Literal["effect_failed"] = "effect_failed"
    effect: str
    key: str | None = None
    reason: str


class AgentConnected(ActionBase):
    """The agent process/connection is up (a listener (re)start)."""

    kind: Literal["agent_connected"] = "agent_connected"
    session_id: str | None = None


class AgentExited(ActionBase):
    """The agent process/connection went away. ``crashed`` unless we asked it to stop."""

    kind: Literal["agent_exited"] = "agent_exited"
    exit_code: int | None = None
    crashed: bool = True
    stderr_tail: str = ""


# --- runtime ----------------------------------------------------------------------------


class Tick(ActionBase):
    """A timer tick: lets the core time out interrupts and silent turns."""

    kind: Literal["tick"] = "tick"


class ScheduleDue(ActionBase):
    """The runtime's timer: schedule ``schedule_id`` came due at ``due_at`` (its time as
    the state has it, which makes a second delivery for the same time a no-op). For a cron
    schedule the timer computes ``next_due_at``, the first time after ``at``: occurrences
    missed while Spindle was down fire once, not once each."""

    kind: Literal["schedule_due"] = "schedule_due"
    schedule_id: str
    due_at: float
    next_due_at: float | None = None


class RuntimeRecovered(ActionBase):
    """The runtime restarted and rebuilt this thread from the log."""

    kind: Literal["runtime_recovered"] = "runtime_recovered"


class ThreadParked(ActionBase):
    """The runtime is putting this thread's actor away (shutdown, disposal, idle sweep):
    the active run is stopped and nothing is dispatched until the thread is woken by user
    ingress or ``RuntimeRecovered``. Queued prompts stay queued."""

    kind: Literal["thread_parked"] = "thread_parked"
    reason: str


class PolicySet(ActionBase):
    kind: Literal["policy_set"] = "policy_set"
    policy: Policy


Action = Annotated[
    UserMessage
    | QueueCommand
    | AbortRequested
    | QueueCleared
    | QueuedItemRemoved
    | SourceMessageEdited
    | SourceMessageDeleted
    | ConversationStarted
    | ConversationResumed
    | ConversationEnded
    | WorkdirSet
    | ModelChanged
    | StatusRequested
    | PermissionAnswered
    | QuestionAnswered
    | AgentEventReceived
    | OutputPosted
    | EffectFailed
    | AgentConnected
    | AgentExited
    | Tick
    | RuntimeRecovered
    | ThreadParked
    | PolicySet
    | ScheduleAdded
    | ScheduleCancelled
    | SchedulesListed
    | ScheduleDue
    | VerbositySet,
    Field(discriminator="kind"),
]
