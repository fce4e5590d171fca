"""Agent and managed process control: spawn in a new session, read lines, stop the whole tree.

One mechanism for every child process Spindle runs (agent CLIs, MCP-managed processes):
spawn with ``start_new_session`` so the child leads its own process group; read stdout as
lines with a size guard; keep the last stderr lines for error reports; stop with an
escalation (SIGINT, SIGTERM to the group, SIGKILL) and confirm with psutil that no process
of the tree is left, including grandchildren that left the group.
"""

from __future__ import annotations

import collections
import os
import signal
import subprocess
from collections.abc import AsyncIterator, Mapping, Sequence

import psutil
import trio

__all__ = [
    "LineReader",
    "ManagedProcess",
    "alive",
    "group_pids",
    "kill_tree",
    "signal_all",
    "tree_pids",
]

MAX_LINE = 32 * 1024 * 1024  # a longer line is cut: a runaway line must not eat memory


class LineReader:
    """Split a trio ReceiveStream into text lines (without the newline)."""

    def __init__(self, stream: trio.abc.ReceiveStream, max_line: int = MAX_LINE) -> None:
        self._stream = stream
        self._buf = bytearray()
        self._max = max_line
        self.oversized = 0  # lines cut at max_line

    async def __aiter__(self) -> AsyncIterator[str]:
        while True:
            nl = self._buf.find(b"\n")
            if nl >= 0:
                line = bytes(self._buf[:nl])
                del self._buf[: nl + 1]
                yield line.decode("utf-8", "replace").rstrip("\r")
                continue
            if len(self._buf) > self._max:
                self.oversized += 1
                yield bytes(self._buf[: self._max]).decode("utf-8", "replace")
                self._buf.clear()
                continue
            try:
                chunk = await self._stream.receive_some(65536)
            except (trio.ClosedResourceError, trio.BrokenResourceError):
                chunk = b""
            if not chunk:
                if self._buf:
                    yield bytes(self._buf).decode("utf-8", "replace")
                    self._buf.clear()
                return
            self._buf += chunk


def tree_pids(pid: int) -> list[int]:
    """The pid and all its live descendants (empty when the pid is gone)."""
    try:
        root = psutil.Process(pid)
        return [pid] + [c.pid for c in root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def group_pids(pgid: int) -> list[int]:
    """Live processes of a process group, found by scanning: a launcher that exited first
    (node's ``.bin`` wrappers) leaves its group members with no living ancestor to find."""
    found = []
    for proc in psutil.process_iter(["pid"]):
        try:
            if os.getpgid(proc.pid) == pgid:
                found.append(proc.pid)
        except (ProcessLookupError, PermissionError, psutil.Error):
            continue
    return found


def signal_all(pids: Sequence[int], sig: int, pgid: int | None = None) -> None:
    """Send ``sig`` to the process group ``pgid`` (if given) and to each pid; gone ones are
    skipped."""
    if pgid is not None:
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def alive(pids: Sequence[int]) -> list[int]:
    """The pids that still run (zombies count as gone)."""
    running = []
    for pid in pids:
        try:
            p = psutil.Process(pid)
            if p.status() != psutil.STATUS_ZOMBIE:
                running.append(pid)
        except psutil.NoSuchProcess:
            pass
    return running


async def kill_tree(
    pid: int,
    *,
    grace: float = 3.0,
    first_signal: int = signal.SIGTERM,
    pgid: int | None = None,
    extra_pids: Sequence[int] = (),
) -> bool:
    """Signal the tree rooted at ``pid`` with ``first_signal``, then SIGKILL what is left
    after ``grace`` seconds. Returns True when psutil confirms every process is gone."""
    group = group_pids(pgid) if pgid is not None else []
    pids = list(dict.fromkeys(tree_pids(pid) + list(extra_pids) + group))
    if not alive(pids):
        return True
    signal_all(pids, first_signal, pgid)
    with trio.move_on_after(grace):
        while alive(pids):
            await trio.sleep(0.02)
    left = alive(pids)
    if left:
        # Descendants may have forked since: take a fresh look before the final blow.
        more = [q for p in left for q in tree_pids(p)]
        signal_all(list(dict.fromkeys(left + more)), signal.SIGKILL, pgid)
        with trio.move_on_after(2.0):
            while alive(left + more):
                await trio.sleep(0.01)
        left = alive(left + more)
    return not left


class ManagedProcess:
    """A child process in its own session with line-oriented stdio."""

    def __init__(self, proc: trio.Process, stderr_lines: int = 40) -> None:
        self.proc = proc
        self.pid = proc.pid
        self.stderr_tail: collections.deque[str] = collections.deque(maxlen=stderr_lines)
        self._send_lock = trio.Lock()

    @classmethod
    async def spawn(
        cls,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        stdin: bool = True,
    ) -> ManagedProcess:
        proc = await trio.lowlevel.open_process(
            list(argv),
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            start_new_session=True,
        )
        return cls(proc)

    def stdout_lines(self) -> LineReader:
        assert self.proc.stdout is not None
        return LineReader(self.proc.stdout)

    async def pump_stderr(self) -> None:
        """Keep the last stderr lines (run this in a task for the process's lifetime)."""
        if self.proc.stderr is None:
            return
        async for line in LineReader(self.proc.stderr, max_line=64 * 1024):
            if line.strip():
                self.stderr_tail.append(line)

    async def write_line(self, line: str) -> None:
        assert self.proc.stdin is not None
        async with self._send_lock:
            await self.proc.stdin.send_all(line.encode() + b"\n")

    async def close_stdin(self) -> None:
        if self.proc.stdin is not None:
            await self.proc.stdin.aclose()

    def signal(self, sig: int) -> None:
        try:
            os.killpg(self.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    @property
    def returncode(self) -> int | None:
        return self.proc.poll()

    async def wait(self) -> int:
        return await self.proc.wait()

    async def stop(self, *, grace: float = 3.0, interrupt_first: bool = True) -> bool:
        """SIGINT (if asked), then SIGTERM to the group, then SIGKILL; True when the
        whole tree is confirmed gone."""
        extra = tree_pids(self.pid)
        if interrupt_first and self.returncode is None:
            self.signal(signal.SIGINT)
            with trio.move_on_after(grace / 2):
                await self.proc.wait()
        gone = await kill_tree(self.pid, grace=grace, pgid=self.pid, extra_pids=extra)
        with trio.move_on_after(1.0):
            await self.proc.wait()
        return gone and not alive(extra)
