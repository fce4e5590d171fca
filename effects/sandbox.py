"""The optional OS sandbox for agent processes: a bubblewrap (``bwrap``) command line that lets
a process see its workdir and its own home, and not Spindle's files or other threads' work.

``sandbox_argv(sandbox, argv, workdir=..., home=..., expose=...)`` wraps a command. What the
process sees (mounts are applied in this order, a later one on top of an earlier one):

1. the whole file system read-only (tools, compilers, the CLI itself);
2. a fresh ``/dev``, a ``/proc`` of its own PID namespace (no other process of the machine,
   Spindle included, is visible or signallable), an empty ``/tmp`` (other agents' private
   files there, such as their MCP configs, are gone), and so ``/var/tmp`` and the temp
   directory ``TMPDIR`` names when it is elsewhere (emptied in step 5's depth order);
3. every allowed root (where workdirs live) emptied, except ``/`` which cannot be;
4. the user's home emptied, whatever the allowed roots, then its home put back read-write:
   the configured private ``home`` whole; without one, only the user's hidden entries
   (``.claude``, ``.config``, ``.cache`` ... : CLI logins, tool settings and caches), so
   projects kept in the home stay out; ``bare_home``: nothing (git run for a thread);
5. its workdir, read-write, and the few private files Spindle wrote for it (``expose``,
   read-only; ``expose_writable``, read-write: a per-thread settings home); and every
   directory between one of these read-write binds and a file of step 6 bound onto itself,
   so that it is a mount point, which cannot be renamed (else the agent could move Spindle's
   real files aside, leaving an empty decoy for the next sandbox to hide). The binds of
   steps 4 and 5 go parents first, so none covers a deeper one;
6. Spindle's own files emptied again on top of all that: the data dir (database, log,
   process list), the database and the config file (which may hold the bot token), at their
   real path (resolved by the process's first sandbox) and where a read-write bind shows
   them under another name (a symlinked home entry).

It runs in new user, PID, IPC, UTS and cgroup namespaces with every capability dropped, and
dies with its parent (``--die-with-parent``; with ``--unshare-pid`` the kernel ends every
process of the namespace when its first one dies). The network is shared: agents call their
model's API. What it does not protect is written in docs/security.md.
"""

from __future__ import annotations

import functools
import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from threadspindle.runtime.core.frozen import Frozen

__all__ = [
    "Sandbox",
    "SandboxUnavailable",
    "WorkdirMoved",
    "WorkdirOutsideRoots",
    "check_sandbox",
    "inside",
    "open_folder",
    "open_workdir",
    "sandbox_argv",
    "within_roots",
]


class WorkdirOutsideRoots(OSError):
    """A workdir that now resolves outside every allowed root (a symlink put in its place
    since it was checked): binding it would hand the sandbox whatever it points to."""


class WorkdirMoved(WorkdirOutsideRoots):
    """A workdir that now resolves elsewhere within the roots (a symlink put in its place,
    or in one of its parents, since it was resolved): another thread's workdir, maybe."""


class SandboxUnavailable(RuntimeError):
    """The configured sandbox cannot run here (the message says why)."""


class Sandbox(Frozen):
    """How agent processes are confined (``[sandbox]`` / ``[agents.<name>] sandbox``)."""

    binary: str = "bwrap"
    hidden: tuple[str, ...] = ()  # Spindle's data dir, database and config file
    roots: tuple[str, ...] = ()  # the allowed roots, where every thread's workdir lives


def _real(path: str) -> str:
    return os.path.realpath(os.path.expanduser(path))


@functools.cache
def _real_once(path: str) -> str:
    """A hidden path resolved once per process (Spindle's first sandbox is the probe at its
    start): an agent that replaces a symlink on its way (``~/.local/share`` -> elsewhere)
    with a directory holding a decoy does not make later sandboxes hide the decoy instead."""
    return _real(path)


def _home_entries(home: str) -> list[str]:
    try:
        names = sorted(os.listdir(home))
    except OSError:
        return []
    return [os.path.join(home, n) for n in names if n.startswith(".") and n not in (".", "..")]


def _under(path: str, directory: str) -> bool:
    return path.startswith(directory.rstrip(os.sep) + os.sep)


def inside(path: str, directory: str) -> bool:
    """``path`` (real) is ``directory`` (resolved here) or below it."""
    directory = os.path.realpath(directory)
    return path == directory or _under(path, directory)


