"""A managed process and every descendant ever seen, and how to stop all of them.

Each process is known by pid *and* psutil create time, so a recycled pid is never signalled.
The watcher samples the tree while the process runs (``sample``); at stop time the tree is
looked at once more, so a daemon that called ``setsid()`` and whose parent has exited (it is
no descendant any more) is still found. Stopping: SIGTERM to the group and every known
process, ``grace`` seconds, then SIGKILL through ``effects.process.kill_tree``, which
confirms with psutil that none is left.
"""

from __future__ import annotations

import signal

import psutil
import trio

from threadspindle.effects.process import alive, kill_tree, signal_all, tree_pids

from .state_store import same_process

__all__ = ["ProcessTree", "create_time"]

MAX_DESCENDANTS = 1024  # bound on remembered descendants per process


def create_time(pid: int) -> float | None:
    try:
        started: float = psutil.Process(pid).create_time()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None
    return started


class ProcessTree:
    def __init__(self, pid: int | None, started: float | None) -> None:
        self.pid = pid
        self.started = started
        self.descendants: dict[int, float] = {}  # pid -> create_time

    def sample(self) -> None:
        """Remember the descendants the process has now."""
        if self.pid is None:
            return
        for pid in tree_pids(self.pid)[1:]:
            if pid not in self.descendants and len(self.descendants) < MAX_DESCENDANTS:
                started = create_time(pid)
                if started is not None:
                    self.descendants[pid] = started

    def alive_pids(self) -> list[int]:
        """The process and the descendants ever seen that are still the same processes,
        with their current descendants."""
        pids: list[int] = []
        if self.pid is not None and same_process(self.pid, self.started):
            pids.extend(tree_pids(self.pid))
        for pid, started in self.descendants.items():
            if same_process(pid, started):
                pids.extend(tree_pids(pid))
        return list(dict.fromkeys(pids))

    async def terminate(self, *, force: bool, grace: float) -> tuple[bool, bool]:
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
