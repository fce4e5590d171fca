"""Widen a pipe's kernel buffer so a child can say a burst without waiting for its reader.

Why it matters: Node sets its stdout pipe non-blocking and queues what the pipe cannot take;
``process.exit()`` then drops that queue. A Node CLI (Gemini's ``-p``) that says more than
the pipe holds in its last moments (its echo of a long prompt, then the answer, when the
model is quick and Spindle's reader a little behind) exits with the tail unsaid: the turn
ends with no result though the model answered. A pipe that holds the whole burst takes it
before the exit.

The kernel grants what it can: an unprivileged user gets at most
``/proc/sys/fs/pipe-max-size`` (1 MiB by default), and nothing more once its pipes already
hold ``pipe-user-pages-soft`` pages. That is why only a known burst asks for room, never
every pipe: wide pipes spend the budget every other pipe of the user is sized from.
"""

from __future__ import annotations

import fcntl
from pathlib import Path

__all__ = ["MAX_PIPE_BYTES", "pipe_size", "widen_pipe"]

MAX_PIPE_BYTES = 16 * 1024 * 1024  # never more, whatever a caller asks
_PIPE_MAX_SIZE = Path("/proc/sys/fs/pipe-max-size")


def pipe_size(fd: int) -> int:
    """The bytes the pipe ``fd`` holds before a writer waits (0: not a pipe)."""
    try:
        return fcntl.fcntl(fd, fcntl.F_GETPIPE_SZ)
    except OSError:
        return 0


def widen_pipe(fd: int, size: int) -> int:
    """Make the pipe ``fd`` hold at least ``size`` bytes (at most ``MAX_PIPE_BYTES``), or as
    much as the kernel lets this user have; never narrower than it is. Returns its size."""
    have = pipe_size(fd)
    if have == 0:
        return 0
    want = min(size, MAX_PIPE_BYTES)
    for ask in (want, min(want, _pipe_max_size())):
        if ask <= have:
            break
        try:
            return fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, ask)
        except OSError:  # EPERM: above the user's maximum or budget; EBUSY: holds more
            continue
    return have


def _pipe_max_size() -> int:
    try:
        return int(_PIPE_MAX_SIZE.read_text())
    except (OSError, ValueError):
        return 0
