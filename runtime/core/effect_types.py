"""What a transition asks the outside world to do, as one discriminated union: ``Effect``.

The reactor applies effects after their action is committed, through the ``effects/``
package, and reports back only by posting actions. Every chat output carries a stable
idempotency ``key`` (thread, run, part): it is posted at most once, ever. Persistence is not
an effect: the action log is the persistence.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from threadspindle.runtime.core.frozen import Frozen
from threadspindle.runtime.core.model import Attachment, Conversation

__all__ = [
    "AnswerPermission",
    "AnswerQuestion",
    "AppendOutput",
    "Button",
    "DismissPrompt",
    "EditOutput",
    "Effect",
    "InterruptAgent",
    "LogNote",
    "OpenThread",
    "OutputKind",
    "PostFile",
    "PostOutput",
    "PromptAgent",
    "RenameThread",
    "ReplyToCommand",
    "SealOutput",
    "ShowPermissionPrompt",
    "ShowQuestion",
    "StartAgent",
    "SteerAgent",
    "StopAgent",
    "Typing",
    "CheckpointWorkdir",
    "WorkspaceJob",
    "RunShell",
    "StopShell",
    "RollbackAgent",
    "WORKSPACE_EFFECTS",
]

# "status": one line the run keeps up to date by ``EditOutput`` (the model API's retries).
OutputKind = Literal["text", "thinking", "tool", "footer", "notice", "marker", "status"]


class Button(Frozen):
    label: str
    action: str  # an ingress-defined id, e.g. "remove_queued:<item id>"


class PostOutput(Frozen):
    """Open a new chat output. Streamed kinds (text, thinking) grow by ``AppendOutput``."""

    type: Literal["post_output"] = "post_output"
    key: str
    kind: OutputKind
    text: str
    run_id: str | None = None


class PostFile(Frozen):
    """Post ``content`` as a file attachment ``filename`` with a short ``caption`` (the
    /diff patch) where the platform takes files; elsewhere ``fallback`` is posted as text
    (paged like any long output). Posted once per ``key`` like a ``PostOutput``."""

    type: Literal["post_file"] = "post_file"
    key: str
    filename: str
    content: str
    caption: str
    fallback: str


class AppendOutput(Frozen):
    """Append a delta to a streamed output; ``seq`` orders appends and makes them idempotent."""

    type: Literal["append_output"] = "append_output"
    key: str
    seq: int
    text: str


class EditOutput(Frozen):
    """Replace an output's whole text (a tool card getting its result)."""

    type: Literal["edit_output"] = "edit_output"
    key: str
    text: str


class SealOutput(Frozen):
    """A streamed output is complete: flush it now, nothing more will be appended."""

    type: Literal["seal_output"] = "seal_output"
    key: str


class Typing(Frozen):
    type: Literal["typing"] = "typing"
    on: bool


class ShowPermissionPrompt(Frozen):
    type: Literal["show_permission"] = "show_permission"
    key: str
    request_id: str
    tool: str
    detail: str


class ShowQuestion(Frozen):
    type: Literal["show_question"] = "show_question"
    key: str
    request_id: str
    question: str
    options: tuple[str, ...] = ()
    multiple: bool = False


class DismissPrompt(Frozen):
    """Close a rendered permission/question prompt, saying how it ended."""

    type: Literal["dismiss_prompt"] = "dismiss_prompt"
    key: str
    request_id: str
    outcome: str


class ReplyToCommand(Frozen):
    """Answer a user command (``/queue``, ``/status``, a refusal ...)."""

    type: Literal["reply"] = "reply"
    key: str
    action_id: str
    text: str
    ephemeral: bool = False
    buttons: tuple[Button, ...] = ()


class RenameThread(Frozen):
    """Give the chat thread a new name (the agent's session title). The platform's rate
    limit (Discord: 2 renames per 10 minutes) is the renderer's business: it coalesces
    renames that come too fast to the latest title."""

    type: Literal["rename_thread"] = "rename_thread"
    title: str


class StartAgent(Frozen):
    """Make sure the agent process/connection runs for this conversation (resuming a
    session when ``session_id`` is known)."""

    type: Literal["start_agent"] = "start_agent"
    agent: str
    workdir: str
    session_id: str | None = None
    model: str | None = None
    system_instruction: str | None = None
    fork_of: str | None = None  # the conversation's (``Conversation.fork_of``)

    @property
    def fork(self) -> bool:
        """``session_id`` is to be forked (a new session continuing a copy), not resumed."""
        return self.fork_of is not None and self.fork_of == self.session_id

    @classmethod
    def of(cls, source: Conversation | PromptAgent) -> StartAgent:
        """The one way to build it: the agent a conversation (or a prompt, which carries
        its conversation) needs running."""
        return cls(
            agent=source.agent,
            workdir=source.workdir,
            session_id=source.session_id,
            model=source.model,
            system_instruction=source.system_instruction,
            fork_of=source.fork_of,
        )


class PromptAgent(Frozen):
    """Start a turn. The listener stamps the turn's events with ``run_id``."""

    type: Literal["prompt_agent"] = "prompt_agent"
    run_id: str
    text: str
    attachments: tuple[Attachment, ...] = ()
    agent: str
    workdir: str
    session_id: str | None = None
    model: str | None = None
    system_instruction: str | None = None
    command: str | None = None  # "compact": run the CLI's compaction instead of a prompt
    fork_of: str | None = None  # the conversation's (see ``Conversation.fork_of``)


