"""Agent and managed process control: spawn in a new session, read lines, stop the whole tree.

One mechanism for every child process Spindle runs (agent CLIs, MCP-managed processes):
spawn with ``start_new_session`` so the child leads its own process group; read stdout as
lines with a size guard; keep the last stderr lines for error reports; stop with an
escalation (SIGINT, SIGTERM to the group, SIGKILL) and confirm with psutil that no process
of the tree is left, including grandchildren that left the group.

Every child runs under a guard (``process_guard.py``, see its docstring for the design):
the guard leads the group, the command runs as its child, and the whole tree ends when
Spindle does, by SIGKILL too. The guard learns of Spindle's death from the *lifeline*, a
pipe whose write end only this process holds, and reports the command's pid (the id of the
command's own process group) on a second pipe. Each spawned guard is recorded, with that
group, in the child registry (``child_registry.py``) when one is in use, so that the next
start-up can stop a tree that survived anyway. A guard that is itself SIGKILLed cannot sweep
its command's children: ``ManagedProcess.wait`` does it instead, as soon as the guard is
gone. ``sandbox`` (``sandbox.py``) runs the command under bubblewrap.
"""

from __future__ import annotations

import collections
import errno
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import psutil
import trio

from .child_env import child_environment
from .pipe_size import give_back, note_pipe, widen_pipe
from .sandbox import Sandbox, open_workdir, sandbox_argv

if TYPE_CHECKING:  # the registry imports the process tools: no import at run time
    from .child_registry import ChildRegistry

__all__ = [
    "CREATE_TIME_TOLERANCE_S",
    "GUARD",
    "LineReader",
    "ManagedProcess",
    "alive",
    "create_time",
    "group_members",
    "group_pids",
    "guarded_argv",
    "kill_tree",
    "lifeline_fd",
    "forget_child",
    "note_child",
    "record_children",
    "read_command_pid",
    "resolve_executable",
    "same_process",
    "signal_all",
    "tree_pids",
]

GUARD = str(Path(__file__).with_name("process_guard.py"))
# psutil derives create_time from boot time + clock ticks; two readings of one process agree
# to well within this, while a recycled pid would have to be reused inside it to fool us.
CREATE_TIME_TOLERANCE_S = 0.5
REPORT_TIMEOUT_S = 10.0  # how long a spawn waits for its guard to name the command
ORPHAN_GRACE_S = 0.5  # SIGTERM -> SIGKILL for what a killed guard left (as the guard would)
_lifeline: tuple[int, int, int] | None = None  # (owner pid, read end, write end)
_registry: ChildRegistry | None = None


def lifeline_fd() -> int:
    """The read end of this process's lifeline (made once; see the module docstring). Both
    ends are close-on-exec: only a guard, through ``pass_fds``, gets the read end, and no
    child ever holds the write end, so it closes exactly when this process ends."""
    global _lifeline
    if _lifeline is None or _lifeline[0] != os.getpid():
        read_end, write_end = os.pipe()
        _lifeline = (os.getpid(), read_end, write_end)
    return _lifeline[1]


def guarded_argv(argv: Sequence[str], report_fd: int | None = None) -> list[str]:
    """``argv`` run under the guard, tied to this process's lifeline (pass
    ``pass_fds=(lifeline_fd(),)`` to the spawn, and ``report_fd`` too when given: the write
    end of a pipe on which the guard names the command, see ``read_command_pid``)."""
    report = "-" if report_fd is None else str(report_fd)
    return [sys.executable, "-I", "-S", GUARD, str(lifeline_fd()), report, "--", *argv]


async def read_command_pid(read_fd: int, timeout: float = REPORT_TIMEOUT_S) -> int | None:
    """The pid a guard reports for its command, read from (and closing) ``read_fd``; None
    when the guard could not start it, or said nothing in ``timeout`` seconds."""
    stream = trio.lowlevel.FdStream(read_fd)
    data = b""
    try:
        with trio.move_on_after(timeout):
            while b"\n" not in data and len(data) < 64:
                chunk = await stream.receive_some(64)
                if not chunk:
                    break
                data += chunk
    finally:
        await stream.aclose()
    try:
        return int(data.split(b"\n", 1)[0])
    except ValueError:
        return None


