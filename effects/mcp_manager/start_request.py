"""What an agent may ask a managed process to be, checked before anything runs: its
command (found and executable), its arguments and working directory (no NUL, which the OS
would refuse with a bare ValueError; the directory inside the allowed roots and, sandboxed,
inside the thread's workdir), and its environment (well-formed, without the variables that
make the dynamic loader or glibc load code or read files, since the process guard and
bubblewrap run outside the sandbox with it; over Spindle's own without its ``SPINDLE_*``
settings and secrets). A refusal is a ``ProcessError`` whose text is for the agent,
verbatim."""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

from threadspindle.effects.child_env import child_environment
from threadspindle.effects.sandbox import inside

__all__ = [
    "ProcessError",
    "check_env",
    "check_no_nul",
    "inherited_env",
    "loader_variable",
    "resolve_command",
    "resolve_cwd",
]

# An agent's `env` reaches the process guard (`python -I -S`, which ignores PYTHON* but not
# what the dynamic loader and glibc read) and bubblewrap, both outside the sandbox: an
# LD_PRELOAD of a library the agent compiled would run its code there. Refused: every LD_*
# (LD_PRELOAD, LD_LIBRARY_PATH, LD_AUDIT, LD_DEBUG_OUTPUT ...) and, of the list glibc
# itself strips from setuid programs (UNSECURE_ENVVARS in its unsecvars.h), those that make
# it load code or read or write a file the variable names. The rest of that list only
# tunes the resolver (LOCALDOMAIN, RES_OPTIONS) or names the temp dir (TMPDIR), which real
# programs need and which cannot reach outside.
_LOADER_PREFIX = "LD_"
_GLIBC_VARIABLES = {
    "GCONV_PATH": "makes glibc load character-set converters (shared libraries) from it",
    "GETCONF_DIR": "makes glibc run getconf helpers from it",
    "GLIBC_TUNABLES": "is parsed by the dynamic loader (and has let it be taken over)",
    "LOCPATH": "makes glibc read locale files (trusted, unchecked input) from it",
    "NLSPATH": "makes glibc read message catalogs (format strings) from any file",
    "HOSTALIASES": "makes the resolver read any file it names",
    "RESOLV_HOST_CONF": "makes the resolver read any file it names",
    "MALLOC_TRACE": "makes glibc's malloc debugger write to any file it names",
    "TZDIR": "makes glibc read time-zone files (trusted input) from it",
}


class ProcessError(Exception):
    """A request the supervisor refuses; the message is for the caller, verbatim."""


def inherited_env() -> dict[str, str]:
    """Spindle's environment without its own settings and secrets (``SPINDLE_*``: the
    Discord token, the MCP token): an agent can read a managed process's environment."""
    return child_environment()


def check_no_nul(command: str, args: Sequence[str], cwd: str | None) -> None:
    """A NUL cannot be in a path or an argv (the OS would raise a bare ValueError)."""
    if "\0" in command:
        raise ProcessError("command contains a NUL character")
    if cwd is not None and "\0" in cwd:
        raise ProcessError("cwd contains a NUL character")
    for n, arg in enumerate(args):
        if "\0" in arg:
            raise ProcessError(f"args[{n}] contains a NUL character")


def check_env(env: Mapping[str, str]) -> dict[str, str]:
    """The variables an agent asked for, refused when malformed or when they would make
    code outside the sandbox load or read what the agent chose (``loader_variable``)."""
    for key, value in env.items():
        if not key or "=" in key or "\0" in key or "\0" in value:
            raise ProcessError(f"invalid environment variable name or value: {key!r}")
        why = loader_variable(key)
        if why is not None:
            raise ProcessError(
                f"environment variable {key!r} is refused: it {why}, and the process "
                "guard and the sandbox (bubblewrap) get this environment and run outside "
                "the sandbox"
            )
    return dict(env)


def loader_variable(name: str) -> str | None:
    """Why the dynamic loader or glibc would load code or read a file ``name`` names in a
    program started with it, or None for an ordinary variable."""
    if name.startswith(_LOADER_PREFIX):
        return "is read by the dynamic loader (libraries to load, where to find them)"
    return _GLIBC_VARIABLES.get(name)


def resolve_command(command: str, cwd: str, path_var: str) -> str:
    """The executable ``command`` names: a path (relative to ``cwd``), or found on
    ``path_var``. Without a sandbox only: a sandboxed thread's command is looked up inside
    its sandbox (``launch_command.resolve_in_sandbox``), where what it may not see is not."""
    if not command.strip():
        raise ProcessError("command is empty")
    if os.sep in command:
        candidate = command if os.path.isabs(command) else os.path.join(cwd, command)
        if not os.path.isfile(candidate):
            raise ProcessError(f"command not found: {command!r}")
        if not os.access(candidate, os.X_OK):
            raise ProcessError(f"command is not executable: {command!r}")
        return candidate
    found = shutil.which(command, path=path_var)
    if found is None:
        raise ProcessError(f"command not found: {command!r} (not on PATH)")
    return found


def resolve_cwd(
    cwd: str | None,
    *,
    base: str | None,
    roots: Sequence[str],
    workdir: str | None,
    sandboxed: bool,
) -> str:
    """The real directory a process runs in: ``cwd`` (relative to ``base``, the caller's
    workdir, which is also the default), inside one of ``roots``; sandboxed, inside the
    thread's ``workdir`` too."""
    if not cwd:
        if base is None:
            raise ProcessError("cwd is required (this thread has no workdir to default to)")
        cwd = base
    path = Path(cwd).expanduser()
    if not path.is_absolute():
        if base is None:
            raise ProcessError(f"cwd {cwd!r} is relative and this thread has no workdir")
        path = Path(base) / path
    real = os.path.realpath(path)
    if not any(inside(real, root) for root in roots):
        raise ProcessError(
            f"cwd {real!r} is outside the allowed roots ({', '.join(roots) or 'none'})"
        )
    if not os.path.isdir(real):
        raise ProcessError(f"cwd {real!r} does not exist or is not a directory")
    if sandboxed and workdir is not None and not inside(real, workdir):
        raise ProcessError(
            f"cwd {real!r} is outside this thread's workdir {workdir!r} (agents are "
            "sandboxed: a process sees only its thread's workdir)"
        )
    return real
