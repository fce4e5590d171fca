"""The guard: a tiny parent between Spindle and each child it runs, so the child's whole tree
dies with Spindle, however Spindle dies.

Run as ``python -I -S process_guard.py LIFELINE_FD [REPORT_FD] -- COMMAND ARGS...``
(standard library only, no site packages: it starts in a few milliseconds; either fd may be
``-``). Spindle spawns it as the leader of a new session; it runs the command as its child,
in a process group of its own, writes the command's pid (which is that group's id) as one
line to ``REPORT_FD`` and closes it, and then:

- **notices Spindle's death through the lifeline**: ``LIFELINE_FD`` is the read end of a pipe
  whose only write end Spindle holds (close-on-exec, never inherited). The kernel closes it
  when Spindle exits, by SIGKILL too, and the guard reads EOF. This does not depend on which
  of Spindle's threads forked the guard (trio forks in a worker thread, and the parent-death
  signal fires when *that thread* ends, so it cannot be used for the guard itself), and it
  has no start-up race: a lifeline whose writer is already gone reads EOF at once.
- **keeps every descendant in reach**: it is a child subreaper (``PR_SET_CHILD_SUBREAPER``),
  so a grandchild that daemonizes (double fork, ``setsid``) is re-parented to the guard,
  not to init, and stays in the guard's tree where Spindle's stop (psutil) and the guard's
  own sweep find it.
- **takes its child along if the guard itself is killed**: the child gets the parent-death
  signal SIGKILL (``PR_SET_PDEATHSIG``), set by the guard, a single-threaded process whose
  forking thread lives exactly as long as the guard.
- **ends the tree**: on lifeline EOF it sends SIGTERM to every descendant and group member,
  waits ``GRACE_S``, then SIGKILLs what is left; when the child exits by itself it sweeps
  the leftovers the same way. It exits only when none is left, with the child's status (its
  exit code, or the same signal), so Spindle sees the child's own result.

The command runs in a process group of its own; the guard forwards every catchable signal
it gets (SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGWINCH) to that group. So a
signal sent to the guard's pid or group (Spindle's SIGINT to interrupt, SIGTERM to stop, an
agent's ``kill <pid>`` of a process it started) reaches the command exactly once, as it
would without a guard. SIGKILL ends the guard, and the command with it (parent-death
signal); the command's own children then have no guard to sweep them, but they are in the
command's process group, which Spindle learnt from ``REPORT_FD``: ``ManagedProcess.wait``
stops them when it sees the guard gone, and the child registry records the group, so the
next start-up stops them if Spindle could not (``effects/child_registry.py``). A descendant
that left the group and daemonized is re-parented to init then, out of anyone's reach (the
subreaper died with the guard): that one gap is documented, not closed.

On systems without ``prctl`` (not Linux) the lifeline and the group sweep still work; the
subreaper and the parent-death signal are skipped.
"""

from __future__ import annotations

import errno
import os
import select
import signal
import sys
import time

GRACE_S = 0.5  # SIGTERM -> SIGKILL when Spindle is gone: the tree must end within a second
LEFTOVER_GRACE_S = 2.0  # SIGTERM -> SIGKILL for processes the child left behind
PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
_FORWARDED = (
    signal.SIGINT,
    signal.SIGTERM,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGUSR1,
    signal.SIGUSR2,
    signal.SIGWINCH,
)


_libc = None  # (contextlib and subprocess are not imported: they slow the start-up)


def _prctl(option: int, value: int) -> bool:
    global _libc
    if not sys.platform.startswith("linux"):
        return False
    if _libc is None:
        import ctypes

        _libc = ctypes.CDLL(None, use_errno=True)
    return int(_libc.prctl(option, value, 0, 0, 0)) == 0


