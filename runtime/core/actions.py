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
from threadspindle.runtime.core.model import AgentCapabilities, Attachment, Policy, Verbosity

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
    "ForkRequested",
    "ThreadForked",
    "CompactRequested",
    "SteerCommand",
    "ThreadParked",
    "Tick",
    "UserMessage",
    "VerbositySet",
    "WorkdirSet",
    "WorkspaceCommand",
    "ShellRequested",
    "CheckpointTaken",
    "WorkspaceJobFinished",
    "ConversationRolledBack",
    "ShellOutput",
    "ShellFinished",
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


class SteerCommand(ActionBase):
    """``/steer <message>`` (or the `` steer`` suffix): add the message to the running turn
    without aborting it; with no run active it is a normal prompt."""

    kind: Literal["steer_command"] = "steer_command"
    author_id: str
    author_name: str = ""
    text: str
    attachments: tuple[Attachment, ...] = ()
    source_message_id: str | None = None


class CompactRequested(ActionBase):
    """``/compact``: the agent compacts (summarises) its conversation, as a run of its own
    queued like ``/queue`` (it never interrupts)."""

    kind: Literal["compact"] = "compact"
    author_id: str
    author_name: str = ""


class ForkRequested(ActionBase):
    """``/fork`` (``question`` None): a new thread continuing this conversation from here;
    ``/btw <question>``: the same, with ``question`` as its first prompt, while this
    thread's run goes on untouched."""

    kind: Literal["fork"] = "fork"
    author_id: str
    author_name: str = ""
    question: str | None = None


class ThreadForked(ActionBase):
    """Feedback: the platform opened the fork's thread (``label``: how to name it there)."""

    kind: Literal["thread_forked"] = "thread_forked"
    key: str
    new_thread_id: str
    label: str


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
    fork: bool = False  # continue a copy of the session (a new session id), not the session


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
    capabilities: AgentCapabilities | None = None  # what the adapter declares it can do


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


# --- workspaces: checkpoints, undo, diff, shell, worktrees (docs/workspaces.md) ---------

WorkspaceOp = Literal[
    "undo", "redo", "diff", "worktree_new", "worktree_list", "worktree_remove", "worktree_merge"
]


class WorkspaceCommand(ActionBase):
    """``/undo``, ``/redo``, ``/diff [base]``, ``/worktree new|list|remove|merge``."""

    kind: Literal["workspace_command"] = "workspace_command"
    op: WorkspaceOp
    author_id: str = ""
    name: str | None = None  # the worktree's name (new, remove)
    ref: str | None = None  # the base (new), the target (merge), "base" (diff)
    force: bool = False  # remove even with uncommitted changes


class ShellRequested(ActionBase):
    """A message starting with ``!``, or ``/shell <command>``."""

    kind: Literal["shell_requested"] = "shell_requested"
    author_id: str
    author_name: str = ""
    command: str
    # Through the agent's own shell (the channel's setting); None: the runtime's policy.
    via_agent: bool | None = None


class CheckpointTaken(ActionBase):
    """The checkpoint before run ``run_id`` was recorded (``commit`` None: it could not be,
    e.g. the workdir is no git repository; ``reason`` says why)."""

    kind: Literal["checkpoint_taken"] = "checkpoint_taken"
    run_id: str
    workdir: str
    commit: str | None = None
    ref: str | None = None
    reason: str = ""


class WorkspaceJobFinished(ActionBase):
    """A workspace job (``WorkspaceJob`` effect) ended; what it found or did."""

    kind: Literal["workspace_job_finished"] = "workspace_job_finished"
    job_id: str
    op: str
    ok: bool
    text: str  # the summary shown in the thread
    detail: str = ""  # longer text shown after it, paged (a patch, a listing)
    # diff: the whole patch (bounded), attached as a file where the platform takes files
    # (``detail`` is then shown only where it does not).
    patch: str = ""
    commit: str | None = None  # undo/redo: the commit holding the state it replaced
    path: str | None = None  # worktree_new: the worktree's directory
    branch: str | None = None
    base: str | None = None
    files: tuple[str, ...] = ()
    run_id: str | None = None  # undo/redo: the run whose checkpoint it was
    edit_key: str | None = None  # changes: the footer to replace with ``text``


class ConversationRolledBack(ActionBase):
    """What became of a ``RollbackAgent``: ``ok`` the agent's conversation was rolled back
    (undo) or forward (redo) natively; ``restorable``: an undone turn can come back (redo);
    else ``detail`` says why not (the agent cannot; the CLI refused)."""

    kind: Literal["conversation_rolled_back"] = "conversation_rolled_back"
    job_id: str
    op: str
    run_id: str
    ok: bool
    restorable: bool = False
    detail: str = ""


class ShellOutput(ActionBase):
    """More output of a running shell command (``binary_bytes``: bytes not shown)."""

    kind: Literal["shell_output"] = "shell_output"
    shell_id: str
    text: str = ""
    binary_bytes: int = 0


class ShellFinished(ActionBase):
    kind: Literal["shell_finished"] = "shell_finished"
    shell_id: str
    outcome: Literal["exited", "timed_out", "aborted", "failed"]
    exit_code: int | None = None
    detail: str = ""
    duration_s: float = 0.0


Action = Annotated[
    UserMessage
    | QueueCommand
    | SteerCommand
    | CompactRequested
    | ForkRequested
    | ThreadForked
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
    | WorkspaceCommand
    | ShellRequested
    | CheckpointTaken
    | WorkspaceJobFinished
    | ConversationRolledBack
    | ShellOutput
    | ShellFinished
    | ScheduleAdded
    | ScheduleCancelled
    | SchedulesListed
    | ScheduleDue
    | VerbositySet,
    Field(discriminator="kind"),
]
