"""The optional OS sandbox for agent processes: a bubblewrap (``bwrap``) command line that lets
a process see its workdir and its own home, and not Spindle's files or other threads' work.

``sandbox_argv(sandbox, argv, workdir=..., home=..., expose=...)`` wraps a command. What the
process sees (mounts are applied in this order, a later one on top of an earlier one):

1. the whole file system read-only (tools, compilers, the CLI itself);
2. a fresh ``/dev``, a ``/proc`` of its own PID namespace (no other process of the machine,
   Spindle included, is visible or signallable), an empty ``/tmp`` (other agents' private
   files there, such as their MCP configs, are gone);
3. every allowed root (where workdirs live) emptied, except ``/`` which cannot be;
4. its home, read-write: the configured private ``home`` whole; without one, the user's home
   is emptied and only its hidden entries (``.claude``, ``.config``, ``.cache`` ... : CLI
   logins, tool settings and caches) are put back, so projects kept in the home stay out;
5. its workdir, read-write, and the few private files Spindle wrote for it (``expose``,
   read-only; ``expose_writable``, read-write: a per-thread settings home);
6. Spindle's own files emptied again on top of all that: the data dir (database, log,
   process list), the database and the config file (which may hold the bot token).

It runs in new user, PID, IPC, UTS and cgroup namespaces with every capability dropped, and
dies with its parent (``--die-with-parent``; with ``--unshare-pid`` the kernel ends every
process of the namespace when its first one dies). The network is shared: agents call their
model's API. What it does not protect is written in docs/security.md.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path

from threadspindle.runtime.core.frozen import Frozen

__all__ = ["Sandbox", "SandboxUnavailable", "check_sandbox", "sandbox_argv"]


class SandboxUnavailable(RuntimeError):
    """The configured sandbox cannot run here (the message says why)."""


class Sandbox(Frozen):
    """How agent processes are confined (``[sandbox]`` / ``[agents.<name>] sandbox``)."""

    binary: str = "bwrap"
    hidden: tuple[str, ...] = ()  # Spindle's data dir, database and config file
    roots: tuple[str, ...] = ()  # the allowed roots, where every thread's workdir lives


def _real(path: str) -> str:
    return os.path.realpath(os.path.expanduser(path))


def _home_entries(home: str) -> list[str]:
    try:
        names = sorted(os.listdir(home))
    except OSError:
        return []
    return [os.path.join(home, n) for n in names if n.startswith(".") and n not in (".", "..")]


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
) -> list[str]:
    """``argv`` wrapped in bubblewrap as the module docstring describes. ``home``: the agent's
    private home (``AgentOptions.home``); None: the user's home, hidden entries only.
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
    user_home = _real("~")
    if home is not None:
        args += ["--bind", _real(home), _real(home)]
    elif user_home != "/":
        args += ["--tmpfs", user_home]
        for entry in _home_entries(user_home):
            args += ["--bind", entry, entry]
    if workdir is not None:
        args += ["--bind", _real(workdir), _real(workdir)]
    for path in expose:
        args += ["--ro-bind", path, path]
    for path in expose_writable:
        args += ["--bind", path, path]
    emptied: list[str] = []
    for path in sorted({_real(h) for h in sandbox.hidden}, key=len):
        if any(path.startswith(d.rstrip(os.sep) + os.sep) for d in emptied):
            continue  # inside a directory already emptied: nothing to hide, no mount point
        if os.path.isdir(path):
            args += ["--tmpfs", path]
            emptied.append(path)
        elif os.path.exists(path):
            args += ["--ro-bind", "/dev/null", path]
    if chdir or workdir:
        args += ["--chdir", _real(chdir or workdir or "/")]
    return [*args, "--", *argv]


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
