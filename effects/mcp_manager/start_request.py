"""What an agent may ask a managed process to be, checked before anything runs: its
command (found and executable), its arguments and working directory (no NUL, which the OS
would refuse with a bare ValueError; the directory inside the allowed roots and, sandboxed,
inside the thread's workdir), and its environment (well-formed, over Spindle's own without
its ``SPINDLE_*`` settings and secrets). A refusal is a ``ProcessError`` whose text is for
the agent, verbatim."""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = [
    "ProcessError",
    "check_env",
    "check_no_nul",
    "inherited_env",
    "inside",
    "resolve_command",
    "resolve_cwd",
]

_PRIVATE_ENV_PREFIX = "SPINDLE_"


class ProcessError(Exception):
    """A request the supervisor refuses; the message is for the caller, verbatim."""


def inherited_env() -> dict[str, str]:
    """Spindle's environment without its own settings and secrets (``SPINDLE_*``: the
    Discord token, the MCP token): an agent can read a managed process's environment."""
    return {k: v for k, v in os.environ.items() if not k.startswith(_PRIVATE_ENV_PREFIX)}


def inside(path: str, directory: str) -> bool:
    """``path`` (real) is ``directory`` or below it."""
    directory = os.path.realpath(directory)
    return path == directory or path.startswith(directory.rstrip(os.sep) + os.sep)


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
    for key, value in env.items():
        if not key or "=" in key or "\0" in key or "\0" in value:
            raise ProcessError(f"invalid environment variable name or value: {key!r}")
    return dict(env)


def resolve_command(command: str, cwd: str, path_var: str) -> str:
    """The executable ``command`` names: a path (relative to ``cwd``), or found on
    ``path_var``."""
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