def record_children(registry: ChildRegistry | None) -> None:
    """Record every guard spawned from now on in ``registry`` (``spindle run`` does, with
    ``<data_dir>/agent-processes.json``); None stops recording."""
    global _registry
    _registry = registry


def note_child(pid: int, label: str, group: int | None = None) -> None:
    """Record a guarded child (``group``: its command's process group, when known)."""
    if _registry is not None:
        _registry.add(pid, label, group=group)


def forget_child(pid: int) -> None:
    if _registry is not None:
        _registry.discard(pid)


def resolve_executable(
    program: str, env: Mapping[str, str] | None = None, cwd: str | None = None
) -> str:
    """The file ``program`` names, found as exec would (a path, or a search of ``PATH``);
    raises ``FileNotFoundError``/``PermissionError``/``NotADirectoryError`` as a direct
    spawn would have, since the guard, not Spindle, execs it."""
    if cwd is not None and not os.path.isdir(cwd):
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), cwd)
    if os.sep in program:
        path = program if os.path.isabs(program) or cwd is None else os.path.join(cwd, program)
        if not os.path.exists(path):
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), program)
        if os.path.isdir(path) or not os.access(path, os.X_OK):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), program)
        return os.path.abspath(path)
    search = (env if env is not None else os.environ).get("PATH", os.defpath)
    found = shutil.which(program, path=search)
    if found is None:
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), program)
    return found


MAX_LINE = 32 * 1024 * 1024  # a longer line is cut: a runaway line must not eat memory
READ_CHUNK = 65536  # bytes read from a pipe at a time


class LineReader:
    """Split a trio ReceiveStream into text lines (without the newline).

    A line longer than ``max_line`` bytes is cut: its first ``max_line`` bytes come as one
    line (``oversized`` counts them) and the rest, up to its newline, is dropped. Read as
    lines of their own, the rest would be taken for what follows it: a console line's tail
    for a command, an agent's for another event."""

    def __init__(self, stream: trio.abc.ReceiveStream, max_line: int = MAX_LINE) -> None:
        self._stream = stream
        self._buf = bytearray()
        self._max = max_line
        self._pipe: bool | None = None  # a pipe or socket (known at the first read)
        self._skipping = False  # dropping the rest of a line that was cut
        self.oversized = 0  # lines cut at max_line

    async def __aiter__(self) -> AsyncIterator[str]:
        while True:
            nl = self._buf.find(b"\n")
            if self._skipping:
                if nl < 0:
                    self._buf.clear()
                else:
                    del self._buf[: nl + 1]
                    self._skipping = False
                    continue
            elif nl >= 0:
                line = bytes(self._buf[:nl])
                del self._buf[: nl + 1]
                yield line.decode("utf-8", "replace").rstrip("\r")
                continue
            elif len(self._buf) > self._max:
                self.oversized += 1
                cut = bytes(self._buf[: self._max])
                self._buf.clear()
                self._skipping = True
                yield cut.decode("utf-8", "replace")
                continue
            try:
                chunk = await self._receive()
            except (trio.ClosedResourceError, trio.BrokenResourceError):
                chunk = b""
            if not chunk:
                if self._buf and not self._skipping:
                    yield bytes(self._buf).decode("utf-8", "replace")
                self._buf.clear()
                return
            self._buf += chunk

    async def _receive(self) -> bytes | bytearray:
        """The next chunk the stream has. A pipe (``trio.lowlevel.FdStream``, what a child's
        stdout is) is waited on first and read once it is readable: its ``receive_some``
        yields, reads, finds nothing (an exception) and only then waits, so an agent that
        says a line at a time cost two task steps and two reads a line. Waiting first is
        also a checkpoint, so a reader of a flood still lets every other task run between
        its reads."""
        stream = self._stream
        if self._pipe is None:
            self._pipe = isinstance(stream, trio.lowlevel.FdStream) and _is_pipe(stream.fileno())
        if not self._pipe or not isinstance(stream, trio.lowlevel.FdStream):
            return await stream.receive_some(READ_CHUNK)  # (a file: epoll refuses it)
        while True:
            fd = stream.fileno()
            if fd < 0:
                raise trio.ClosedResourceError("the pipe was closed")
            # Raises ClosedResourceError when the stream is closed while this waits.
            await trio.lowlevel.wait_readable(fd)
            try:
                return os.read(fd, READ_CHUNK)
            except BlockingIOError:
                continue  # (another reader took it, or a spurious wake-up)
            except OSError as exc:
                if exc.errno == errno.EBADF:
                    raise trio.ClosedResourceError("the pipe was closed") from None
                raise trio.BrokenResourceError from exc