class InterruptAgent(Frozen):
    """End the turn ``run_id`` in-band, keeping the process alive."""

    type: Literal["interrupt_agent"] = "interrupt_agent"
    run_id: str


class SteerAgent(Frozen):
    """Hand ``text`` to the running turn ``run_id`` without aborting it. The adapter
    answers with ``SteerTaken`` or ``SteerRefused`` for ``steer_id``; ``key`` names this
    steer in an ``EffectFailed``."""

    type: Literal["steer_agent"] = "steer_agent"
    key: str
    run_id: str
    steer_id: str
    text: str
    attachments: tuple[Attachment, ...] = ()


class StopAgent(Frozen):
    """Stop the agent process tree (interrupt, SIGINT, SIGTERM, SIGKILL)."""

    type: Literal["stop_agent"] = "stop_agent"
    reason: str


class AnswerPermission(Frozen):
    type: Literal["answer_permission"] = "answer_permission"
    request_id: str
    allow: bool


class AnswerQuestion(Frozen):
    type: Literal["answer_question"] = "answer_question"
    request_id: str
    answer: str | None  # None: the question was dismissed


class OpenThread(Frozen):
    """Open a new chat thread beside this one (``/fork``, ``/btw``) whose conversation
    continues a fork of ``session_id``, with ``prompt`` as its first prompt if any. The
    runtime asks the platform for the thread, seeds it with those actions, and reports
    ``ThreadForked`` (or ``EffectFailed``) with ``key``."""

    type: Literal["open_thread"] = "open_thread"
    key: str
    title: str
    agent: str
    workdir: str
    session_id: str
    model: str | None = None
    system_instruction: str | None = None
    prompt: str | None = None
    author_id: str = ""
    author_name: str = ""


class LogNote(Frozen):
    """Not user-visible: why an action was ignored or rejected, for the caller to log."""

    type: Literal["log_note"] = "log_note"
    level: Literal["debug", "info", "warning"]
    message: str


# --- workspaces (docs/workspaces.md): applied by the thread's ``WorkspacePort`` -----------


class CheckpointWorkdir(Frozen):
    """Record the workdir before run ``run_id`` (a commit on a private ref); the prompt
    after it waits for it. Reported back as ``CheckpointTaken``."""

    type: Literal["checkpoint_workdir"] = "checkpoint_workdir"
    run_id: str
    workdir: str


class WorkspaceJob(Frozen):
    """Slow workspace work, run outside the actor; reported as ``WorkspaceJobFinished``.
    ``op``: undo, redo, diff, changes (a run's summary), worktree_new|list|remove|merge."""

    type: Literal["workspace_job"] = "workspace_job"
    job_id: str
    op: str
    workdir: str
    name: str | None = None
    ref: str | None = None
    commit: str | None = None  # undo/redo: the state to restore; diff/changes: the base
    run_id: str | None = None
    force: bool = False
    key: str | None = None  # changes: the footer to extend
    text: str = ""  # changes: the footer's text


class RunShell(Frozen):
    """Run a shell command in the workdir, reporting ``ShellOutput`` and ``ShellFinished``."""

    type: Literal["run_shell"] = "run_shell"
    shell_id: str
    command: str
    workdir: str
    # Through the agent's own shell (``AgentPort.shell``) when it runs one, so the agent
    # sees the command and its output; else (or without one) Spindle runs it directly.
    via_agent: StartAgent | None = None


class RollbackAgent(Frozen):
    """/undo, /redo: roll the agent's own conversation back (``op`` undo: hide the last
    ``turns`` turns it still has, the run ``run_id``'s the earliest of them) or forward (redo:
    bring back the turn of ``run_id``, keeping the ``turns`` after it hidden). Applied on the
    agent lane before the job ``job_id`` restores the files (the CLI's own file restore, if
    any, is overwritten by git's); answered by ``ConversationRolledBack``."""

    type: Literal["rollback_agent"] = "rollback_agent"
    job_id: str
    op: Literal["undo", "redo"]
    run_id: str
    turns: int
    start: StartAgent  # the agent to (re)start for it when none runs


class StopShell(Frozen):
    """Stop the shell command's whole process tree (``/abort``, parking)."""

    type: Literal["stop_shell"] = "stop_shell"
    shell_id: str


Effect = Annotated[
    PostOutput
    | PostFile
    | AppendOutput
    | EditOutput
    | SealOutput
    | Typing
    | ShowPermissionPrompt
    | ShowQuestion
    | DismissPrompt
    | ReplyToCommand
    | RenameThread
    | StartAgent
    | PromptAgent
    | InterruptAgent
    | SteerAgent
    | StopAgent
    | AnswerPermission
    | AnswerQuestion
    | OpenThread
    | LogNote
    | CheckpointWorkdir
    | WorkspaceJob
    | RunShell
    | StopShell
    | RollbackAgent,
    Field(discriminator="type"),
]

# Effects that create a new keyed chat output: each key appears at most once, ever.
KEYED_POSTS = (PostOutput, PostFile, ShowPermissionPrompt, ShowQuestion, ReplyToCommand)

# Effects for the thread's workspace port (``runtime.live.ports.WorkspacePort``).
WORKSPACE_EFFECTS = (CheckpointWorkdir, WorkspaceJob, RunShell, StopShell)
