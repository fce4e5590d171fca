"""The workspace part of a thread's state: checkpoints, the running shell command, the
pending slow workspace job (worktree, undo, redo) and the worktree the thread works in.

Frozen values like the rest of ``runtime.core.model``; ``ThreadState.workspace`` holds one
``Workspace`` and ``Policy.workspace`` one ``WorkspacePolicy``.
"""

from __future__ import annotations

from typing import Literal

from threadspindle.runtime.core.frozen import Frozen

__all__ = ["Checkpoint", "PendingJob", "ShellRun", "Workspace", "WorkspacePolicy", "Worktree"]


class WorkspacePolicy(Frozen):
    """What the runtime's configuration allows (set with the rest of ``Policy``)."""

    checkpoints: bool = False  # record a checkpoint of the workdir before each run
    footer_changes: bool = False  # the run's footer gets its change summary
    shell_users: tuple[str, ...] = ()  # who may run `!` / /shell commands (none by default)
    # `!` runs through the agent's own shell where it has one (Codex thread/shellCommand,
    # OpenCode's session shell), so the agent sees it; else Spindle runs it directly.
    shell_via_agent: bool = False


class Checkpoint(Frozen):
    """The workdir as it was before run ``run_id``: a commit on a private ref."""

    run_id: str
    commit: str
    ref: str
    workdir: str
    undone: str | None = None  # /undo saved the state it replaced as this commit (redo target)
    files: tuple[str, ...] = ()  # the files the last undo/redo restored
    # Where the run's turn is in the agent's own conversation: "in" it; "hidden" (rolled
    # back natively, and the agent can bring it back: /redo); "gone" (rolled back for good,
    # or another session, or before a compaction: only a note can tell the agent).
    conversation: Literal["in", "hidden", "gone"] = "in"


class ShellRun(Frozen):
    """A `!` command running in the workdir, shown as a tool card (``key``)."""

    id: str
    key: str
    header: str
    tail: str = ""  # the last output, bounded
    binary_bytes: int = 0
    via_agent: bool = False  # in the agent's own shell (docs/workspaces.md)


class PendingJob(Frozen):
    """A slow workspace job the queue waits for (worktree new/merge, undo, redo)."""

    id: str
    op: str
    native: bool = False  # undo/redo: the agent's conversation was rolled back natively


class Worktree(Frozen):
    """The Spindle worktree the conversation was moved into."""

    name: str
    path: str
    branch: str
    base: str | None = None  # the branch it was made from: the default merge target


class Workspace(Frozen):
    checkpoints: tuple[Checkpoint, ...] = ()  # oldest first; undone ones form the tail
    base_commit: str | None = None  # the first checkpoint of the conversation (/diff)
    shell: ShellRun | None = None
    job: PendingJob | None = None
    # Read-only jobs (/diff, /worktree list) whose answer has not come yet: they hold no
    # queue, but the thread is not idle until they answer (a piped console's /wait).
    reads: tuple[PendingJob, ...] = ()
    worktree: Worktree | None = None
    agent_note: str | None = None  # told to the agent with the next prompt (undo, redo)
    agent_session: str | None = None  # the session the checkpoints' turns are in
