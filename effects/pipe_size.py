"""Widen a pipe's kernel buffer so a child can say a burst without waiting for its reader.

Why it matters: Node sets its stdout pipe non-blocking and queues what the pipe cannot take;
``process.exit()`` then drops that queue. A Node CLI (Gemini's ``-p``) that says more than
the pipe holds in its last moments (its echo of a long prompt, then the answer, when the
model is quick and Spindle's reader a little behind) exits with the tail unsaid: the turn
ends with no result though the model answered. A pipe that holds the whole burst takes it
before the exit.

The kernel grants what it can: an unprivileged user gets at most
``/proc/sys/fs/pipe-max-size`` (1 MiB by default), and once the pipes of the user hold
``pipe-user-pages-soft`` pages (64 MiB by default, 1,024 default pipes) every new pipe it
makes gets 8 KiB instead of 64. So only a known burst asks for room, never every pipe, and
an unprivileged Spindle lends at most a quarter of that budget at a time (``ALLOTMENT_SHARE``):
past it a pipe keeps its default size, as before, rather than shrink the pipes made after it.
Root (CAP_SYS_RESOURCE) has no such budget.

Past that budget nothing Spindle does can widen a pipe again, so ``note_pipe`` tells the
operator (a warning at most every ``SHRUNK_WARNING_INTERVAL_S``) when a new agent's pipe came
out smaller than a default one, with the fix: lift the budget (``sysctl -w
fs.pipe-user-pages-soft=0``), or run fewer agents at once as that user.
"""

from __future__ import annotations

import fcntl
import logging
import math
import os
import resource
import time
from pathlib import Path

__all__ = ["MAX_PIPE_BYTES", "give_back", "lent", "note_pipe", "pipe_size", "widen_pipe"]

_log = logging.getLogger(__name__)

MAX_PIPE_BYTES = 16 * 1024 * 1024  # never more, whatever a caller asks
ALLOTMENT_SHARE = 4  # an unprivileged Spindle widens pipes with 1/4 of the user's budget
_PIPE_MAX_SIZE = Path("/proc/sys/fs/pipe-max-size")
_PIPE_USER_PAGES_SOFT = Path("/proc/sys/fs/pipe-user-pages-soft")

# What a new pipe holds while the user is within the budget: 16 pages (the kernel's
# PIPE_DEF_BUFFERS; 64 KiB with 4 KiB pages), 2 pages past it.
DEFAULT_PIPE_BYTES = 16 * resource.getpagesize()
SHRUNK_WARNING_INTERVAL_S = 600.0
_warned_at = -math.inf

_lent = 0  # bytes beyond their first size that widened, still open pipes hold
_allotment: int | None = None  # None: not read yet; -1: no limit


def pipe_size(fd: int) -> int:
    """The bytes the pipe ``fd`` holds before a writer waits (0: not a pipe)."""
    try:
        return fcntl.fcntl(fd, fcntl.F_GETPIPE_SZ)
    except OSError:
        return 0


def note_pipe(fd: int, what: str) -> bool:
    """Whether the new pipe ``fd`` holds less than a default pipe: the user's pipes passed
    ``pipe-user-pages-soft`` and the kernel now makes each new one 2 pages, 8 KiB (every
    agent's output then crosses in pieces that small, and a Node CLI that exits with more
    than that unsaid loses it: see the module docstring). Warns, naming the fix, at most
    every ``SHRUNK_WARNING_INTERVAL_S``."""
    global _warned_at
    size = pipe_size(fd)
    if size == 0 or size >= DEFAULT_PIPE_BYTES:
        return False
    now = time.monotonic()
    if now - _warned_at >= SHRUNK_WARNING_INTERVAL_S:
        _warned_at = now
        _log.warning(
            "%s got a pipe of %d KiB, not %d: this user's pipes hold the kernel's budget "
            "(fs.pipe-user-pages-soft, %d pages), so each new one is this small and an agent "
            "CLI that exits with more than that unread loses it. Lift the budget (sysctl -w "
            "fs.pipe-user-pages-soft=0) or run fewer agents at once as this user",
            what,
            size // 1024,
            DEFAULT_PIPE_BYTES // 1024,
            _soft_budget() // resource.getpagesize(),
        )
    return True


def widen_pipe(fd: int, size: int) -> int:
    """Make the pipe ``fd`` hold at least ``size`` bytes (at most ``MAX_PIPE_BYTES``), or as
    much as the kernel and the allotment let; never narrower than it is. Returns the bytes
    lent from the allotment: ``give_back`` them once the pipe is closed."""
    global _lent
    have = pipe_size(fd)
    if have == 0:
        return 0
    want = min(size, MAX_PIPE_BYTES)
    allotment = _read_allotment()
    if allotment >= 0:
        # The kernel rounds a size up to a power of two: ask for one that fits what is left.
        room = have + max(0, allotment - _lent)
        want = min(want, 1 << (room.bit_length() - 1))
    for ask in (want, min(want, _pipe_max_size())):
        if ask <= have:
            break
        try:
            got: int = fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, ask)
        except OSError:  # EPERM: above the user's maximum or budget; EBUSY: holds more
            continue
        _lent += got - have
        return got - have
    return 0


def give_back(lent_bytes: int) -> None:
    """Return what ``widen_pipe`` lent, its pipe closed."""
    global _lent
    _lent = max(0, _lent - lent_bytes)


def lent() -> int:
    """The bytes widened pipes hold now beyond their first size."""
    return _lent


def _read_allotment() -> int:
    global _allotment
    if _allotment is None:
        _allotment = -1 if os.geteuid() == 0 else _soft_budget() // ALLOTMENT_SHARE
    return _allotment


def _soft_budget() -> int:
    """The user's pipe budget in bytes (``pipe-user-pages-soft``; 0 there: no budget)."""
    try:
        pages = int(_PIPE_USER_PAGES_SOFT.read_text())
    except (OSError, ValueError):
        pages = 16384  # the kernel's default
    if pages == 0:
        return 4 * MAX_PIPE_BYTES * ALLOTMENT_SHARE  # unlimited: still not without end
    return pages * resource.getpagesize()


def _pipe_max_size() -> int:
    try:
        return int(_PIPE_MAX_SIZE.read_text())
    except (OSError, ValueError):
        return 0
