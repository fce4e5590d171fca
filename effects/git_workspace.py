"""Git for the thread's workspace: checkpoints on private refs, restoring them (undo/redo),
diffs and their summaries; the ``git`` runner ``git_worktrees`` uses too.

A checkpoint is a commit of the whole working tree, untracked files included (ignored
ones not), made with a temporary index (``GIT_INDEX_FILE``: a copy of the real one, so
``git add -A`` is quick) and ``write-tree``/``commit-tree``/``update-ref`` onto
``refs/spindle/<thread>/<run>``. Nothing here touches the user's branches, index, stash
or HEAD; only ``worktree_merge`` commits, on the worktree's own ``spindle/<name>`` branch,
and fast-forwards the target. Every call runs ``git`` as a subprocess (``trio``).

**Git runs what the repository tells it to**: hooks, ``core.fsmonitor``, the filters a
``.gitattributes`` names, diff drivers. An agent can write all of those in a repository in
its workdir (``git init`` is enough). So git never gets Spindle's secrets (its environment
is ``child_environment``), and for a thread whose agent runs in the sandbox it runs in that
sandbox too (``confined``): whatever the repository makes it run can do no more than the
agent itself. Files Spindle itself deletes or reads in the working tree (``restore``, the
index copy) are reached without following a symlink an agent may have planted.

Spindle's worktrees (new, list, remove, merge) are in ``git_worktrees``, on this module's
``git`` runner.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path

import trio

from threadspindle.effects.child_env import child_environment
from threadspindle.effects.sandbox import (
    Sandbox,
    WorkdirMoved,
    open_folder,
    sandbox_argv,
    within_roots,
)

__all__ = [
    "DiffSummary",
    "GitError",
    "checkpoint",
    "diff",
    "prune_checkpoints",
    "checkpoint_folder",
    "check_ref",
    "confined",
    "ref_for",
    "restore",
    "snapshot",
    "toplevel",
]

# Checkpoint commits are Spindle's, whoever the user is (and with no identity set up).
_IDENTITY = {
    "GIT_AUTHOR_NAME": "Spindle",
    "GIT_AUTHOR_EMAIL": "spindle@localhost",
    "GIT_COMMITTER_NAME": "Spindle",
    "GIT_COMMITTER_EMAIL": "spindle@localhost",
}


# Git's output read at most (a patch, a listing; ``max_out``), and its stderr's tail kept.
MAX_OUT_BYTES = 32 * 1024 * 1024
NUMSTAT_MAX_BYTES = 4 * 1024 * 1024  # ~50,000 changed files listed by /diff at most
ERR_TAIL_BYTES = 64 * 1024


class GitError(Exception):
    """A git command failed (its stderr is the message), or the workdir is no repository."""


@dataclass
class _Run:
    code: int
    out: bytes
    err: str
    cut: bool = False  # ``out`` is the first ``max_out`` bytes: git was stopped there

    @property
    def text(self) -> str:
        return self.out.decode("utf-8", "replace").strip()


@dataclass(frozen=True)
class _Jail:
    sandbox: Sandbox
    binds: tuple[str, ...]  # what git may see and write: the workdir and its repository


_JAIL: ContextVar[_Jail | None] = ContextVar("spindle_git_jail", default=None)


@contextlib.contextmanager
def confined(sandbox: Sandbox | None, workdir: str) -> Iterator[None]:
    """Within the block, git runs for ``workdir`` in ``sandbox`` (None: as Spindle does)."""
    jail = None
    if sandbox is not None:
        within_roots(sandbox, workdir)  # a symlink swapped in since: GitError's OSError
        jail = _Jail(sandbox, _repository_binds(workdir))
    token = _JAIL.set(jail)
    try:
        yield
    finally:
        _JAIL.reset(token)


def _repository_binds(workdir: str) -> tuple[str, ...]:
    """What a confined git may see, read-write: the workdir, and, when its repository's git
    directory is outside it (the workdir is a folder of a repository, or a worktree), that
    repository. A ``.git`` in the workdir is the agent's to write: as a file (a worktree's
    pointer) it is followed only to a worktree git made for this very directory (whose
    ``gitdir`` file, outside the workdir, points back here); as a symlink, not at all."""
    work = os.path.realpath(workdir)
    binds = [work]
    folder = work
    while True:
        dot = os.path.join(folder, ".git")
        try:
            mode = os.lstat(dot).st_mode
        except FileNotFoundError:
            parent = os.path.dirname(folder)
            if parent == folder:
                return tuple(binds)
            folder = parent
            continue
        except OSError:
            return tuple(binds)
        if stat.S_ISDIR(mode):
            if folder != work:
                binds.append(folder)  # a repository above the workdir, not the agent's
        elif stat.S_ISREG(mode):
            binds += _worktree_binds(folder, trusted=folder != work)
        return tuple(dict.fromkeys(binds))


def _worktree_binds(top: str, *, trusted: bool) -> list[str]:
    """For the folder ``top`` whose ``.git`` is a file ``gitdir: <dir>`` (a worktree, a
    submodule, a ``--separate-git-dir`` repository): itself, that git directory, and for a
    worktree its repository's and main worktree. Unless ``trusted`` (the file is outside
    the workdir), the agent wrote the pointer: it is followed only to a git directory
    outside the workdir that names ``top`` as its own (a worktree's ``gitdir`` back-pointer,
    a submodule's ``core.worktree``), else nothing."""
    try:
        with open(os.path.join(top, ".git"), encoding="utf-8") as f:
            line = f.read(4096).strip()
        if not line.startswith("gitdir: "):
            return []
        gitdir = os.path.realpath(os.path.join(top, line[len("gitdir: ") :]))
        if not trusted and (gitdir == top or gitdir.startswith(top.rstrip("/") + "/")):
            return []  # the agent wrote the pointer and what it points to: it proves nothing
        if not trusted and _names_as_its_own(gitdir) != top:
            return []
        try:
            with open(os.path.join(gitdir, "commondir"), encoding="utf-8") as f:
                common = os.path.realpath(os.path.join(gitdir, f.read(4096).strip()))
        except FileNotFoundError:
            return [top, gitdir]  # a repository of its own (a submodule's, a separate dir)
        if os.path.join(common, "worktrees", os.path.basename(gitdir)) != gitdir:
            return []  # not a worktree of that repository
    except (OSError, UnicodeDecodeError):
        return []
    binds = [top, common]
    if os.path.basename(common) == ".git":
        binds.append(os.path.dirname(common))  # the main worktree (/worktree merge there)
    return binds


_CORE_WORKTREE = re.compile(r"^\s*worktree\s*=\s*(.+?)\s*$", re.MULTILINE)


def _names_as_its_own(gitdir: str) -> str | None:
    """The working tree git itself recorded for ``gitdir``: a worktree's back-pointer
    (``gitdir`` file), else a submodule's ``core.worktree`` (resolved; None: neither)."""
    try:
        with open(os.path.join(gitdir, "gitdir"), encoding="utf-8") as f:
            return os.path.dirname(os.path.realpath(f.read(4096).strip()))
    except FileNotFoundError:
        pass
    with open(os.path.join(gitdir, "config"), encoding="utf-8") as f:
        found = _CORE_WORKTREE.search(f.read(64 * 1024))
    return os.path.realpath(os.path.join(gitdir, found.group(1))) if found else None


def _open_folder(path: str) -> int:
    """``path`` (absolute, resolved) opened without a link on the way (``open_folder``):
    a ``GitError`` when one is a symlink now (or gone)."""
    try:
        return open_folder(path)
    except WorkdirMoved as exc:
        raise GitError(str(exc)) from None


async def _git(
    cwd: str,
    *args: str,
    env: Mapping[str, str] | None = None,
    stdin: bytes | None = None,
    check: bool = True,
    writable: Sequence[str] = (),
    max_out: int = MAX_OUT_BYTES,
    cut_ok: bool = False,
) -> _Run:
    """Run git in ``cwd``; ``writable``: directories it needs besides the repository (a
    temporary index's, a new worktree), which a confined git must be shown.

    Git's output grows with what an agent put in the working tree (a patch with a file of
    gigabytes, a listing of a million files), so it is read up to ``max_out`` bytes: past
    that, git is stopped, and the run is a ``GitError`` (or, with ``cut_ok``, returned
    with what was read and ``cut`` set). Its stderr keeps the last ``ERR_TAIL_BYTES``."""
    full_env = {**child_environment(), "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C", **(env or {})}
    argv = ["git", *args]
    jail = _JAIL.get()
    fds: dict[str, int] = {}
    try:
        if jail is not None:
            # Opened here, each without a symlink on the way, and bound from the descriptor:
            # a folder swapped for a link (to ~/.ssh) between two git runs of a checkpoint,
            # or while bubblewrap starts, is refused instead of bound.
            for path in sorted({*jail.binds, *writable}, key=len):
                fds[path] = _open_folder(path)
            argv = sandbox_argv(
                jail.sandbox,
                argv,
                workdir=None,
                bare_home=True,  # not the user's ~/.ssh (nor ~/.gitconfig: Spindle's identity)
                bind_fds=fds,
                chdir=cwd,
            )
            argv[0] = shutil.which(argv[0], path=full_env.get("PATH")) or argv[0]
        code, out, err, cut = await _run_capped(
            argv, cwd, full_env, stdin or b"", tuple(fds.values()), max_out
        )
    finally:
        for fd in fds.values():
            os.close(fd)
    command = f"git {' '.join(args[:2])}"
    if cut and not cut_ok:
        raise GitError(f"{command}: its output passed {max_out:,} bytes, and was not read on")
    result = _Run(code, out, err.decode("utf-8", "replace").strip(), cut)
    if check and not cut and code != 0:
        raise GitError(f"{command}: {result.err or f'exit {code}'}")
    return result


async def _run_capped(
    argv: list[str],
    cwd: str,
    env: Mapping[str, str],
    stdin: bytes,
    pass_fds: tuple[int, ...],
    max_out: int,
) -> tuple[int, bytes, bytes, bool]:
    """Run ``argv`` to its end, or until its stdout passes ``max_out`` bytes (then it is
    killed): its exit code, its stdout (at most ``max_out`` bytes), the tail of its
    stderr, and whether stdout was cut."""
    out = bytearray()
    err = bytearray()
    cut = False
    proc = await trio.lowlevel.open_process(
        argv,
        cwd=cwd,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        pass_fds=pass_fds,
    )
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None

    async def feed() -> None:
        assert proc.stdin is not None
        async with proc.stdin:
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                if stdin:
                    await proc.stdin.send_all(stdin)

    async def read_out(cancel: trio.CancelScope) -> None:
        nonlocal cut
        assert proc.stdout is not None
        async for chunk in proc.stdout:
            room = max_out - len(out)
            out.extend(chunk[:room])
            if len(chunk) > room:
                cut = True
                proc.kill()  # the rest is never read: git stops at once, not at its end
                cancel.cancel()  # the stdin and stderr ends with it (a child git keeps
                return  # the pipes open after the kill)

    async def read_err() -> None:
        assert proc.stderr is not None
        async for chunk in proc.stderr:
            err.extend(chunk)
            if len(err) > 2 * ERR_TAIL_BYTES:
                del err[:-ERR_TAIL_BYTES]

    try:
        with trio.CancelScope() as scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(feed)
                nursery.start_soon(read_out, scope)
                nursery.start_soon(read_err)
        code = await proc.wait()
    except BaseException:
        proc.kill()
        with trio.CancelScope(shield=True):
            await proc.wait()
        raise
    finally:
        await proc.stdout.aclose()
        await proc.stderr.aclose()
    return code, bytes(out), bytes(err[-ERR_TAIL_BYTES:]), cut


def ref_for(thread_id: str, run_id: str) -> str:
    """The private ref of a thread's checkpoint (thread ids may hold ':' or '/')."""
    return f"refs/spindle/{checkpoint_folder(thread_id)}/{_ref_part(run_id, 'run')}"


def checkpoint_folder(thread_id: str) -> str:
    """The folder of ``refs/spindle/`` that holds the thread's checkpoints. Two ids that
    differ only in characters a ref cannot hold share one (``console:a:b``, ``console:a_b``):
    whoever names threads freely (the console) refuses a name that would."""
    return _ref_part(thread_id, "thread")


def _ref_part(text: str, empty: str) -> str:
    """``text`` as one component of a ref git accepts (``git check-ref-format``): only
    letters, digits, ``.``, ``_`` and ``-``, no ``..`` (a console thread may be named
    ``../x``), no ``.`` first or last, no ``.lock`` last; the valid ones unchanged."""
    safe = re.sub(r"\.{2,}", "_", re.sub(r"[^A-Za-z0-9._-]", "_", text)).strip(".")
    if safe.endswith(".lock"):
        safe = safe[: -len(".lock")] + "_lock"
    return safe or empty


async def toplevel(workdir: str) -> str:
    run = await _git(workdir, "rev-parse", "--show-toplevel", check=False)
    if run.code != 0:
        raise GitError(f"{workdir} is not inside a git repository")
    return run.text


async def _head(top: str) -> str | None:
    run = await _git(top, "rev-parse", "--verify", "-q", "HEAD^{commit}", check=False)
    return run.text if run.code == 0 else None


async def snapshot(workdir: str, message: str = "spindle snapshot") -> str:
    """A commit of the working tree as it is (tracked and untracked, not ignored files),
    parent HEAD; no ref points to it. The user's index is only read (copied)."""
    top = await toplevel(workdir)
    index = Path(
        (await _git(top, "rev-parse", "--path-format=absolute", "--git-path", "index")).text
    )
    head = await _head(top)
    with tempfile.TemporaryDirectory(prefix="spindle-index-") as tmp:
        temp_index = os.path.join(tmp, "index")
        env = {"GIT_INDEX_FILE": temp_index, **_IDENTITY}
        # Its stat cache makes `add -A` quick; copied only when it is a file, not a link.
        if not _copy_regular_file(index, temp_index) and head is not None:
            await _git(top, "read-tree", head, env=env, writable=[tmp])
        await _git(top, "add", "-A", "--", ".", env=env, writable=[tmp])
        tree = (await _git(top, "write-tree", env=env, writable=[tmp])).text
    parents = ["-p", head] if head else []
    return (await _git(top, "commit-tree", tree, *parents, "-m", message, env=env)).text


def _copy_regular_file(source: Path, target: str) -> bool:
    """Copy ``source`` if it is a regular file, and, for a confined git, one inside what the
    jail shows: whether it was. (An agent may make its repository's index a link to a file
    it cannot read; git names the link's target as the index.) The place is checked on the
    file opened, so a link swapped in meanwhile changes nothing."""
    try:
        fd = os.open(source, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        jail = _JAIL.get()
        if jail is not None:
            opened = os.readlink(f"/proc/self/fd/{fd}")
            if not any(opened.startswith(b.rstrip("/") + "/") for b in jail.binds):
                return False
        with open(target, "wb") as out:
            shutil.copyfileobj(f, out)
    return True


async def checkpoint(workdir: str, thread_id: str, run_id: str) -> tuple[str, str]:
    """Record the workdir before ``run_id``: (commit, ref)."""
    commit = await snapshot(workdir, f"spindle checkpoint before {run_id} of {thread_id}")
    ref = ref_for(thread_id, run_id)
    await _git(await toplevel(workdir), "update-ref", ref, commit)
    return commit, ref


async def prune_checkpoints(
    workdir: str, thread_id: str, *, keep: int, max_age_s: float, now: float | None = None
) -> list[str]:
    """Delete the thread's checkpoint refs beyond the newest ``keep`` or older than
    ``max_age_s``; returns the refs deleted."""
    top = await toplevel(workdir)
    prefix = ref_for(thread_id, "x").rsplit("/", 1)[0] + "/"
    listing = await _git(
        top,
        "for-each-ref",
        "--sort=-committerdate",
        "--format=%(refname) %(committerdate:unix)",
        prefix,
    )
    now = time.time() if now is None else now
    doomed = []
    for i, line in enumerate(listing.text.splitlines()):
        ref, _, stamp = line.rpartition(" ")
        if i >= keep or now - float(stamp or 0) > max_age_s:
            doomed.append(ref)
    if doomed:
        script = "".join(f"delete {ref}\n" for ref in doomed).encode()
        await _git(top, "update-ref", "--stdin", stdin=script)
    return doomed


async def restore(
    workdir: str, target: str, *, save_ref: str | None = None
) -> tuple[str, list[str]]:
    """Make the working tree's files what they are in commit ``target``: write the files
    that differ, delete those ``target`` lacks (ignored files are left alone). The state
    replaced is saved first as a commit (on ``save_ref`` when given): (that commit, the
    paths changed). The user's index and HEAD are untouched."""
    top = await toplevel(workdir)
    current = await snapshot(workdir, f"spindle: state replaced by restoring {target[:12]}")
    if save_ref:
        await _git(top, "update-ref", save_ref, current)
    names = await _git(top, "diff", "--name-status", "--no-renames", "-z", current, target)
    fields = names.out.split(b"\0")
    write: list[str] = []
    delete: list[str] = []
    for status, raw in zip(fields[0::2], fields[1::2], strict=False):
        if not status:
            continue
        (delete if status == b"D" else write).append(raw.decode("utf-8", "surrogateescape"))
    for name in delete:
        _remove_in_tree(top, name, prune_empty=True)
    if write:
        with tempfile.TemporaryDirectory(prefix="spindle-index-") as tmp:
            env = {"GIT_INDEX_FILE": os.path.join(tmp, "index")}
            await _git(top, "read-tree", target, env=env, writable=[tmp])
            for name in write:  # a directory where a file goes back must make way
                _remove_in_tree(top, name, only_directory=True)
            stdin = b"".join(p.encode("utf-8", "surrogateescape") + b"\0" for p in write)
            await _git(
                top, "checkout-index", "-f", "-z", "--stdin", env=env, stdin=stdin, writable=[tmp]
            )
    return current, sorted(write + delete)


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _remove_in_tree(
    top: str, name: str, *, prune_empty: bool = False, only_directory: bool = False
) -> None:
    """Remove ``name`` (a path relative to ``top``) without following a symlink on the way:
    each folder is opened with ``O_NOFOLLOW`` from ``top`` down, so a folder an agent
    replaced with a link to another thread's workdir is not entered (nothing is removed).
    The entry itself: a file or link is unlinked (a link, not its target), a directory
    removed whole when ``only_directory`` (a file goes back where it is). ``prune_empty``:
    folders left empty are removed, up to ``top``."""
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if not parts or ".." in parts:
        return
    fds = [os.open(top, _DIR_FLAGS)]
    try:
        for part in parts[:-1]:
            try:
                fds.append(os.open(part, _DIR_FLAGS, dir_fd=fds[-1]))
            except OSError:
                return  # missing, a file, or a symlink: nothing of ours to remove there
        try:
            mode = os.lstat(parts[-1], dir_fd=fds[-1]).st_mode
        except OSError:
            return
        if only_directory:
            if stat.S_ISDIR(mode):
                shutil.rmtree(parts[-1], dir_fd=fds[-1])
            return
        if not stat.S_ISDIR(mode):
            os.unlink(parts[-1], dir_fd=fds[-1])
        if prune_empty:
            for depth in range(len(parts) - 1, 0, -1):
                try:
                    os.rmdir(parts[depth - 1], dir_fd=fds[depth - 1])
                except OSError:
                    break  # not empty
    finally:
        for fd in fds:
            os.close(fd)


@dataclass
class DiffSummary:
    """What changed between two states: one (path, added, removed, binary) per file.

    Both parts are bounded (an agent can change a million files, or write one of
    gigabytes): ``files`` lists what ``NUMSTAT_MAX_BYTES`` of git's listing held
    (``files_cut``: more changed, counted in ``totals``), ``patch`` the first bytes of the
    patch a caller asked for (``patch_cut``: it went on)."""

    files: list[tuple[str, int, int, bool]] = field(default_factory=list)
    patch: str = ""
    patch_cut: bool = False
    files_cut: bool = False
    totals: tuple[int, int, int] | None = None  # files, added, removed; when files_cut

    @property
    def added(self) -> int:
        return self.totals[1] if self.totals else sum(f[1] for f in self.files)

    @property
    def removed(self) -> int:
        return self.totals[2] if self.totals else sum(f[2] for f in self.files)

    @property
    def file_count(self) -> int:
        return self.totals[0] if self.totals else len(self.files)

    def line(self) -> str:
        """``3 files +40 −12``."""
        n = self.file_count
        return f"{n} file{'' if n == 1 else 's'} +{self.added} −{self.removed}"

    def table(self, limit: int = 30) -> str:
        rows = []
        for path, added, removed, binary in self.files[:limit]:
            rows.append(f"{path}  (binary)" if binary else f"{path}  +{added} −{removed}")
        if self.file_count > limit:
            rows.append(f"… and {self.file_count - limit} more")
        return "\n".join(rows)


async def diff(
    workdir: str, base: str | None, *, patch: bool = True, patch_max: int = MAX_OUT_BYTES
) -> DiffSummary:
    """The working tree now against ``base`` (a commit; None: HEAD, or the empty tree in a
    repository without commits), renames detected; the patch read up to ``patch_max``
    bytes."""
    top = await toplevel(workdir)
    current = await snapshot(workdir, "spindle: state for a diff")
    if base is None:
        base = await _head(top) or (await _git(top, "hash-object", "-t", "tree", "/dev/null")).text
    numstat = await _git(
        top, "diff", "--numstat", "-M", "-z", base, current, max_out=NUMSTAT_MAX_BYTES, cut_ok=True
    )
    summary = DiffSummary()
    fields = numstat.out.split(b"\0")
    if numstat.cut:
        # The last field read is cut short: a path read in part would be shown wrong, so
        # it goes (a rename left without its new path is dropped below; ``_shortstat``
        # counts every file all the same).
        fields = fields[:-1]
        summary.files_cut = True
        summary.totals = await _shortstat(top, base, current)
    i = 0
    while i < len(fields):
        head = fields[i].decode("utf-8", "surrogateescape")
        i += 1
        if not head:
            continue
        added, removed, path = head.split("\t", 2)
        if not path:  # a rename: the old and the new path follow
            if i + 1 >= len(fields):
                break  # its paths were past the cut
            old = fields[i].decode("utf-8", "surrogateescape")
            new = fields[i + 1].decode("utf-8", "surrogateescape")
            i += 2
            path = f"{old} → {new}"
        binary = added == "-"
        summary.files.append(
            (path, 0 if binary else int(added), 0 if binary else int(removed), binary)
        )
    if patch:
        run = await _git(top, "diff", "-M", base, current, max_out=patch_max, cut_ok=True)
        # (A cut in the middle of a character: ``replace`` makes it one U+FFFD.)
        summary.patch = run.out.decode("utf-8", "replace")
        summary.patch_cut = run.cut
    return summary


_SHORTSTAT = re.compile(
    rb"(\d+) files? changed(?:, (\d+) insertions?\(\+\))?(?:, (\d+) deletions?)?"
)


async def _shortstat(top: str, base: str, current: str) -> tuple[int, int, int]:
    """Files changed, lines added and removed between two commits, in one line of git's."""
    found = _SHORTSTAT.search((await _git(top, "diff", "--shortstat", "-M", base, current)).out)
    if found is None:
        return 0, 0, 0
    return int(found.group(1)), int(found.group(2) or 0), int(found.group(3) or 0)


async def merge_base(workdir: str, ref: str) -> str:
    top = await toplevel(workdir)
    return (await _git(top, "merge-base", "HEAD", check_ref(ref, "diff base"))).text


def check_ref(ref: str, what: str) -> str:
    """A branch or commit a user typed (a worktree's base, a merge target, a diff base):
    refused when git could read it as an option. ``git rebase --exec=…`` runs a shell
    command, which would hand anyone allowed to talk to the agent what ``!`` reserves for
    the shell allow-list."""
    if not ref or ref.startswith("-") or any(c.isspace() or ord(c) < 32 for c in ref):
        raise GitError(f"{ref!r} is not a usable {what} (a branch, tag or commit)")
    return ref


def paths_text(paths: Sequence[str], limit: int = 20) -> str:
    return ", ".join(paths[:limit]) + (f" … (+{len(paths) - limit})" if len(paths) > limit else "")
