"""The process's limit on open files, raised at start to what a busy Spindle needs.

Every running agent holds three pipes and a process's descriptors in Spindle's process, and
the web chat one socket per connection: at the soft limit most Linux sessions start with
(1,024), a few hundred streaming threads, or a local process opening connections to the
web chat, use them all, and then nothing can open a file (the database, an agent's pipes).
The hard limit is usually far higher (524,288 under systemd), and a process may raise its
own soft limit up to it, as Go's runtime does for every Go program. Spindle raises it to
``WANT`` at most: enough for thousands of threads, and not so high that a child which
closes every possible descriptor at start (some do) spends long on it.
"""

from __future__ import annotations

import logging
import resource

__all__ = ["WANT", "raise_open_file_limit"]

_log = logging.getLogger(__name__)

WANT = 65_536


def raise_open_file_limit(want: int = WANT) -> int:
    """Raise the soft limit on open files toward ``want`` (never above the hard limit, and
    never lowering it); returns the soft limit in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = want if hard == resource.RLIM_INFINITY else min(want, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError) as exc:  # (a container may refuse it)
            _log.warning("could not raise the open-file limit from %d to %d: %s", soft, target, exc)
            return soft
        return target
    return soft
