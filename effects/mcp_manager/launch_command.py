"""``launch_argv``: the command line a managed process is started with: in the sandbox when
one is configured (its thread's workdir bound from a descriptor), under the guard unless
it is kept past Spindle's end."""

from __future__ import annotations

import os
import shutil

from threadspindle.effects.process import guarded_argv, lifeline_fd
from threadspindle.effects.sandbox import WorkdirOutsideRoots, open_workdir, sandbox_argv

from .models import ProcessManagerConfig
from .start_request import ProcessError

__all__ = ["launch_argv"]


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
    if keep:
        return argv, ()
    return guarded_argv(argv), (lifeline_fd(),)


def _sandbox_binary(binary: str) -> str:
    """bubblewrap's absolute path, found with Spindle's own PATH: the guard runs it from the
    process's cwd (the agent's workdir) with the agent's environment, where a bare name or
    a relative path would find what the agent put there, outside the sandbox."""
    found = shutil.which(binary)
    if found is None:
        raise ProcessError(f"the sandbox binary {binary!r} is not found (not on PATH)")
    return os.path.abspath(found)
