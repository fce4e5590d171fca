"""Handlers for the thread's workspace: checkpoints before runs, /undo and /redo, /diff,
`!` shell commands and /worktree, and ``after_step``, the hook ``transitions`` calls after
every action (checkpoint before each prompt, the undo note for the agent, the footer's
change summary, tidying up after a restart or park).

Pure like the rest of the core: git and processes are effects (``CheckpointWorkdir``,
``WorkspaceJob``, ``RunShell``, ``StopShell``) applied by the thread's workspace port;
what they find comes back as actions (``CheckpointTaken``, ``WorkspaceJobFinished``,
``ShellOutput``, ``ShellFinished``). A job that changes the workdir (worktree new/merge,
undo, redo) is ``Workspace.job``: while it is pending, no prompt is dispatched
(``guards.can_dispatch_next``), so prompts sent meanwhile wait in the queue.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from threadspindle.runtime.core import actions as A
from threadspindle.runtime.core import effect_types as F
from threadspindle.runtime.core.guards import is_busy
from threadspindle.runtime.core.transition_step import Step, restart_agent, workdir_problem
from threadspindle.runtime.core.workspace_model import (
    Checkpoint,
    PendingJob,
    ShellRun,
    Workspace,
    Worktree,
)

__all__ = ["HANDLERS", "after_step", "before_drain", "stop_shell", "workspace_busy"]

MAX_CHECKPOINTS = 64  # the state remembers this many; git prunes its refs by configuration
SHELL_TAIL_CHARS = 1500  # a shell card shows at most this much of the output (its end)
SHELL_HEADER_CHARS = 200
NOTE_FILES = 20  # the agent's undo note names at most this many files
PATCH_FILENAME = "changes.diff"  # /diff's patch, attached where the platform takes files
# Jobs that change files: the queue waits for them, and one cut short by a restart or a
# park is reported (a removal asked for and then lost was silent before).
BLOCKING_OPS = ("undo", "redo", "worktree_new", "worktree_merge", "worktree_remove")
READ_OPS = ("diff", "worktree_list")  # they change nothing: tracked in ``Workspace.reads``
MAX_READS = 8  # read-only jobs tracked at once (more are answered all the same)
# CLIs whose sessions are not tied to the directory they were started in: a conversation
# moved into a worktree keeps its session with them (docs/workspaces.md).
SESSION_FOLLOWS_WORKDIR = ("codex",)


def workspace_busy(ws: Workspace) -> bool:
    """A job that changes the workdir is pending: dispatch waits for it."""
    return ws.job is not None


def _ws(step: Step) -> Workspace:
    return step.state.workspace


def _set_ws(step: Step, **update: object) -> None:
    step.set(workspace=_ws(step).replace(**update))


def _notice(step: Step, suffix: str, text: str) -> None:
    """A workspace message outside any run (a job's result), keyed by the action."""
    step.emit(
        F.PostOutput(
            key=f"{step.thread}/ws/{step.action.action_id}/{suffix}", kind="notice", text=text
        )
    )


# --- commands ----------------------------------------------------------------------------


def on_workspace_command(step: Step, a: A.WorkspaceCommand) -> None:
    conv = step.state.conversation
    if conv is None:
        step.refuse(
            "No conversation here: start one with /<agent> start <workdir> first.",
            f"{a.op} without a conversation",
            "rejected",
        )
        return
    if a.op in ("diff", "worktree_list"):
        _start_job(step, a, conv.workdir, blocking=False)
        return
    if _ws(step).job is not None:
        step.refuse(
            f"A workspace operation ({_ws(step).job.op}) is still running: wait for it.",  # type: ignore[union-attr]
            f"{a.op} while a workspace job runs",
            "rejected",
        )
        return
    if a.op == "worktree_remove":
        wt = _ws(step).worktree
        if wt is not None and wt.name == a.name:
            step.refuse(
                f"This thread works in worktree {a.name}: move it elsewhere first "
                "(/workdir set) or /worktree merge it.",
                "remove of the thread's own worktree",
                "rejected",
            )
            return
        _start_job(step, a, conv.workdir, blocking=True)
        return
    if is_busy(step.state):
        step.refuse(
            f"A run is active: /abort it (or wait for it) before /{_command_name(a.op)}.",
            f"{a.op} while busy",
            "rejected",
        )
        return
    if a.op in ("undo", "redo"):
        _undo_or_redo(step, a, conv.workdir)
        return
    if a.op == "worktree_merge" and a.ref is None and _ws(step).worktree is not None:
        a = a.replace(ref=_ws(step).worktree.base)  # type: ignore[union-attr]
    _start_job(step, a, conv.workdir, blocking=a.op in BLOCKING_OPS)


def _command_name(op: str) -> str:
    return op.replace("_", " ")


def _start_job(
    step: Step,
    a: A.WorkspaceCommand,
    workdir: str,
    *,
    blocking: bool,
    commit: str | None = None,
    run_id: str | None = None,
) -> None:
    job_id = a.action_id
    if a.op == "diff":
        ws = _ws(step)
        # "/diff": since the conversation's first checkpoint; "/diff base": vs the
        # worktree's base (the job finds the merge base with ``ref``).
        if a.ref == "base" and ws.worktree is not None:
            a = a.replace(ref=ws.worktree.base or "HEAD")
        elif a.ref == "base":
            a = a.replace(ref="HEAD")
        else:
            commit = ws.base_commit
    step.emit(
        F.WorkspaceJob(
            job_id=job_id,
            op=a.op,
            workdir=workdir,
            name=a.name,
            ref=a.ref,
            commit=commit,
            run_id=run_id,
            force=a.force,
        )
    )
    if blocking:
        _set_ws(step, job=PendingJob(id=job_id, op=a.op))
    elif a.op in READ_OPS:
        reads = _ws(step).reads + (PendingJob(id=job_id, op=a.op),)
        _set_ws(step, reads=reads[-MAX_READS:])
    step.reply(_started_text(a), ephemeral=a.op in ("diff", "worktree_list"))


def _started_text(a: A.WorkspaceCommand) -> str:
    if a.op == "worktree_new":
        return (
            f"Creating worktree {a.name} (branch spindle/{a.name}); prompts sent meanwhile "
            "wait in the queue."
        )
    if a.op == "worktree_merge":
        target = a.ref or "the repository's current branch"
        return f"Merging this worktree into {target}…"
    if a.op == "worktree_remove":
        return f"Removing worktree {a.name}…"
    if a.op == "diff":
        return "Computing the diff…"
    if a.op == "worktree_list":
        return "Listing worktrees…"
    return f"/{a.op} running…"


def _undo_or_redo(step: Step, a: A.WorkspaceCommand, workdir: str) -> None:
    here = [c for c in _ws(step).checkpoints if c.workdir == workdir]
    commit: str | None
    if a.op == "undo":
        target = next((c for c in reversed(here) if c.undone is None), None)
        if target is None:
            step.refuse("Nothing to undo: no run was checkpointed here.", "nothing to undo")
            return
        commit = target.commit
    else:
        target = next((c for c in here if c.undone is not None), None)
        if target is None:
            step.refuse("Nothing to redo.", "nothing to redo")
            return
        commit = target.undone
    _rollback_conversation(step, a, target)
    _start_job(step, a, workdir, blocking=True, commit=commit, run_id=target.run_id)


def _rollback_conversation(step: Step, a: A.WorkspaceCommand, target: Checkpoint) -> None:
    """Ask the agent to roll its conversation back (undo) or forward (redo) natively when
    it can (or when it is not known yet: the reactor asks it once started). The effect goes
    before the job: the CLI's own file restore, if it makes one, is overwritten by git's."""
    conv, caps = step.state.conversation, step.state.capabilities
    if conv is None or conv.session_id is None:
        return
    checkpoints = _ws(step).checkpoints
    later = checkpoints[checkpoints.index(target) :]
    if a.op == "undo":
        able = caps is None or caps.rollback
        # The visible turns from the target's on are hidden with it.
        turns = sum(1 for c in later if c.conversation == "in")
        wanted = target.conversation == "in"
    else:
        able = caps is None or caps.restore
        turns = sum(1 for c in later[1:] if c.conversation == "hidden")  # stay hidden
        wanted = target.conversation == "hidden"
    if not (able and wanted):
        return
    step.emit(
        F.RollbackAgent(
            job_id=a.action_id,
            op=a.op,  # type: ignore[arg-type]
            run_id=target.run_id,
            turns=turns,
            start=F.StartAgent.of(conv),
        )
    )


def on_conversation_rolled_back(step: Step, a: A.ConversationRolledBack) -> None:
    ws = _ws(step)
    if not a.ok:
        step.record(f"the agent's conversation was not rolled back ({a.op}): {a.detail}")
        return
    checkpoints = list(ws.checkpoints)
    index = next((i for i, c in enumerate(checkpoints) if c.run_id == a.run_id), None)
    if index is None:
        step.record(f"{a.op} of the conversation for an unknown checkpoint ({a.run_id})")
        return
    if a.op == "undo":
        hidden = "hidden" if a.restorable else "gone"
        for i in range(index, len(checkpoints)):
            if checkpoints[i].conversation == "in":
                checkpoints[i] = checkpoints[i].replace(conversation=hidden)
    else:
        checkpoints[index] = checkpoints[index].replace(conversation="in")
    job = ws.job
    if job is not None and job.id == a.job_id:
        job = job.replace(native=True)
    _set_ws(step, checkpoints=tuple(checkpoints), job=job)


def on_shell_requested(step: Step, a: A.ShellRequested) -> None:
    state = step.state
    conv = state.conversation
    if a.author_id not in state.policy.workspace.shell_users:
        step.refuse(
            "Shell commands are not enabled for you here: the bot's owner allows them per "
            "user (workspaces.shell_users).",
            "shell command from a user not allowed",
            "rejected",
        )
        return
    if conv is None:
        step.refuse(
            "No conversation here: a shell command runs in its workdir; start one first.",
            "shell without a conversation",
            "rejected",
        )
        return
    if not a.command.strip():
        step.refuse("Usage: !<command> or /shell <command>.", "empty shell command", "rejected")
        return
    if _ws(step).shell is not None:
        step.refuse(
            "A shell command is already running here: /abort stops it.",
            "shell while one runs",
            "rejected",
        )
        return
    command = " ".join(a.command.split("\n")[0].split()) + (" …" if "\n" in a.command else "")
    header = f"$ {command[:SHELL_HEADER_CHARS]}"
    key = f"{step.thread}/shell/{a.action_id}"
    caps = state.capabilities
    wanted = state.policy.workspace.shell_via_agent if a.via_agent is None else a.via_agent
    via_agent = wanted and caps is not None and caps.shell
    step.emit(F.PostOutput(key=key, kind="tool", text=f"{header}\n… running"))
    step.emit(
        F.RunShell(
            shell_id=a.action_id,
            command=a.command,
            workdir=conv.workdir,
            via_agent=F.StartAgent.of(conv) if via_agent else None,
        )
    )
    if via_agent:
        _forget_turns(step)  # the agent's shell adds a turn of its own to its conversation
    _set_ws(step, shell=ShellRun(id=a.action_id, key=key, header=header, via_agent=via_agent))


def _shell_card(shell: ShellRun, status: str) -> str:
    body = shell.tail
    if len(body) >= SHELL_TAIL_CHARS:
        body = "…" + body[-SHELL_TAIL_CHARS:]
    parts = [shell.header]
    if body.strip():
        parts.append(f"```\n{body.rstrip()}\n```")
    if shell.binary_bytes:
        parts.append(f"({shell.binary_bytes} bytes of binary output not shown)")
    parts.append(status)
    return "\n".join(parts)


def on_shell_output(step: Step, a: A.ShellOutput) -> None:
    shell = _ws(step).shell
    if shell is None or shell.id != a.shell_id:
        step.record(f"output of shell {a.shell_id} that is not running", "stale_drops")
        return
    tail = (shell.tail + a.text)[-(SHELL_TAIL_CHARS + 1) :]
    shell = shell.replace(tail=tail, binary_bytes=shell.binary_bytes + a.binary_bytes)
    _set_ws(step, shell=shell)
    step.emit(F.EditOutput(key=shell.key, text=_shell_card(shell, "… running")))


def on_shell_finished(step: Step, a: A.ShellFinished) -> None:
    shell = _ws(step).shell
    if shell is None or shell.id != a.shell_id:
        step.record(f"end of shell {a.shell_id} that is not running", "stale_drops")
        return
    took = f" · {a.duration_s:.1f}s"
    if a.outcome == "exited" and a.exit_code is None:
        status = f"→ done{took}"  # the agent's shell did not say its exit code
    elif a.outcome == "exited":
        status = ("→ exit 0" if a.exit_code == 0 else f"✗ exit {a.exit_code}") + took
    elif a.outcome == "timed_out":
        status = f"✗ time limit reached: stopped{took}"
    elif a.outcome == "aborted":
        status = f"■ aborted{took}"
    else:
        status = f"✗ could not run: {a.detail}"
    step.emit(F.EditOutput(key=shell.key, text=_shell_card(shell, status)))
    _set_ws(step, shell=None)


def stop_shell(step: Step, why: str) -> bool:
    """Stop the running shell command (``/abort``, parking); False when none runs."""
    shell = _ws(step).shell
    if shell is None:
        return False
    step.emit(F.StopShell(shell_id=shell.id))
    if why != "aborted":
        # Its ShellFinished may never come (the thread is going away): close the card now.
        step.emit(F.EditOutput(key=shell.key, text=_shell_card(shell, f"■ stopped ({why})")))
        _set_ws(step, shell=None)
    return True


# --- results -----------------------------------------------------------------------------


def on_checkpoint_taken(step: Step, a: A.CheckpointTaken) -> None:
    if a.commit is None or a.ref is None:
        step.record(f"no checkpoint before {a.run_id}: {a.reason}")
        return
    ws = _ws(step)
    # A new run after /undo: what was undone can no longer be redone (its refs stay).
    kept = tuple(c for c in ws.checkpoints if c.undone is None and c.run_id != a.run_id)
    run = step.state.run
    # A compaction's turn replaces the conversation: no native rollback reaches past it.
    compact = run is not None and run.id == a.run_id and run.prompt.command == "compact"
    checkpoint = Checkpoint(
        run_id=a.run_id,
        commit=a.commit,
        ref=a.ref,
        workdir=a.workdir,
        conversation="gone" if compact else "in",
    )
    _set_ws(
        step,
        checkpoints=(kept + (checkpoint,))[-MAX_CHECKPOINTS:],
        base_commit=ws.base_commit or a.commit,
    )


def on_job_finished(step: Step, a: A.WorkspaceJobFinished) -> None:
    ws = _ws(step)
    native = False
    if any(r.id == a.job_id for r in ws.reads):
        _set_ws(step, reads=tuple(r for r in ws.reads if r.id != a.job_id))
    if ws.job is not None and ws.job.id == a.job_id:
        native = ws.job.native
        _set_ws(step, job=None)
    elif a.op in BLOCKING_OPS:
        # Its job was given up (a restart, parking): the result still says what happened.
        step.note = f"result of a workspace job given up: {a.op} {a.job_id}"
    handler = _RESULTS.get(a.op)
    if a.op in ("undo", "redo"):
        _on_undo_redo(step, a, native=native)
    elif handler is not None:
        handler(step, a)
    else:
        step.record(f"result of unknown workspace job {a.op}")


_NATIVE = {
    "undo": "The agent's conversation was rolled back too: it no longer has that turn.",
    "redo": "The agent's conversation has that turn again.",
}


def _show_result(step: Step, a: A.WorkspaceJobFinished) -> None:
    _notice(step, "0", a.text if a.ok else f"⚠ {a.text}")
    if a.patch:
        lines = len(a.patch.splitlines())
        step.emit(
            F.PostFile(
                key=f"{step.thread}/ws/{step.action.action_id}/1",
                filename=PATCH_FILENAME,
                content=a.patch,
                caption=f"The whole patch ({lines} lines).",
                fallback=a.detail or f"```diff\n{a.patch}\n```",
            )
        )
    elif a.detail:
        _notice(step, "1", a.detail)


def _on_undo_redo(step: Step, a: A.WorkspaceJobFinished, *, native: bool) -> None:
    if native:
        a = a.replace(text=f"{a.text}\n{_NATIVE[a.op]}")
    _show_result(step, a)
    if not a.ok:
        return
    ws = _ws(step)
    checkpoints = list(ws.checkpoints)
    # Undo takes the last checkpoint not undone, redo the first undone one: the undone
    # ones stay the tail of the list.
    done = [i for i, c in enumerate(checkpoints) if c.undone is None]
    undone = [i for i, c in enumerate(checkpoints) if c.undone is not None]
    candidates = done[-1:] if a.op == "undo" else undone[:1]
    if not candidates or checkpoints[candidates[0]].run_id != a.run_id:
        step.record(f"{a.op} result for a checkpoint no longer next ({a.run_id})")
        return
    i = candidates[0]
    checkpoints[i] = checkpoints[i].replace(
        undone=a.commit if a.op == "undo" else None, files=a.files
    )
    if native:
        # The agent's own conversation says it: no note (it would name a turn it lacks).
        _set_ws(step, checkpoints=tuple(checkpoints))
        return
    files = ", ".join(a.files[:NOTE_FILES]) + (" …" if len(a.files) > NOTE_FILES else "")
    if a.op == "undo":
        note = (
            f"[Spindle: the user ran /undo. The files changed by the turn {a.run_id} were put "
            f"back as they were before it ({files or 'no file differed'}). Those changes are "
            "no longer in the workdir: do not assume them.]"
        )
    else:
        note = (
            f"[Spindle: the user ran /redo. The changes of the turn {a.run_id} that had been "
            f"undone are back in the workdir ({files or 'no file differed'}).]"
        )
    earlier = ws.agent_note
    _set_ws(
        step,
        checkpoints=tuple(checkpoints),
        agent_note=f"{earlier}\n{note}" if earlier else note,
    )


def _on_worktree_new(step: Step, a: A.WorkspaceJobFinished) -> None:
    conv = step.state.conversation
    if not a.ok or a.path is None:
        _show_result(step, a)
        return
    problem = workdir_problem(step, a.path, a.path)
    if problem or conv is None:
        _show_result(
            step,
            a.replace(
                ok=False,
                text=f"The worktree was created at {a.path}, but the conversation stays: "
                f"{problem or 'it has ended'} (set workspaces.worktree_dir inside them).",
            ),
        )
        return
    keep_session = conv.agent in SESSION_FOLLOWS_WORKDIR
    step.set(
        conversation=conv.replace(
            workdir=a.path, session_id=conv.session_id if keep_session else None
        )
    )
    _set_ws(
        step,
        worktree=Worktree(
            name=(a.branch or "").removeprefix("spindle/"),
            path=a.path,
            branch=a.branch or "",
            base=a.base,
        ),
        base_commit=None,
    )
    if not keep_session:
        _forget_turns(step, new_session=True)
    restart_agent(step, "moved into a worktree")
    how = "its session resumed" if keep_session and conv.session_id else "a new session"
    _show_result(step, a.replace(text=f"{a.text}\nThe {conv.agent} agent restarts there ({how})."))


_RESULTS: dict[str, Callable[[Step, A.WorkspaceJobFinished], None]] = {
    "diff": _show_result,
    "worktree_new": _on_worktree_new,
    "worktree_list": _show_result,
    "worktree_remove": _show_result,
    "worktree_merge": _show_result,
}


def _on_changes(step: Step, a: A.WorkspaceJobFinished) -> None:
    if a.ok and a.edit_key and a.text:
        step.emit(F.EditOutput(key=a.edit_key, text=a.text))


_RESULTS["changes"] = _on_changes


HANDLERS: dict[type[A.ActionBase], Callable[[Step, Any], None]] = {
    A.WorkspaceCommand: on_workspace_command,
    A.ShellRequested: on_shell_requested,
    A.CheckpointTaken: on_checkpoint_taken,
    A.WorkspaceJobFinished: on_job_finished,
    A.ConversationRolledBack: on_conversation_rolled_back,
    A.ShellOutput: on_shell_output,
    A.ShellFinished: on_shell_finished,
}

# User commands among them: they wake a parked thread.
WAKES = (A.WorkspaceCommand, A.ShellRequested)


# --- the hook after every action ------------------------------------------------------------


# The actions ``before_drain`` looks at (every other one, an agent's delta most often,
# leaves at its first test).
_BEFORE_DRAIN = (
    A.RuntimeRecovered,
    A.ThreadParked,
    A.EffectFailed,
    A.ConversationStarted,
    A.ConversationResumed,
    A.WorkdirSet,
)


def before_drain(step: Step) -> None:
    """Called by ``transitions.transition`` after any handler, before the queue's drain:
    what other actions mean for the workspace (a job given up frees the queue at once)."""
    action = step.action
    if not isinstance(action, _BEFORE_DRAIN):
        return
    if isinstance(action, A.RuntimeRecovered | A.ThreadParked):
        _give_up(step, "Spindle restarted" if isinstance(action, A.RuntimeRecovered) else "parked")
    elif isinstance(action, A.EffectFailed) and action.effect in ("workspace_job", "run_shell"):
        if action.effect == "workspace_job":
            _set_ws(step, job=None)
        else:
            _set_ws(step, shell=None)
    elif isinstance(action, A.ConversationStarted | A.ConversationResumed | A.WorkdirSet):
        _conversation_moved(step)


def after_step(step: Step) -> None:
    """Called by ``transitions.transition`` after the queue's drain: the effects around
    each prompt (checkpoint, the agent's note) and the footer's change summary."""
    effects = step.effects
    if effects:  # (most actions emit one effect or none: no generator per action)
        for effect in effects:
            if isinstance(effect, F.PromptAgent):
                _before_prompts(step)
                break
        if step.state.policy.workspace.footer_changes:
            _footer_changes(step)
    _track_session(step)


def _forget_turns(step: Step, *, new_session: bool = False) -> None:
    """The checkpoints' turns are no longer in the agent's conversation (a new session, a
    compaction, a turn the agent's shell added): /undo then tells the agent by a note."""
    ws = _ws(step)
    checkpoints = tuple(c.replace(conversation="gone") for c in ws.checkpoints)
    _set_ws(
        step,
        checkpoints=checkpoints,
        agent_session=None if new_session else ws.agent_session,
    )


def _track_session(step: Step) -> None:
    """Another session than the checkpoints' turns are in: they are not in it."""
    conv = step.state.conversation
    session = conv.session_id if conv is not None else None
    known = _ws(step).agent_session
    if session is None or session == known:
        return
    if known is not None:
        _forget_turns(step)
    _set_ws(step, agent_session=session)


def _give_up(step: Step, why: str) -> None:
    """The process that ran a job or shell is gone (restart) or going (park)."""
    ws = _ws(step)
    if ws.job is not None:
        _notice(step, "job", f"⚠ The workspace operation {ws.job.op} was interrupted ({why}).")
        _set_ws(step, job=None)
    if ws.reads:
        asked = ", ".join(sorted({"/" + _command_name(r.op) for r in ws.reads}))
        _notice(step, "reads", f"⚠ {asked} got no answer ({why}): ask again.")
        _set_ws(step, reads=())
    if ws.shell is not None:
        if isinstance(step.action, A.ThreadParked):
            stop_shell(step, why)
        else:
            shell = ws.shell
            step.emit(F.EditOutput(key=shell.key, text=_shell_card(shell, f"■ stopped ({why})")))
            _set_ws(step, shell=None)


def _conversation_moved(step: Step) -> None:
    """A new conversation or workdir: /diff starts from its first checkpoint; the worktree
    is forgotten when the conversation left it."""
    conv = step.state.conversation
    ws = _ws(step)
    if conv is None:
        return
    wt = ws.worktree
    if wt is not None and conv.workdir != wt.path:
        wt = None
    if isinstance(step.action, A.ConversationStarted | A.ConversationResumed):
        _forget_turns(step, new_session=True)
    if ws.worktree != wt or isinstance(step.action, A.ConversationStarted | A.ConversationResumed):
        _set_ws(step, worktree=wt, base_commit=None)
    elif isinstance(step.action, A.WorkdirSet):
        _set_ws(step, base_commit=None)


def _before_prompts(step: Step) -> None:
    """Before each prompt: record a checkpoint (when configured), and give the agent the
    note of what /undo or /redo changed since its last turn."""
    checkpoints = step.state.policy.workspace.checkpoints
    note = _ws(step).agent_note
    effects: list[F.Effect] = []
    if any(isinstance(e, F.PromptAgent) and e.command == "compact" for e in step.effects):
        _forget_turns(step)
    for effect in step.effects:
        if isinstance(effect, F.PromptAgent):
            if checkpoints:
                effects.append(F.CheckpointWorkdir(run_id=effect.run_id, workdir=effect.workdir))
            if note:
                effect = effect.replace(text=f"{note}\n\n{effect.text}")
                note = None
        effects.append(effect)
    step.effects[:] = effects
    if _ws(step).agent_note and note is None:
        _set_ws(step, agent_note=None)


def _footer_changes(step: Step) -> None:
    """A run's footer gets its change summary: measured against the run's checkpoint."""
    for effect in list(step.effects):
        if not (isinstance(effect, F.PostOutput) and effect.kind == "footer" and effect.run_id):
            continue
        checkpoint = next(
            (c for c in reversed(_ws(step).checkpoints) if c.run_id == effect.run_id), None
        )
        if checkpoint is None:
            continue
        step.emit(
            F.WorkspaceJob(
                job_id=f"{effect.run_id}-changes",
                op="changes",
                workdir=checkpoint.workdir,
                commit=checkpoint.commit,
                run_id=effect.run_id,
                key=effect.key,
                text=effect.text,
            )
        )