def _hiding(
    hidden: Sequence[str], writable: Sequence[tuple[str, str]]
) -> tuple[list[tuple[str, bool]], dict[str, str]]:
    """Where to hide each existing ``hidden`` path (a path in the sandbox, and whether it is a
    directory) and the directories to pin (path in the sandbox -> host path). ``writable``:
    the read-write binds, (host path, path in the sandbox).

    A hidden path is hidden where it is, and also where a read-write bind shows it under
    another name (a symlinked home entry). Every directory between such a bind and the
    hidden path is made a mount point of its own: a mount point cannot be renamed (EBUSY),
    else the agent could move the real directory aside, leave an empty one in its place, and
    see the real files under the new name once the next sandbox hides the decoy."""
    found: list[str] = []
    for path in sorted({_real_once(h) for h in hidden}, key=len):
        if os.path.exists(path) and not any(_under(path, d) for d in found):
            found.append(path)  # a path inside a hidden one needs nothing of its own
    hides: dict[str, bool] = {}
    pins: dict[str, str] = {}
    for path in found:
        is_dir = os.path.isdir(path)
        hides[path] = is_dir
        for source, dest in writable:
            if path != source and not _under(path, source):
                continue
            parts = os.path.relpath(path, source).split(os.sep) if path != source else []
            for depth in range(1, len(parts)):
                pins[os.path.join(dest, *parts[:depth])] = os.path.join(source, *parts[:depth])
            hides[os.path.join(dest, *parts)] = is_dir
    bound = {dest for _, dest in writable}
    pins = {dest: src for dest, src in pins.items() if dest not in bound and dest not in hides}
    return sorted(hides.items(), key=lambda h: len(h[0])), pins


def sandbox_argv(
    sandbox: Sandbox,
    argv: Sequence[str],
    *,
    workdir: str | None,
    home: str | None = None,
    expose: Sequence[str] = (),
    expose_writable: Sequence[str] = (),
    die_with_parent: bool = True,
    chdir: str | None = None,
    bare_home: bool = False,
    bind_fds: Mapping[str, int] | None = None,
) -> list[str]:
    """``argv`` wrapped in bubblewrap as the module docstring describes. ``home``: the agent's
    private home (``AgentOptions.home``); None: the user's home, hidden entries only, or,
    with ``bare_home``, none of it (an empty home: Spindle's own git runs).
    ``bind_fds``: directories bound read-write from a descriptor the caller opened (path ->
    fd, passed to the child): bubblewrap mounts what was opened, not what the path names
    by the time it runs (a symlink swapped in meanwhile).
    ``die_with_parent=False`` only for processes meant to outlive Spindle; ``chdir``: where
    it starts (default: the workdir)."""
    args = [
        sandbox.binary,
        *(["--die-with-parent"] if die_with_parent else []),
        "--unshare-user",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--cap-drop",
        "ALL",
        "--ro-bind",
        "/",
        "/",
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        "--tmpfs",
        "/tmp",
    ]
    for root in sorted({_real(r) for r in sandbox.roots}, key=len):
        if root != "/":
            args += ["--tmpfs", root]
    # What is put back, read-write or not: (option, host path, path in the sandbox); and,
    # first, the other temp directories emptied ("--tmpfs", "", path): ``/var/tmp``, and
    # the process's own (``TMPDIR``) when it is not ``/tmp``, where each agent's private
    # files are made (``agents/base/launch.py``: its MCP config, with its token). In the
    # depth order of the binds: a home entry put back (``~/.cache``) must not show one
    # again, and an agent's own files bound into it come after.
    binds: list[tuple[str, str, str]] = [("--tmpfs", "", path) for path in _temp_dirs()]
    user_home = _real("~")
    if user_home != "/":
        # Always emptied, a private home or not: else, with allowed roots that do not cover
        # it, the user's ~/.ssh stayed readable through the read-only ``/``.
        args += ["--tmpfs", user_home]
    if home is not None:
        binds.append(("--bind", _real(home), _real(home)))
    elif not bare_home and user_home != "/":
        # A symlinked entry (``~/.config`` -> elsewhere) is seen at its own name.
        binds += [("--bind", _real(entry), entry) for entry in _home_entries(user_home)]
    if workdir is not None:
        binds.append(("--bind", within_roots(sandbox, workdir), _real(workdir)))
    binds += [("--ro-bind", path, path) for path in expose]
    binds += [("--bind", _real(path), path) for path in expose_writable]
    # Their host path is the path itself: resolved and opened without a link by the caller.
    binds += [("--bind-fd", str(fd), path) for path, fd in (bind_fds or {}).items()]
    hides, pins = _hiding(
        sandbox.hidden,
        [
            (dst if opt == "--bind-fd" else src, dst)
            for opt, src, dst in binds
            if opt in ("--bind", "--bind-fd")
        ],
    )
    binds += [("--bind", src, dst) for dst, src in pins.items()]
    # Parents before children: a bind must not cover a deeper one made before it.
    for option, src, dst in sorted(binds, key=lambda b: b[2].rstrip(os.sep).count(os.sep)):
        args += [option, dst] if option == "--tmpfs" else [option, src, dst]
    for path, is_dir in hides:
        args += ["--tmpfs", path] if is_dir else ["--ro-bind", "/dev/null", path]
    if chdir or workdir:
        # Inside a folder bound from a descriptor, the path as given: resolved again on the
        # host now, it would follow a link put in the folder's place since it was opened.
        literal = chdir is not None and any(
            chdir == path or _under(chdir, path) for path in (bind_fds or {})
        )
        args += ["--chdir", chdir if literal and chdir else _real(chdir or workdir or "/")]
    return [*args, "--", *argv]


