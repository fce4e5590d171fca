"""A process and every descendant ever seen, and how to stop all of them: the one process-tree
watcher, shared by the agent adapters and the MCP process manager.

Each process is known by pid *and* psutil create time, so a recycled pid is never signalled.
The watcher samples the tree while the process runs (``sample``); at stop time the tree is
looked at once more, so a process whose parent exited first is still found: a daemon that
called ``setsid()``, or the native binary behind a node launcher (``.bin/codex``) that is no
descendant of the launcher's pid any more. ``sample(pid)`` also takes other roots (an agent
that starts one process per turn). Stopping: SIGTERM to the group and every known process,
``grace`` seconds, then SIGKILL through ``effects.process.kill_tree``, which confirms with
psutil that none is left. At most ``MAX_DESCENDANTS`` processes are remembered.
"""

from __future__ import annotations

import signal

import trio

from threadspindle.effects.process import (
    CREATE_TIME_TOLERANCE_S,
    alive,
    create_time,
    kill_tree,
    same_process,
    signal_all,
    tree_pids,
)

__all__ = ["CREATE_TIME_TOLERANCE_S", "ProcessTree", "create_time", "same_process"]

MAX_DESCENDANTS = 1024  # bound on remembered processes per tree


class ProcessTree:
    """A root process, known by pid and create time (both None when only ``sample(pid)``
    roots are watched; a root whose create time is unknown is never signalled), and every
    descendant seen."""

    def __init__(self, pid: int | None = None, started: float | None = None) -> None:
        self.pid = pid
        self.started = started
        self.descendants: dict[int, float] = {}  # pid -> create_time

    def sample(self, pid: int | None = None) -> None:
        """Remember the processes now in the tree of ``pid`` (default: below the root)."""
        root = self.pid if pid is None else pid
        if root is None:
            return
        for found in tree_pids(root):
            if found == self.pid or found in self.descendants:
                continue
            if len(self.descendants) >= MAX_DESCENDANTS:
                return
            started = create_time(found)
            if started is not None:
                self.descendants[found] = started

    def alive_pids(self) -> list[int]:
        """The root and the processes ever seen that are still the same processes, with
        their current descendants."""
        pids: list[int] = []
        if self.pid is not None and same_process(self.pid, self.started):
            pids.extend(tree_pids(self.pid))
        for pid, started in self.descendants.items():
            if same_process(pid, started):
                pids.extend(tree_pids(pid))
        return list(dict.fromkeys(pids))

    async def terminate(self, *, force: bool = False, grace: float = 3.0) -> tuple[bool, bool]:
        """Signal the whole tree; returns (no process of it left, SIGKILL was needed)."""
        self.sample()
        pids = self.alive_pids()
        if not pids:
            return True, False
        pgid = self.pid if self.pid in pids else None  # never a group we cannot vouch for
        if not force:
            signal_all(pids, signal.SIGTERM, pgid)
            with trio.move_on_after(grace):
                while alive(pids):
                    await trio.sleep(0.02)
            left = alive(pids)
            if not left:
                return True, False
            pids = left
        gone = await kill_tree(
            pids[0], grace=0.0, first_signal=signal.SIGKILL, pgid=pgid, extra_pids=pids
        )
        return gone, True