def _stat(pid: int) -> tuple[int, int] | None:
    """(parent pid, process group) of a live, non-zombie process, read from /proc."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    fields = data[data.rfind(b")") + 2 :].split()  # the name may hold spaces and parens
    if fields[0] in (b"Z", b"X"):
        return None
    return int(fields[1]), int(fields[2])


def descendants(root: int) -> list[int]:
    """Live processes below ``root`` or in its process group (``root`` excluded)."""
    try:
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return []
    parent: dict[int, int] = {}
    found: set[int] = set()
    for pid in pids:
        info = _stat(pid)
        if info is None:
            continue
        parent[pid] = info[0]
        if info[1] == root:
            found.add(pid)
    for pid in parent:
        seen = 0
        up = parent.get(pid)
        while up is not None and up > 1 and seen < 4096:
            if up == root:
                found.add(pid)
                break
            up = parent.get(up)
            seen += 1
    found.discard(root)
    return sorted(found)


class Guard:
    def __init__(self, lifeline: int | None, command: list[str], report: int | None = None) -> None:
        self.lifeline = lifeline
        self.report = report
        self.command = command
        self.me = os.getpid()
        self.child_status: int | None = None
        self.child: int | None = None  # its pid

    def _exec_child(self) -> None:
        """In the forked child: a group of its own (signals come through the guard, once),
        death with the guard (a guard already gone means the child must not start at all),
        the default signal dispositions back, then the command."""
        try:
            os.setpgid(0, 0)
            _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
            if os.getppid() != self.me:
                os._exit(1)
            signal.set_wakeup_fd(-1)
            for sig in (*_FORWARDED, signal.SIGCHLD, signal.SIGPIPE):
                signal.signal(sig, signal.SIG_DFL)
            os.execvp(self.command[0], self.command)
        except OSError as exc:
            os.write(2, f"spindle: cannot run {self.command[0]}: {exc.strerror}\n".encode())
            code = 127 if exc.errno in (errno.ENOENT, errno.EACCES, errno.ENOEXEC) else 126
            os._exit(code)
        finally:
            os._exit(127)

    def _forward(self, signum: int, _frame: object) -> None:
        if self.child is not None and self.child_status is None:
            try:
                os.killpg(self.child, signum)
            except OSError:
                pass

    def start(self) -> None:
        _prctl(PR_SET_CHILD_SUBREAPER, 1)
        for sig in _FORWARDED:
            # A handler (not SIG_IGN): handlers reset to the default at exec, so the child
            # still reacts to these signals as usual.
            signal.signal(sig, self._forward)
        self.wake_r, wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        # A plain fork (the guard is single-threaded), not subprocess: importing subprocess
        # would double the guard's start-up time.
        pid = os.fork()
        if pid == 0:
            self._exec_child()
        self.child = pid
        try:  # also here: no window where its group is missing
            os.setpgid(pid, pid)
        except OSError:
            pass
        if self.report is not None:  # the command's pid, which is its group's id
            try:
                os.write(self.report, f"{pid}\n".encode())
            except OSError:
                pass  # Spindle stopped listening: it learns nothing, the guard goes on
            os.close(self.report)
            self.report = None
        # The child has the only copies of Spindle's pipes now: EOF must follow its exit.
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        os.close(devnull)

    def reap(self) -> None:
        """Collect every exited child (orphans adopted as subreaper too)."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid == self.child:
                self.child_status = status

    def orphaned(self) -> bool:
        if self.lifeline is None:
            return False
        try:
            return os.read(self.lifeline, 64) == b""
        except BlockingIOError:
            return False
        except OSError:
            return True

    def watch(self) -> bool:
        """Wait until the child exits (False) or Spindle is gone (True)."""
        watched = [self.wake_r] + ([self.lifeline] if self.lifeline is not None else [])
        while True:
            self.reap()
            if self.child_status is not None:
                return False
            try:
                ready, _, _ = select.select(watched, [], [], 1.0)
            except InterruptedError:
                continue
            if self.lifeline is not None and self.lifeline in ready and self.orphaned():
                return True
            try:
                os.read(self.wake_r, 4096)
            except OSError:
                pass

    def sweep(self, grace: float) -> None:
        """SIGTERM every descendant and group member, wait ``grace``, SIGKILL the rest.

        Each pass (every 10 ms) signals what it finds that was not signalled yet, and the
        SIGKILL passes everything, again and again: a process that forks and lets its
        parent exit has a new pid after every pass, which one list of pids taken before
        the kill missed (it went on running, re-parented to init once the guard left). A
        scan that finds nothing is believed only when the next one, at once, agrees: a
        process forked while ``/proc`` was listed, whose parent exited before it was
        read, is missing from one."""
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
            deadline = time.monotonic() + wait
            signalled: set[int] = set()
            while True:
                self.reap()
                pids = descendants(self.me) or descendants(self.me)
                if not pids:
                    return
                for pid in pids:
                    if sig == signal.SIGKILL or pid not in signalled:
                        signalled.add(pid)
                        try:
                            os.kill(pid, sig)
                        except OSError:
                            pass
                if time.monotonic() >= deadline:
                    break
                time.sleep(0.01)

    def exit(self) -> None:
        self.reap()
        status = self.child_status
        if status is None:
            os._exit(1)
        if os.WIFSIGNALED(status):
            sig = os.WTERMSIG(status)
            # Die of the same signal, so Spindle sees the child's own end (-9, -15 ...).
            try:
                import resource

                resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # no core of the guard
            except (ValueError, OSError):
                pass
            signal.set_wakeup_fd(-1)
            if sig not in (signal.SIGKILL, signal.SIGSTOP):  # these cannot be caught anyway
                try:
                    signal.signal(sig, signal.SIG_DFL)
                    signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])
                except (ValueError, OSError):
                    pass
            os.kill(self.me, sig)
            os._exit(128 + sig)
        os._exit(os.waitstatus_to_exitcode(status))


def main(argv: list[str]) -> None:
    fds = argv[1 : argv.index("--")] if "--" in argv else []
    command = argv[argv.index("--") + 1 :] if "--" in argv else []
    if len(fds) not in (1, 2) or not command:
        sys.stderr.write("usage: process_guard.py LIFELINE_FD|- [REPORT_FD|-] -- COMMAND ...\n")
        os._exit(2)
    lifeline, report = (None if fd == "-" else int(fd) for fd in (*fds, "-")[:2])
    for fd in (lifeline, report):
        if fd is not None:
            os.set_inheritable(fd, False)  # the command has no business with them
    if lifeline is not None:
        os.set_blocking(lifeline, False)
    guard = Guard(lifeline, command, report)
    try:
        guard.start()
    except OSError as exc:
        sys.stderr.write(f"spindle: cannot start the guard for {command[0]}: {exc}\n")
        os._exit(1)
    orphaned = guard.watch()
    guard.sweep(GRACE_S if orphaned else LEFTOVER_GRACE_S)
    guard.exit()


if __name__ == "__main__":
    main(sys.argv)