def _is_pipe(fd: int) -> bool:
    """``fd`` is a pipe or a socket: what can be waited on until it is readable."""
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


def tree_pids(pid: int) -> list[int]:
    """The pid and all its live descendants (empty when the pid is gone)."""
    try:
        root = psutil.Process(pid)
        return [pid] + [c.pid for c in root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def create_time(pid: int) -> float | None:
    """When ``pid`` started (psutil), or None when it is gone or a zombie."""
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return None
        started: float = proc.create_time()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None
    return started


def same_process(pid: int | None, started: float | None) -> bool:
    """True when ``pid`` is alive (not a zombie) and started at ``started``."""
    if pid is None or started is None:
        return False
    now = create_time(pid)
    return now is not None and abs(now - started) <= CREATE_TIME_TOLERANCE_S


def group_members(pgid: int, born_after: float) -> list[int]:
    """Live members of the process group ``pgid`` started no earlier than ``born_after``
    (less the tolerance): a group id in use is never handed out again, so while the group
    has members they are the ones of the group that was made then."""
    try:
        os.killpg(pgid, 0)  # one cheap look: no process at all in the group is the rule
    except (ProcessLookupError, PermissionError):
        return []
    found = []
    for proc in psutil.process_iter(["pid", "create_time", "status"]):
        try:
            if (
                os.getpgid(proc.pid) == pgid
                and proc.info["create_time"] >= born_after - CREATE_TIME_TOLERANCE_S
                and proc.info["status"] != psutil.STATUS_ZOMBIE
            ):
                found.append(proc.pid)
        except (ProcessLookupError, PermissionError, psutil.Error, TypeError):
            continue
    return found


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


def _guard_started(pid: int) -> float:
    """A guard's create time, on psutil's clock like every create time compared with it (our
    own child: its pid cannot be handed out again before we reap it, even as a zombie)."""
    try:
        started: float = psutil.Process(pid).create_time()
    except psutil.Error:
        started = time.time()  # gone already: nothing of it is younger than now
    return started


class ManagedProcess:
    """A child process in its own session with line-oriented stdio."""

    def __init__(
        self,
        proc: trio.Process,
        stderr_lines: int = 40,
        *,
        command_pid: int | None = None,
        started: float | None = None,
    ) -> None:
        self.proc = proc
        self.pid = proc.pid
        # The command the guard runs: its pid is its process group's id (None: unknown).
        self.command_pid = command_pid
        # When the guard started: no member of its command's group is older.
        self.started = _guard_started(proc.pid) if started is None else started
        self._reaped = False
        self._pipe_lent = 0  # stdout room lent by ``pipe_size.widen_pipe``, until the exit
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
        sandbox: Sandbox | None = None,
        home: str | None = None,
        expose: Sequence[str] = (),
        expose_writable: Sequence[str] = (),
        stdout_bytes: int | None = None,
    ) -> ManagedProcess:
        """Start ``argv`` under a guard (it dies with Spindle). With ``sandbox`` it runs in
        bubblewrap seeing ``cwd``, ``home`` (None: the user's home, hidden entries only),
        the files in ``expose`` (read-only) and the directories in ``expose_writable``.
        ``stdout_bytes``: room the stdout pipe should have for a burst the command is known
        to say (``pipe_size.py``: as much of it as the kernel grants)."""
        command = [resolve_executable(argv[0], env, cwd), *argv[1:]]
        # The workdir is bound from a descriptor opened without a link on the way: a link
        # put in its place while bubblewrap starts is not followed (``open_workdir``).
        bind_fds: dict[str, int] = {}
        try:
            if sandbox is not None:
                real = None
                if cwd is not None:
                    real, fd = open_workdir(sandbox, cwd)
                    bind_fds[real] = fd
                command = sandbox_argv(
                    sandbox,
                    command,
                    workdir=None,
                    chdir=real,  # where it was checked, not where the path points later
                    bind_fds=bind_fds,
                    home=home,
                    expose=expose,
                    expose_writable=expose_writable,
                )
                command[0] = resolve_executable(command[0], env)
            report_read, report_write = os.pipe()
            try:
                proc = await trio.lowlevel.open_process(
                    guarded_argv(command, report_write),
                    stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    # Never Spindle's own environment: ``child_environment`` leaves its
                    # secrets out.
                    env=dict(env) if env is not None else child_environment(),
                    cwd=cwd,
                    start_new_session=True,
                    pass_fds=(lifeline_fd(), report_write, *bind_fds.values()),
                )
            except BaseException:
                os.close(report_read)
                raise
            finally:
                os.close(report_write)  # the guard holds the only write end now: EOF follows
        finally:
            for fd in bind_fds.values():
                os.close(fd)
        command_pid = await read_command_pid(report_read)
        note_child(proc.pid, os.path.basename(argv[0]), group=command_pid)
        lent = 0
        if isinstance(proc.stdout, trio.lowlevel.FdStream):
            note_pipe(proc.stdout.fileno(), os.path.basename(argv[0]))  # shrunk: says so
            if stdout_bytes is not None:
                lent = widen_pipe(proc.stdout.fileno(), stdout_bytes)
        managed = cls(proc, command_pid=command_pid, started=_guard_started(proc.pid))
        managed._pipe_lent = lent
        return managed

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

    async def feed_stdin(self, text: str) -> None:
        """Write ``text`` to stdin, then close it (a prompt read to its end). A process
        that exits or stops reading first is no error: its exit says why. A lone
        surrogate (text decoded with escapes) is written as ``?`` rather than raising."""
        assert self.proc.stdin is not None
        try:
            await self.proc.stdin.send_all(text.encode("utf-8", "replace"))
            await self.close_stdin()
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass

    def signal(self, sig: int) -> None:
        try:
            os.killpg(self.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    @property
    def returncode(self) -> int | None:
        return self.proc.poll()

    async def wait(self) -> int:
        """The exit code. Once the guard is gone, whatever it could not sweep (it was
        SIGKILLed: its command's own children live on in the command's group) is stopped
        here, SIGTERM then SIGKILL as the guard would have, and the child registry forgets
        the guard only when nothing of it is left."""
        code = await self.proc.wait()
        if not self._reaped:
            self._reaped = True
            # Its end of the pipe is closed: nothing more will need the room (the kernel
            # counts the pipe until Spindle's end closes too, a moment later).
            give_back(self._pipe_lent)
            self._pipe_lent = 0
            with trio.CancelScope(shield=True):
                left = await self._stop_orphans()
            if not left:
                forget_child(self.pid)
        return code

    def _orphans(self) -> list[int]:
        """What is left in the command's group (nothing, unless the guard was killed)."""
        if self.command_pid is None:
            return []
        return group_members(self.command_pid, born_after=self.started)

    async def _stop_orphans(self) -> list[int]:
        pids = self._orphans()
        if not pids:
            return []
        # SIGCONT too: a stopped process keeps a SIGTERM pending and would never act on it.
        signal_all(pids, signal.SIGTERM)
        signal_all(pids, signal.SIGCONT)
        with trio.move_on_after(ORPHAN_GRACE_S):
            while alive(pids):
                await trio.sleep(0.02)
        left = list(dict.fromkeys(alive(pids) + self._orphans()))
        if left:
            signal_all(left, signal.SIGKILL)
            with trio.move_on_after(2.0):
                while alive(left):
                    await trio.sleep(0.02)
        return alive(left)

    async def stop(self, *, grace: float = 3.0, interrupt_first: bool = True) -> bool:
        """SIGINT (if asked), then SIGTERM to the group, then SIGKILL; True when the
        whole tree is confirmed gone."""
        extra = tree_pids(self.pid) + self._orphans()
        if interrupt_first and self.returncode is None:
            self.signal(signal.SIGINT)
            with trio.move_on_after(grace / 2):
                await self.proc.wait()
        gone = await kill_tree(self.pid, grace=grace, pgid=self.pid, extra_pids=extra)
        with trio.move_on_after(1.0):
            await self.wait()
        return gone and not alive(extra)
