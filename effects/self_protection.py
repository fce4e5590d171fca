"""Spindle's own process and files, out of reach of the agents it runs as the same user.

- ``make_non_dumpable``: ``prctl(PR_SET_DUMPABLE, 0)`` on Linux. The kernel then hands
  ``/proc/<pid>/environ``, ``mem``, ``fd/`` and ``maps`` to root only and refuses ptrace to
  anyone without ``CAP_SYS_PTRACE``: a same-user agent can no longer read the Discord token
  from Spindle's environment or memory. (Root still can: an agent running as root is not
  contained by this; see docs/security.md.) The flag is reset by ``execve``, so children are
  unaffected.
- ``private_dir`` / ``private_file``: mode 0700 / 0600 for Spindle's data dir and the files
  that hold secrets or conversations (the event log, its WAL, the JSON log, the MCP process
  list with its environment values).
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

__all__ = ["is_dumpable", "make_non_dumpable", "private_dir", "private_file"]

PR_SET_DUMPABLE = 4
PR_GET_DUMPABLE = 3


def _prctl(option: int, value: int = 0) -> int:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    return int(libc.prctl(option, value, 0, 0, 0))


def make_non_dumpable() -> bool:
    """True when this process is now non-dumpable (False off Linux, or if refused)."""
    if not sys.platform.startswith("linux"):
        return False
    return _prctl(PR_SET_DUMPABLE, 0) == 0


def is_dumpable() -> bool:
    if not sys.platform.startswith("linux"):
        return True
    return _prctl(PR_GET_DUMPABLE) != 0


def private_dir(path: Path) -> None:
    """Create ``path`` (and parents) if needed; make it 0700. A directory that cannot be
    made (a full or read-only disk) is left to whoever writes into it next: opening the
    event log reports that in one line, with its exit code."""
    with contextlib.suppress(OSError):
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(path, 0o700)


def private_file(path: Path) -> None:
    """Create ``path`` empty if it is missing; make it 0600 either way (before anything is
    written into it, so no secret is ever in a world-readable file)."""
    with contextlib.suppress(OSError):  # exists already, or cannot be made (see private_dir)
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    with contextlib.suppress(OSError):
        os.chmod(path, 0o600)
