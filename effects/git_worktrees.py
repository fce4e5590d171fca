"""Spindle's worktrees of a repository: ``/worktree new``, ``list``, ``remove`` and
``merge``, each a few ``git`` calls through ``git_workspace``'s runner (confined with the
thread's agent, without Spindle's secrets).

A worktree is ``<repo>.worktrees/<name>`` (or under ``worktree_dir``) on a new branch
``spindle/<name>``; ``worktree_merge`` commits there, rebases onto the target and
fast-forwards it.

Worktree operations on one repository run one at a time (``_repository_lock``): ``git
worktree add`` reads the administrative folder of every worktree, and one that another
thread's ``/worktree new`` is making at that moment is half there ("failed to read
.git/worktrees/<name>/commondir"); two merges would race to fast-forward one target.
Within this process: threads of one repository are served by one process.
"""

from __future__ import annotations

import contextlib
import os
import re
import weakref
from dataclasses import dataclass, field

import trio

# The package's one git runner and its refusals (module-private there, shared here).
from threadspindle.effects.git_workspace import (
    _IDENTITY,
    GitError,
    _git,
    check_ref,
    paths_text,
    toplevel,
)

__all__ = [
    "MergeResult",
    "check_name",
    "is_dirty",
    "worktree_dir",
    "worktree_list",
    "worktree_merge",
    "worktree_new",
    "worktree_remove",
]

# Listings only shown in part (what is dirty, what conflicts): the first MiB of git's
# output is plenty, and an agent's million files are not read in whole.
LISTING_MAX_BYTES = 1024 * 1024
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")

# The repository's main worktree -> the lock its worktree operations take (see the module
# docstring). Weak: a lock lives while an operation holds or waits for it.
_repository_locks: weakref.WeakValueDictionary[str, trio.Lock] = weakref.WeakValueDictionary()


def _repository_lock(main: str) -> trio.Lock:
    key = os.path.realpath(main)
    lock = _repository_locks.get(key)
    if lock is None:
        lock = _repository_locks[key] = trio.Lock()
    return lock


def check_name(name: str) -> str:
    if not _NAME.match(name) or ".." in name or name.endswith(".lock"):
        raise GitError(f"{name!r} is not a usable worktree name (letters, digits, . _ -)")
    return name


async def _main_worktree(workdir: str) -> str:
    """The repository's main worktree (the first ``git worktree list`` entry)."""
    top = await toplevel(workdir)
    listing = await _git(top, "worktree", "list", "--porcelain")
    for line in listing.text.splitlines():
        if line.startswith("worktree "):
            return line[len("worktree ") :]
    return top


def worktree_dir(main: str, folder: str | None) -> str:
    """Where Spindle's worktrees of the repository ``main`` go: ``folder`` (absolute, or
    relative to the repository's parent), default ``<repo>.worktrees`` beside it."""
    parent = os.path.dirname(main.rstrip("/"))
    if folder:
        folder = os.path.expanduser(folder)
        return os.path.realpath(folder if os.path.isabs(folder) else os.path.join(parent, folder))
    return os.path.join(parent, os.path.basename(main.rstrip("/")) + ".worktrees")


async def worktree_new(
    workdir: str, name: str, base: str | None, folder: str | None = None
) -> tuple[str, str, str]:
    """Create a worktree on a new branch ``spindle/<name>`` from ``base`` (default: the
    current branch of the workdir): (its path, its branch, the base)."""
    check_name(name)
    top = await toplevel(workdir)
    main = await _main_worktree(top)
    if base is None:
        current = await _git(top, "symbolic-ref", "-q", "--short", "HEAD", check=False)
        base = current.text if current.code == 0 else "HEAD"
    path = os.path.join(worktree_dir(main, folder), name)
    branch = f"spindle/{name}"
    async with _repository_lock(main):
        if os.path.exists(path):
            raise GitError(f"{path} exists already")
        # Made empty here (git fills an empty directory), so a confined git is shown only it.
        os.makedirs(path)
        try:
            await _git(
                top,
                "worktree",
                "add",
                "-b",
                branch,
                path,
                check_ref(base, "base branch"),
                writable=[path],
            )
        except BaseException:
            with contextlib.suppress(OSError):
                os.rmdir(path)  # only if git left it empty
            raise
    return os.path.realpath(path), branch, base


async def worktree_list(workdir: str) -> list[tuple[str, str]]:
    """(path, branch or detached head) of every worktree of the repository."""
    top = await toplevel(workdir)
    listing = await _git(top, "worktree", "list", "--porcelain")
    found: list[tuple[str, str]] = []
    path = ""
    for line in listing.text.splitlines() + [""]:
        if line.startswith("worktree "):
            path = line[len("worktree ") :]
        elif line.startswith("branch "):
            found.append((path, line[len("branch refs/heads/") :]))
            path = ""
        elif line == "detached" and path:
            found.append((path, "(detached)"))
            path = ""
        elif line.startswith("bare") and path:
            path = ""
    return found


