"""The thread's workspace port (``runtime.live.ports.WorkspacePort``): applies the core's
workspace effects with git (``git_workspace``) and the shell (``shell_command``) and
reports every outcome back as an action.

``CheckpointWorkdir`` and the footer's ``changes`` summary are done before ``apply``
returns (the agent lane waits: the prompt after a checkpoint must not start before it);
every other job and each shell command runs in the thread's nursery. Nothing raises out
of here for a failure of the work: it becomes the result's text.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import trio

from threadspindle.effects import git_workspace as git
from threadspindle.effects import git_worktrees
from threadspindle.effects.shell_command import ShellLimits, run_in_agent, run_shell
from threadspindle.runtime.core import actions as A
from threadspindle.runtime.core.effect_types import (
    CheckpointWorkdir,
    RunShell,
    StopShell,
    WorkspaceJob,
)
from threadspindle.runtime.core.storable import storable
from threadspindle.runtime.live.ports import (
    AgentShell,
    AgentShellOf,
    WorkspaceEffect,
    WorkspaceFactory,
)

__all__ = ["GitWorkspace", "WorkspaceOptions", "workspace_factory"]

logger = logging.getLogger("spindle.workspace")

# Paths a job's result names at most (the thread's state keeps an undo's): the note to
# the agent shows 20 of them; a job over a million files must not make a state of them.
FILES_KEPT = 100


@dataclass(frozen=True)
class WorkspaceOptions:
    keep_checkpoints: int = 50  # per thread; older checkpoint refs are deleted
    checkpoint_max_age_s: float = 14 * 24 * 3600.0
    worktree_dir: str | None = None  # None: "<repo>.worktrees" beside the repository
    diff_max_chars: int = 20_000  # the patch shown by /diff as text at most
    diff_file_max_bytes: int = 256 * 1024  # the patch attached as a file at most
    shell: ShellLimits = ShellLimits()


def workspace_factory(options: WorkspaceOptions) -> WorkspaceFactory:
    def make(
        thread_id: str,
        post: Callable[[A.Action], object],
        clock: Callable[[], float],
        ids: Callable[[], str],
    ) -> GitWorkspace:
        return GitWorkspace(thread_id, post, clock, ids, options)

    return make


def cut_patch(patch: str, max_bytes: int, *, cut: bool = False) -> str:
    """The patch as a file holds it: whole, or cut at a line end within ``max_bytes`` (UTF-8)
    with a last line saying how much was left out (the file is then no valid patch).
    ``cut``: ``patch`` is only the start of the whole (how much more is unknown)."""
    data = patch.encode()
    if len(data) <= max_bytes and not cut:
        return patch
    head = data[: max_bytes - 200].decode(errors="ignore")
    head = head[: head.rfind("\n") + 1] or head
    left = "the rest" if cut else f"{len(data) - len(head.encode())} more bytes"
    note = f"# … patch cut here: {left} not included (workspaces.diff_file_max_bytes)"
    return f"{head}{note}\n"


class GitWorkspace:
    def __init__(
        self,
        thread_id: str,
        post: Callable[[A.Action], object],
        clock: Callable[[], float],
        ids: Callable[[], str],
        options: WorkspaceOptions | None = None,
    ) -> None:
        self.thread_id = thread_id
        self._post_raw = post
        self._clock = clock
        self._ids = ids
        self.options = options or WorkspaceOptions()
        self._shells: dict[str, trio.CancelScope] = {}
        self.checkpoints = 0
        self.jobs = 0

    def _post(self, action: A.Action) -> None:
        # Git names files as bytes, decoded with surrogateescape (restore writes them back):
        # what is posted must be storable (``runtime.core.storable``: U+FFFD instead).
        self._post_raw(storable(action))

    def _base(self) -> dict[str, Any]:
        return {"thread_id": self.thread_id, "action_id": self._ids(), "at": self._clock()}

    async def apply(
        self,
        effect: WorkspaceEffect,
        nursery: trio.Nursery,
        agent: AgentShellOf | None = None,
    ) -> None:
        if isinstance(effect, CheckpointWorkdir):
            await self._checkpoint(effect)
        elif isinstance(effect, WorkspaceJob):
            if effect.op == "changes":
                await self._job(effect)
            else:
                nursery.start_soon(self._job, effect)
        elif isinstance(effect, RunShell):
            scope = trio.CancelScope()
            self._shells[effect.shell_id] = scope
            nursery.start_soon(self._shell, effect, scope, agent)
        elif isinstance(effect, StopShell):
            running = self._shells.get(effect.shell_id)
            if running is not None:
                running.cancel()

    # --- checkpoints ------------------------------------------------------------------

    async def _checkpoint(self, effect: CheckpointWorkdir) -> None:
        try:
            with git.confined(self.options.shell.sandbox, effect.workdir):
                await self._checkpoint_confined(effect)
        except OSError as exc:  # the workdir resolves outside the roots now
            self._post(
                A.CheckpointTaken(
                    **self._base(), run_id=effect.run_id, workdir=effect.workdir, reason=str(exc)
                )
            )

    async def _checkpoint_confined(self, effect: CheckpointWorkdir) -> None:
        try:
            commit, ref = await git.checkpoint(effect.workdir, self.thread_id, effect.run_id)
        except (git.GitError, OSError) as exc:
            self._post(
                A.CheckpointTaken(
                    **self._base(), run_id=effect.run_id, workdir=effect.workdir, reason=str(exc)
                )
            )
            return
        self.checkpoints += 1
        self._post(
            A.CheckpointTaken(
                **self._base(), run_id=effect.run_id, workdir=effect.workdir, commit=commit, ref=ref
            )
        )
        try:
            await git.prune_checkpoints(
                effect.workdir,
                self.thread_id,
                keep=self.options.keep_checkpoints,
                max_age_s=self.options.checkpoint_max_age_s,
            )
        except (git.GitError, OSError) as exc:  # pruning is housekeeping: never a failure
            logger.warning("could not prune checkpoints: %s", exc)

    # --- jobs ----------------------------------------------------------------------------

    async def _job(self, effect: WorkspaceJob) -> None:
        self.jobs += 1
        fields: dict[str, Any]
        try:
            with git.confined(self.options.shell.sandbox, effect.workdir):
                fields = await _JOBS[effect.op](self, effect)
        except (git.GitError, OSError, KeyError, ValueError) as exc:
            fields = {"ok": False, "text": f"/{effect.op.replace('_', ' ')} failed: {exc}"}
        except Exception as exc:  # a bug must still answer, or the queue would wait for ever
            logger.exception("workspace job %s failed", effect.op)
            fields = {"ok": False, "text": f"/{effect.op} failed: {type(exc).__name__}: {exc}"}
        fields.setdefault("ok", True)
        self._post(
            A.WorkspaceJobFinished(
                **self._base(), job_id=effect.job_id, op=effect.op, run_id=effect.run_id, **fields
            )
        )

    async def _undo(self, effect: WorkspaceJob) -> dict[str, Any]:
        assert effect.commit is not None and effect.run_id is not None
        suffix = "undone" if effect.op == "undo" else "redone"
        save = git.ref_for(self.thread_id, f"{effect.run_id}-{suffix}")
        saved, files = await git.restore(effect.workdir, effect.commit, save_ref=save)
        listed = git.paths_text(files) or "no file differed"
        if effect.op == "undo":
            text = (
                f"↶ Undid run {effect.run_id}: the files are as before it ({listed}). "
                f"/redo brings the changes back (kept on {save})."
            )
        else:
            text = f"↷ Redid run {effect.run_id}: its changes are back ({listed})."
        return {"commit": saved, "files": tuple(files[:FILES_KEPT]), "text": text}

    async def _diff(self, effect: WorkspaceJob) -> dict[str, Any]:
        base = effect.commit
        label = "the conversation started"
        if base is None and effect.ref not in (None, "HEAD"):
            assert effect.ref is not None
            base = await git.merge_base(effect.workdir, effect.ref)
            label = f"the worktree's base ({effect.ref})"
        elif base is None:
            label = "the last commit (HEAD)"
        # Read no more of the patch than is shown or attached (a file of gigabytes in the
        # workdir must not be read into memory): past it, the sizes left out are unknown.
        limit = self.options.diff_max_chars
        file_max = self.options.diff_file_max_bytes
        read = max(4 * limit, file_max) + 1
        summary = await git.diff(effect.workdir, base, patch_max=read)
        if not summary.files:
            return {"text": f"No changes since {label}."}
        patch = summary.patch
        if len(patch) > limit:
            rest = "the rest" if summary.patch_cut else f"{len(summary.patch) - limit} more chars"
            patch = patch[:limit] + f"\n… ({rest} not shown)"
        return {
            "text": f"Changes since {label}: {summary.line()}\n{summary.table()}",
            "detail": f"```diff\n{patch.rstrip()}\n```",
            "patch": cut_patch(summary.patch, file_max, cut=summary.patch_cut),
            "files": tuple(f[0] for f in summary.files[:FILES_KEPT]),
        }

    async def _changes(self, effect: WorkspaceJob) -> dict[str, Any]:
        summary = await git.diff(effect.workdir, effect.commit, patch=False)
        if not summary.files:
            return {"ok": False, "text": "no changes"}
        return {"text": f"{effect.text} · {summary.line()}", "edit_key": effect.key}

    async def _worktree_new(self, effect: WorkspaceJob) -> dict[str, Any]:
        if not effect.name:
            raise ValueError("usage: /worktree new <name> [base]")
        path, branch, base = await git_worktrees.worktree_new(
            effect.workdir, effect.name, effect.ref, self.options.worktree_dir
        )
        return {
            "text": f"Worktree {effect.name} is ready at {path} (branch {branch} from {base}).",
            "path": path,
            "branch": branch,
            "base": base,
        }

    async def _worktree_list(self, effect: WorkspaceJob) -> dict[str, Any]:
        found = await git_worktrees.worktree_list(effect.workdir)
        lines = [f"{'*' if b.startswith('spindle/') else ' '} {b}  {p}" for p, b in found]
        return {"text": "Worktrees (* Spindle's):\n" + "\n".join(lines)}

    async def _worktree_remove(self, effect: WorkspaceJob) -> dict[str, Any]:
        if not effect.name:
            raise ValueError("usage: /worktree remove <name> [force]")
        path = await git_worktrees.worktree_remove(effect.workdir, effect.name, force=effect.force)
        return {
            "text": f"Removed worktree {effect.name} ({path}); branch spindle/{effect.name} stays."
        }

    async def _worktree_merge(self, effect: WorkspaceJob) -> dict[str, Any]:
        result = await git_worktrees.worktree_merge(effect.workdir, effect.ref)
        return {"ok": result.ok, "text": result.text, "files": tuple(result.conflicts[:FILES_KEPT])}

    # --- shell -------------------------------------------------------------------------

    async def _shell(
        self, effect: RunShell, scope: trio.CancelScope, agent: AgentShellOf | None
    ) -> None:
        def report(text: str, binary: int) -> None:
            self._post(
                A.ShellOutput(
                    **self._base(), shell_id=effect.shell_id, text=text, binary_bytes=binary
                )
            )

        try:
            agent_shell = await self._agent_shell(agent)
            if agent_shell is not None:
                outcome = await run_in_agent(
                    effect.command,
                    agent_shell,
                    limits=self.options.shell,
                    report=report,
                    cancel=scope,
                )
            else:
                outcome = await run_shell(
                    effect.command,
                    effect.workdir,
                    limits=self.options.shell,
                    report=report,
                    cancel=scope,
                )
        finally:
            self._shells.pop(effect.shell_id, None)
        self._post(
            A.ShellFinished(
                **self._base(),
                shell_id=effect.shell_id,
                outcome=outcome.outcome,  # type: ignore[arg-type]
                exit_code=outcome.exit_code,
                detail=outcome.detail,
                duration_s=round(outcome.duration_s, 3),
            )
        )

    async def _agent_shell(self, agent: AgentShellOf | None) -> AgentShell | None:
        """The agent's own shell for a `!` command, or None: Spindle runs it directly (the
        agent has none, or could not be started for it; the log says why)."""
        if agent is None:
            return None
        try:
            # (An /abort meanwhile cancels ``scope``: the command then ends at once.)
            with trio.fail_after(self.options.shell.timeout_s):
                return await agent()
        except Exception as exc:
            logger.warning("the agent's shell is not available, running directly: %s", exc)
        return None


_JOBS = {
    "undo": GitWorkspace._undo,
    "redo": GitWorkspace._undo,
    "diff": GitWorkspace._diff,
    "changes": GitWorkspace._changes,
    "worktree_new": GitWorkspace._worktree_new,
    "worktree_list": GitWorkspace._worktree_list,
    "worktree_remove": GitWorkspace._worktree_remove,
    "worktree_merge": GitWorkspace._worktree_merge,
}