def _temp_dirs() -> list[str]:
    """The temp directories to empty besides ``/tmp`` (already emptied, with what is in
    it): those that exist, resolved."""
    found = {_real(tempfile.gettempdir()), _real("/var/tmp")}
    return sorted(
        path
        for path in found
        if path != "/" and not (path == "/tmp" or _under(path, "/tmp")) and os.path.isdir(path)
    )


def within_roots(sandbox: Sandbox, path: str) -> str:
    """``path`` resolved, checked again at each launch: the core checked it when the
    conversation started, but another agent whose workdir holds it may have put a symlink
    in its place since: to ``~/.ssh``, say (outside the allowed roots), or to a third
    thread's workdir (inside them, so the roots alone would let it by). A conversation's
    workdir is kept resolved (ingress resolves it, and a worktree's path too), so a path
    that no longer resolves to itself has had a link put in it: refused, both ways."""
    real = _real(path)
    roots = {_real(r) for r in sandbox.roots}
    if roots and not any(real == r or _under(real, r) or r == "/" for r in roots):
        raise WorkdirOutsideRoots(
            f"the workdir {path} now resolves to {real}, outside the allowed roots"
        )
    if real != os.path.normpath(os.path.expanduser(path)):
        raise WorkdirMoved(
            f"the workdir {path} now resolves to {real}: a link was put in its place since "
            "the conversation started there; start the conversation again where you mean it"
        )
    return real


_FOLDER_FLAGS = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def open_folder(path: str) -> int:
    """``path`` (absolute, resolved) opened as a directory with ``O_PATH``, each component
    with ``O_NOFOLLOW``: bound from this descriptor (``sandbox_argv``'s ``bind_fds``),
    bubblewrap mounts the folder that was checked, even if a link is put in its place
    while it starts. ``WorkdirMoved`` when a component is a symlink now (or gone)."""
    fd = os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in (p for p in path.split("/") if p):
            parent, fd = fd, -1
            try:
                fd = os.open(part, _FOLDER_FLAGS, dir_fd=parent)
            finally:
                os.close(parent)
    except OSError as exc:
        if fd >= 0:
            os.close(fd)
        raise WorkdirMoved(
            f"{path} is no longer the folder it was (a symlink now?): {exc}"
        ) from None
    return fd


def open_workdir(sandbox: Sandbox, workdir: str) -> tuple[str, int]:
    """``workdir`` checked (``within_roots``) and opened without a link on the way: its
    real path and the descriptor to bind it from (the caller passes it to the child and
    closes it after). A launch that bound the path instead left a moment between the check
    and bubblewrap's mount in which a link put in its place would have been followed."""
    real = within_roots(sandbox, workdir)
    return real, open_folder(real)


def check_sandbox(sandbox: Sandbox) -> None:
    """Raise ``SandboxUnavailable`` unless bubblewrap is installed and can make its
    namespaces here (some containers forbid user namespaces)."""
    import subprocess

    binary = shutil.which(sandbox.binary)
    if binary is None:
        raise SandboxUnavailable(
            f"the agent sandbox needs bubblewrap ({sandbox.binary!r} is not on PATH; "
            "install the `bubblewrap` package, or turn the sandbox off)"
        )
    probe = sandbox_argv(sandbox.replace(binary=binary), ["true"], workdir=None)
    try:
        done = subprocess.run(probe, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SandboxUnavailable(f"bubblewrap could not run: {exc}") from None
    if done.returncode != 0:
        raise SandboxUnavailable(
            f"bubblewrap cannot make its namespaces here: {done.stderr.strip() or done.returncode}"
        )


def expose_existing(paths: Sequence[str | Path | None]) -> tuple[str, ...]:
    return tuple(str(p) for p in paths if p is not None and os.path.exists(p))
