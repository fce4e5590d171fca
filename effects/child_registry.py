"""The processes this Spindle started, on disk, so the next Spindle can stop any that outlived
it before it resumes a single conversation.

Agents normally die with Spindle (``effects/process_guard.py``). This is the second lock: a
guard that could not act (stopped, or killed together with Spindle before it read the
lifeline) leaves a tree that would keep writing into a session the restarted Spindle is about
to resume. ``<data_dir>/agent-processes.json`` lists each live child as pid + psutil create
time (written atomically on every spawn and exit, mode 0600), with the process group of the
command the guard runs (the guard reports it), so that what a guard killed on its own left
behind (its command's children) is found too. A guard stays recorded until nothing of it is
left (``ManagedProcess.wait`` stops such leftovers at once when Spindle sees the guard go).
``stop_recorded_children`` runs at start-up, under the event log's lock (so never against a
Spindle that is still running): each record whose pid still belongs to the same process
(same create time; a recycled pid is never signalled) has its tree and process group
stopped, SIGTERM then SIGKILL, and so has what is left in its command's group (members born
after the guard, while the group's leader is gone or is still the recorded command).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from threadspindle.effects.process import CREATE_TIME_TOLERANCE_S, create_time, same_process

__all__ = ["ChildRegistry", "StoppedChild", "stop_recorded_children"]

logger = logging.getLogger("spindle.children")

FILE_NAME = "agent-processes.json"


@dataclass(frozen=True, slots=True)
class _Record:
    started: float  # the guard's create time
    label: str
    group: int | None = None  # its command's process group (the command's pid)
    group_started: float | None = None  # the command's create time, when it was read


@dataclass(frozen=True, slots=True)
class StoppedChild:
    pid: int
    label: str
    pids: tuple[int, ...]  # the tree and group members that were signalled
    gone: bool


class ChildRegistry:
    """The live children of this Spindle, mirrored to a file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._children: dict[int, _Record] = {}
        self.writes = 0
        self._save()

    def add(self, pid: int, label: str, group: int | None = None) -> None:
        started = create_time(pid)
        if started is None:
            return
        # Forget children that ended without telling (a process nobody waited for), unless
        # their command's group still has members: those are what the next start stops.
        self._children = {
            p: rec
            for p, rec in self._children.items()
            if same_process(p, rec.started) or _group_left(rec)
        }
        group_started = create_time(group) if group is not None else None
        self._children[pid] = _Record(started, label, group, group_started)
        self._save()

    def discard(self, pid: int) -> None:
        if self._children.pop(pid, None) is not None:
            self._save()

    def pids(self) -> list[int]:
        return list(self._children)

    def _save(self) -> None:
        records = [
            {
                "pid": pid,
                "create_time": rec.started,
                "label": rec.label,
                "group": rec.group,
                "group_create_time": rec.group_started,
            }
            for pid, rec in self._children.items()
        ]
        data = json.dumps({"spindle_pid": os.getpid(), "children": records})
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        # No fsync: this guards against a crash of Spindle, not of the machine (a reboot
        # ends every child anyway); the rename keeps the file whole.
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(data)
        os.replace(tmp, self.path)
        self.writes += 1


def _load(path: Path) -> list[tuple[int, _Record]]:
    try:
        data = json.loads(path.read_text())
        return [
            (
                int(r["pid"]),
                _Record(
                    float(r["create_time"]),
                    str(r.get("label", "")),
                    None if r.get("group") is None else int(r["group"]),
                    None if r.get("group_create_time") is None else float(r["group_create_time"]),
                ),
            )
            for r in data.get("children", [])
        ]
    except FileNotFoundError:
        return []
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        logger.warning("ignoring unreadable %s: %s", path, exc)
        return []


def _group(pgid: int, born_after: float = 0.0) -> list[int]:
    found = []
    for proc in psutil.process_iter(["pid", "create_time"]):
        try:
            if os.getpgid(proc.pid) == pgid and proc.info["create_time"] >= born_after:
                found.append(proc.pid)
        except (ProcessLookupError, PermissionError, psutil.Error, TypeError):
            continue
    return found


def _tree(pid: int) -> list[int]:
    """The process, its descendants and the members of the group it leads."""
    pids = [pid]
    try:
        pids += [c.pid for c in psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return []
    return list(dict.fromkeys(pids + _group(pid)))


def _group_left(rec: _Record) -> list[int]:
    """What is left in the group of a record's command: members born after its guard, while
    the group's leader is gone or is still that command (a live leader of another age means
    the number was handed out again: that group is someone else's)."""
    if rec.group is None:
        return []
    if create_time(rec.group) is not None and not same_process(rec.group, rec.group_started):
        return []
    return _group(rec.group, born_after=rec.started - CREATE_TIME_TOLERANCE_S)


def _targets(pid: int, rec: _Record) -> list[int]:
    """What is left of a recorded child: its tree while it runs; when it is gone, the
    members of the group it led (a pid that leads a live group is never handed out again,
    so they are its own; born after it, to be sure); and either way what is left in its
    command's group."""
    if same_process(pid, rec.started):
        found = _tree(pid)
    elif create_time(pid) is not None:
        found = []  # the pid belongs to another process now
    else:
        found = _group(pid, born_after=rec.started - CREATE_TIME_TOLERANCE_S)
    return list(dict.fromkeys(found + _group_left(rec)))


def _alive(pids: list[int]) -> list[int]:
    left = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                left.append(pid)
        except psutil.NoSuchProcess:
            pass
    return left


def _signal(pids: list[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def _wait_gone(pids: list[int], timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    left = _alive(pids)
    while left and time.monotonic() < deadline:
        time.sleep(0.02)
        left = _alive(left)
    return left


def stop_recorded_children(path: Path, grace: float = 1.0) -> list[StoppedChild]:
    """Stop what a previous Spindle recorded in ``path`` and is still running; synchronous,
    for start-up (nothing else runs yet). The file is emptied afterwards."""
    stopped = []
    for pid, rec in _load(path):
        label = rec.label
        pids = _targets(pid, rec)
        if not pids:
            continue
        # SIGCONT too: a stopped process keeps a SIGTERM pending and would never act on it.
        _signal(pids, signal.SIGTERM)
        _signal(pids, signal.SIGCONT)
        left = _wait_gone(pids, grace)
        if left:
            left = list(dict.fromkeys(left + [q for p in left for q in _tree(p)]))
            _signal(left, signal.SIGKILL)
            left = _wait_gone(left, 5.0)
        logger.warning(
            "stopped %s (pid %d) left running by the previous Spindle: %d processes%s",
            label or "a child",
            pid,
            len(pids),
            "" if not left else f", still alive: {left}",
        )
        stopped.append(StoppedChild(pid=pid, label=label, pids=tuple(pids), gone=not left))
    try:
        path.unlink()
    except FileNotFoundError:
        pass
    return stopped