async def _find_worktree(workdir: str, name: str) -> str:
    for path, branch in await worktree_list(workdir):
        if branch == f"spindle/{name}":
            return path
    raise GitError(f"no Spindle worktree {name!r} (branch spindle/{name})")


async def is_dirty(workdir: str) -> list[str]:
    """The paths with uncommitted changes (the first ones, when there are very many)."""
    status = await _git(
        workdir,
        "status",
        "--porcelain",
        "-z",
        "--untracked-files=all",
        max_out=LISTING_MAX_BYTES,
        cut_ok=True,
    )
    entries = status.out.split(b"\0")[: -1 if status.cut else None]
    return [e[3:].decode("utf-8", "replace") for e in entries if len(e) > 3]


async def worktree_remove(workdir: str, name: str, *, force: bool) -> str:
    """Remove Spindle's worktree ``name`` (its branch stays): refused with uncommitted
    changes unless ``force``. Returns its path."""
    check_name(name)
    path = await _find_worktree(workdir, name)
    dirty = await is_dirty(path)
    if dirty and not force:
        shown = ", ".join(dirty[:10]) + (" …" if len(dirty) > 10 else "")
        raise GitError(
            f"worktree {name} has uncommitted changes ({shown}): "
            f"/worktree remove {name} force removes it anyway"
        )
    top = await toplevel(workdir)
    async with _repository_lock(await _main_worktree(top)):
        await _git(top, "worktree", "remove", *(["--force"] if force else []), path)
    return path


@dataclass
class MergeResult:
    ok: bool
    text: str
    conflicts: list[str] = field(default_factory=list)


async def _identity_env(top: str) -> dict[str, str]:
    """The user's identity when git has one, else Spindle's (a commit needs one)."""
    email = await _git(top, "config", "user.email", check=False)
    return {} if email.code == 0 and email.text else dict(_IDENTITY)


async def worktree_merge(workdir: str, target: str | None) -> MergeResult:
    """In the worktree ``workdir`` (branch ``spindle/<name>``): commit pending changes,
    rebase onto ``target`` (default: the main worktree's branch) and fast-forward
    ``target`` to it. A conflict aborts the rebase: both branches stay as they were (the
    pending changes committed on the worktree's branch) and the files are named. One
    merge at a time per repository: two fast-forwarding one target at once would race."""
    top = await toplevel(workdir)
    branch = (await _git(top, "symbolic-ref", "-q", "--short", "HEAD", check=False)).text
    if not branch.startswith("spindle/"):
        raise GitError(f"{top} is not a Spindle worktree (its branch is {branch or 'detached'})")
    main = await _main_worktree(top)
    async with _repository_lock(main):
        return await _merge(top, branch, main, target)


async def _merge(top: str, branch: str, main: str, target: str | None) -> MergeResult:
    if target is None:
        target = (await _git(main, "symbolic-ref", "-q", "--short", "HEAD")).text
    check_ref(target, "target branch")  # before anything is committed
    env = await _identity_env(top)
    committed = ""
    if await is_dirty(top):
        await _git(top, "add", "-A", env=env)
        await _git(top, "commit", "-q", "--no-verify", "-m", f"{branch}: pending changes", env=env)
        committed = " (pending changes committed first)"
    rebase = await _git(top, "rebase", target, env=env, check=False)
    if rebase.code != 0:
        unmerged = await _git(
            top,
            "diff",
            "--name-only",
            "--diff-filter=U",
            check=False,
            max_out=LISTING_MAX_BYTES,
            cut_ok=True,
        )
        conflicts = unmerged.text.splitlines()[: -1 if unmerged.cut else None]
        await _git(top, "rebase", "--abort", check=False)
        return MergeResult(
            False,
            f"Merge of {branch} into {target} stopped: conflicts in "
            f"{paths_text(conflicts) or '(unknown files)'}{' …' if unmerged.cut else ''}. "
            f"Nothing was changed on {target}; "
            f"{branch} keeps its commits{committed}. Resolve by rebasing {branch} onto "
            f"{target} by hand, or ask the agent to.",
            conflicts,
        )
    new = (await _git(top, "rev-parse", "HEAD")).text
    old = (await _git(top, "rev-parse", f"refs/heads/{target}")).text
    count = (await _git(top, "rev-list", "--count", f"{old}..{new}")).text
    holder = next((p for p, b in await worktree_list(top) if b == target), None)
    if holder is not None:
        ff = await _git(holder, "merge", "--ff-only", "-q", new, env=env, check=False)
        if ff.code != 0:
            return MergeResult(
                False,
                f"Rebased {branch} onto {target}{committed}, but {target} (checked out in "
                f"{holder}) could not be fast-forwarded: {ff.err}",
            )
    else:
        await _git(top, "update-ref", f"refs/heads/{target}", new, old)
    return MergeResult(
        True,
        f"Merged {branch} into {target}{committed}: {target} fast-forwarded to "
        f"{new[:10]}" + f" ({count} commit(s)).",
    )
