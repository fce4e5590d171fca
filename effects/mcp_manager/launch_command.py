"""``launch_argv``: the command line a managed process is started with: in the sandbox when
one is configured (its thread's workdir bound from a descriptor), under the guard unless
it is kept past Spindle's end."""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping

import trio

from threadspindle.effects.process import guarded_argv, lifeline_fd
from threadspindle.effects.sandbox import WorkdirOutsideRoots, open_workdir, sandbox_argv

from .models import ProcessManagerConfig
from .start_request import ProcessError

__all__ = ["launch_argv", "resolve_in_sandbox"]


def launch_argv(
    config: ProcessManagerConfig,
    argv: list[str],
    *,
    workdir: str | None,
    home: str | None,
    cwd: str | None,
    bind_fds: dict[str, int],
) -> tuple[list[str], tuple[int, ...]]:
    """``argv`` as it is started, and the descriptors to pass it. ``workdir``: the thread's
    (None: its agent has not started since Spindle did), opened into ``bind_fds``, which
    the caller passes to the child and closes. ``ProcessError`` says why it cannot start."""
    keep = config.keep_on_shutdown
    if config.sandbox is not None:
        argv = _sandboxed(
            config, argv, workdir=workdir, home=home, cwd=cwd, bind_fds=bind_fds, keep=keep
        )
    if keep:
        return argv, ()
    return guarded_argv(argv), (lifeline_fd(),)


def _sandboxed(
    config: ProcessManagerConfig,
    argv: list[str],
    *,
    workdir: str | None,
    home: str | None,
    cwd: str | None,
    bind_fds: dict[str, int],
    keep: bool,
) -> list[str]:
    assert config.sandbox is not None
    if workdir is None:
        # Unbound: no workdir to confine it to, and ``cwd`` could be any thread's.
        raise ProcessError(
            "this thread's agent is not running: send it a prompt first, then start "
            "the process again"
        )
    try:
        # Bound from a descriptor opened without a link on the way (``open_workdir``):
        # a link put in its place while bubblewrap starts is not followed.
        real, fd = open_workdir(config.sandbox, workdir)
    except WorkdirOutsideRoots as exc:
        raise ProcessError(str(exc)) from None
    bind_fds[real] = fd
    argv = sandbox_argv(
        config.sandbox,
        argv,
        workdir=None,
        home=home,
        die_with_parent=not keep,
        chdir=cwd or real,
        bind_fds=bind_fds,
    )
    argv[:1] = [_sandbox_binary(argv[0])]
    return argv


# Run by ``sh`` in the sandbox: the executable "$1" names, as ``resolve_command`` finds it
# outside (a path must be a file and executable; a name is looked up on PATH).
_LOOKUP = (
    'case $1 in */*) if [ -f "$1" ] && [ -x "$1" ]; then printf "%s\\n" "$1"; else exit 1; fi;; '
    '*) command -v -- "$1" || exit 1;; esac'
)
LOOKUP_TIMEOUT_S = 10.0


async def resolve_in_sandbox(
    config: ProcessManagerConfig,
    command: str,
    *,
    workdir: str | None,
    home: str | None,
    cwd: str,
    env: Mapping[str, str],
) -> str:
    """The executable ``command`` names, looked up inside the thread's sandbox with
    ``env``'s PATH, as the process itself will see it. Looked up outside (``os.access``,
    ``shutil.which``), a path the sandbox hides (another thread's workdir, the data
    directory) told the agent whether an executable was there. ``ProcessError`` when
    nothing is found, one answer whatever the host has."""
    if not command.strip():
        raise ProcessError("command is empty")
    bind_fds: dict[str, int] = {}
    try:
        argv = _sandboxed(
            config,
            ["/bin/sh", "-c", _LOOKUP, "sh", command],
            workdir=workdir,
            home=home,
            cwd=cwd,
            bind_fds=bind_fds,
            keep=False,
        )
        with trio.move_on_after(LOOKUP_TIMEOUT_S):
            result = await trio.run_process(
                argv,
                stdin=b"",
                capture_stdout=True,
                capture_stderr=True,
                check=False,
                cwd=cwd,
                env=dict(env),
                pass_fds=tuple(bind_fds.values()),
            )
            found = result.stdout.decode("utf-8", "surrogateescape").strip()
            if result.returncode == 0 and found:
                # A shell builtin is named bare (``echo``): bubblewrap finds it on PATH.
                return found if os.sep in found else command
            raise ProcessError(f"command not found or not executable: {command!r}")
        raise ProcessError(f"could not look {command!r} up in the sandbox (it took too long)")
    finally:
        for fd in bind_fds.values():
            os.close(fd)


def _sandbox_binary(binary: str) -> str:
    """bubblewrap's absolute path, found with Spindle's own PATH: the guard runs it from the
    process's cwd (the agent's workdir) with the agent's environment, where a bare name or
    a relative path would find what the agent put there, outside the sandbox."""
    found = shutil.which(binary)
    if found is None:
        raise ProcessError(f"the sandbox binary {binary!r} is not found (not on PATH)")
    return os.path.abspath(found)
