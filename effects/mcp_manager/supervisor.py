"""The process supervisor: start, stop, restart, list and read the output of named, long-running
processes that agents ask for, each owned by the chat thread that started it.

Theory of operation:

- A process is keyed by ``(thread id, name)``; a thread sees only its own (the operator sees
  all). One ``trio.Lock`` per key serializes start/stop/restart of that key, so ten callers
  starting the same name at once get one process.
- Every process leads its own session (``start_new_session``), so its group can be signalled
  at once. Unless ``keep_on_shutdown``, it runs under the guard (``effects/process_guard.py``)
  and dies with Spindle, by SIGKILL too; with it, it survives Spindle and is adopted by the
  next one. With ``sandbox`` it runs in bubblewrap, seeing only its thread's workdir (its
  ``cwd`` must be inside it), like the agent that asked for it. Its stdout and stderr are
  pipes to its own writer process (``output_writer.py``, in a session of its own too),
  which writes them to two capped files under the data dir: a pipe read by Spindle would
  die with Spindle, a file written by the process itself could not be capped; the files
  keep the output of a kept process readable by the next Spindle. One watcher task per
  process tails the files into bounded rings (``output_tail.py``), samples the process tree
  (so grandchildren that left the group are still known at stop time), and records the
  exit.
- Stop (``effects/process_tree.py``): SIGTERM to the group and every known descendant, wait
  ``stop_grace_s``, then SIGKILL through ``effects.process.kill_tree``, which confirms with
  psutil that none is left.
- The list is saved (``state_store.py``) on every status change and, for output offsets,
  at most once a second. On start-up a live record whose pid and create time still match is
  adopted (only kept processes can be: ``spindle run`` stops the others first); any other
  is marked ``lost``.

Refusals (unknown name, bad cwd, command not found, limits) raise ``ProcessError`` whose text
is meant for the agent; anything else escaping a tool is a bug.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import trio

from threadspindle.effects.process import forget_child, note_child
from threadspindle.effects.process_tree import ProcessTree, create_time

from .auth import Caller
from .launch_command import launch_argv, resolve_in_sandbox
from .models import (
    OutputResult,
    ProcessInfo,
    ProcessManagerConfig,
    ProcessRecord,
    ProcessStatus,
    StopResult,
)
from .output_pipes import delete_output, output_bases, start_output_writer
from .output_tail import StreamTail
from .ring_buffer import OutputRing, SequenceCounter
from .start_request import (
    ProcessError,
    check_env,
    check_no_nul,
    inherited_env,
    resolve_command,
    resolve_cwd,
)
from .state_store import StateStore, same_process

__all__ = ["ProcessError", "ProcessSupervisor", "SupervisorStatistics"]

# Matched whole (fullmatch): "$" would let a trailing newline through ("web\n").
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_TREE_SAMPLE_S = 0.5  # how often a running process's tree is looked at
_SEQ_BLOCK = 10_000  # sequence numbers reserved per save
_WRITER_DRAIN_S = 1.0  # after an exit, how long the writer may take to write the rest


@dataclass(frozen=True, slots=True)
class SupervisorStatistics:
    live: int
    records: int
    spawned: int
    adopted: int
    lost: int
    escalations: int
    state_writes: int


@dataclass(eq=False)
class _Entry:
    record: ProcessRecord
    seq: SequenceCounter
    out: StreamTail
    err: StreamTail
    proc: trio.Process | None = None
    writer: trio.Process | None = None  # None when adopted: it is not our child then
    writer_done: trio.Event = field(default_factory=trio.Event)
    adopted: bool = False
    stop_requested: bool = False
    done: trio.Event = field(default_factory=trio.Event)
    tree: ProcessTree = field(default_factory=lambda: ProcessTree(None, None))
    dirty: bool = False

    @property
    def streams(self) -> tuple[StreamTail, StreamTail]:
        return (self.out, self.err)


def _info(e: _Entry, *, already_running: bool = False) -> ProcessInfo:
    r = e.record
    return ProcessInfo(
        name=r.name,
        thread_id=r.thread_id,
        status=r.status,
        command=r.command,
        args=list(r.args),
        cwd=r.cwd,
        pid=r.pid,
        exit_code=r.exit_code,
        started_at=r.started_at,
        stopped_at=r.stopped_at,
        restarts=r.restarts,
        adopted=e.adopted,
        error=r.error,
        already_running=already_running,
    )


class ProcessSupervisor:
    """Use ``async with ProcessSupervisor.open(config) as supervisor``."""

    def __init__(self, config: ProcessManagerConfig, nursery: trio.Nursery) -> None:
        self.config = config
        self._nursery = nursery
        self._entries: dict[tuple[str, str], _Entry] = {}
        self._locks: dict[tuple[str, str], trio.Lock] = {}
        self._thread_workdirs: dict[str, str] = {}
        self._thread_homes: dict[str, str] = {}  # the agent's private home, when it has one
        self._disposing: set[str] = set()  # threads whose processes are being stopped
        self._store = StateStore(config.data_dir)
        self._roots = [os.path.realpath(p) for p in config.allowed_roots]
        self._spawned = 0
        self._adopted = 0
        self._lost = 0
        self._escalations = 0
        self.closed = False
        self._restoring = False

    @classmethod
    @asynccontextmanager
    async def open(cls, config: ProcessManagerConfig) -> AsyncIterator[ProcessSupervisor]:
        async with trio.open_nursery() as nursery:
            supervisor = cls(config, nursery)
            supervisor._restore()
            nursery.start_soon(supervisor._save_loop)
            try:
                yield supervisor
            finally:
                with trio.CancelScope(shield=True):
                    await supervisor.shutdown()
                nursery.cancel_scope.cancel()

    # ---- the tools' operations -------------------------------------------------------

    async def start(
        self,
        caller: Caller,
        name: str,
        command: str,
        args: Sequence[str] = (),
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> ProcessInfo:
        """Start ``name``; when it is already starting or running, return it untouched."""
        self._check_open()
        if not _NAME.fullmatch(name):
            raise ProcessError(
                f"invalid process name {name!r}: use 1-64 letters, digits, '.', '_' or '-'"
            )
        key = (caller.thread_id, name)
        async with self._lock(key):
            existing = self._entries.get(key)
            if existing is not None and existing.record.status.live:
                return _info(existing, already_running=True)
            return await self._start_locked(caller, name, command, list(args), cwd, env, 0)

    async def stop(self, caller: Caller, name: str, force: bool = False) -> StopResult:
        entry = self._find(caller, name)
        key = (entry.record.thread_id, name)
        async with self._lock(key):
            return await self._stop_locked(entry, force)

    async def restart(self, caller: Caller, name: str) -> ProcessInfo:
        """Stop (if live) and start again with the same command, args, cwd and env."""
        self._check_open()
        entry = self._find(caller, name)
        r = entry.record
        key = (r.thread_id, name)
        async with self._lock(key):
            entry = self._entries.get(key, entry)
            if entry.record.status.live:
                result = await self._stop_locked(entry, False)
                if not result.tree_gone:
                    raise ProcessError(
                        f"{name!r} could not be stopped completely; not starting it again"
                    )
            owner = Caller(thread_id=r.thread_id)
            return await self._start_locked(
                owner, name, r.command, list(r.args), r.cwd, dict(r.env), r.restarts + 1
            )

    def list_processes(self, caller: Caller) -> list[ProcessInfo]:
        # No file is read here: /status and list_processes answer from memory at once,
        # however much output is waiting (the watchers read it).
        entries = [
            e
            for (thread, _), e in self._entries.items()
            if caller.sees_all or thread == caller.thread_id
        ]
        return [
            _info(e) for e in sorted(entries, key=lambda e: (e.record.thread_id, e.record.name))
        ]

    def get_output(
        self, caller: Caller, name: str, tail: int = 2000, since_seq: int | None = None
    ) -> OutputResult:
        if tail < 0:
            raise ProcessError("tail must be zero or more characters")
        entry = self._find(caller, name)
        self._pump(entry)
        stdout, cut_out = entry.out.ring.read(tail, since_seq)
        stderr, cut_err = entry.err.ring.read(tail, since_seq)
        r = entry.record
        return OutputResult(
            name=r.name,
            status=r.status,
            pid=r.pid,
            exit_code=r.exit_code,
            stdout=stdout,
            stderr=stderr,
            last_seq=entry.seq.value,
            truncated=cut_out or cut_err,
        )

    # ---- for the runtime (/status, disposal) -----------------------------------------

    def bind_thread(self, thread_id: str, workdir: str | None, home: str | None = None) -> None:
        """The thread's workdir: the default (and base of a relative) ``cwd``, and what its
        processes see when sandboxed, with its agent's private ``home`` (None: the user's
        hidden home entries, as the agent sees them)."""
        if workdir is None:
            self._thread_workdirs.pop(thread_id, None)
            self._thread_homes.pop(thread_id, None)
            return
        self._thread_workdirs[thread_id] = workdir
        if home is None:
            self._thread_homes.pop(thread_id, None)
        else:
            self._thread_homes[thread_id] = home

    def processes_for_thread(self, thread_id: str) -> list[ProcessInfo]:
        return self.list_processes(Caller(thread_id=thread_id))

    async def stop_thread_processes(self, thread_id: str) -> list[StopResult]:
        """Stop every live process of a thread (at once); for disposal of the thread. Starts
        for the thread are refused meanwhile: a process that catches SIGTERM and calls
        ``start_process`` in its grace period must not leave a survivor."""
        results: list[StopResult] = []
        caller = Caller(thread_id=thread_id)

        async def stop_one(name: str) -> None:
            results.append(await self.stop(caller, name))

        self._disposing.add(thread_id)
        try:
            for _ in range(5):  # bounded: a stop that fails leaves its record for /status
                live = [
                    e.record.name
                    for (thread, _), e in self._entries.items()
                    if thread == thread_id and e.record.status.live
                ]
                if not live:
                    break
                async with trio.open_nursery() as nursery:
                    for name in live:
                        nursery.start_soon(stop_one, name)
        finally:
            self._disposing.discard(thread_id)
        return sorted(results, key=lambda r: r.process.name)

    async def shutdown(self) -> None:
        """Stop every live process (unless ``keep_on_shutdown``) and save the list."""
        if self.closed:
            return
        self.closed = True
        if not self.config.keep_on_shutdown:
            async with trio.open_nursery() as nursery:
                for e in list(self._entries.values()):
                    if e.record.status.live:
                        nursery.start_soon(self._stop_at_shutdown, e)
        for e in self._entries.values():
            self._pump(e)
        self._save()

    def statistics(self) -> SupervisorStatistics:
        return SupervisorStatistics(
            live=sum(1 for e in self._entries.values() if e.record.status.live),
            records=len(self._entries),
            spawned=self._spawned,
            adopted=self._adopted,
            lost=self._lost,
            escalations=self._escalations,
            state_writes=self._store.writes,
        )

    # ---- starting --------------------------------------------------------------------

    async def _start_locked(
        self,
        caller: Caller,
        name: str,
        command: str,
        args: list[str],
        cwd: str | None,
        env: Mapping[str, str] | None,
        restarts: int,
    ) -> ProcessInfo:
        thread = caller.thread_id
        if thread in self._disposing:
            raise ProcessError("this thread is being closed: its processes are being stopped")
        live = sum(1 for (t, _), e in self._entries.items() if t == thread and e.record.status.live)
        if live >= self.config.max_processes_per_thread:
            raise ProcessError(
                f"this thread already runs {live} processes (the limit is "
                f"{self.config.max_processes_per_thread}); stop one first"
            )
        check_no_nul(command, args, cwd)
        workdir = resolve_cwd(
            cwd,
            base=caller.workdir or self._thread_workdirs.get(caller.thread_id),
            roots=self._roots,
            workdir=self._thread_workdirs.get(caller.thread_id),
            sandboxed=self.config.sandbox is not None,
        )
        extra_env = check_env(env or {})
        full_env = {**inherited_env(), **extra_env}
        if self.config.sandbox is not None:
            executable = await resolve_in_sandbox(
                self.config,
                command,
                workdir=self._thread_workdirs.get(thread),
                home=self._thread_homes.get(thread),
                cwd=workdir,
                env=full_env,
            )
        else:
            executable = resolve_command(command, workdir, full_env.get("PATH", os.defpath))
        out_base, err_base = output_bases(self.config.data_dir, thread, name)
        record = ProcessRecord(
            thread_id=thread,
            name=name,
            command=command,
            args=args,
            cwd=workdir,
            env=extra_env,
            restarts=restarts,
            stdout_path=out_base,
            stderr_path=err_base,
        )
        previous = self._entries.get((thread, name))
        if previous is not None:
            # Numbering goes on across incarnations: an old since_seq must not hide new output.
            record.last_seq = record.seq_ceiling = previous.seq.value
        entry = self._new_entry(record)
        self._entries[(thread, name)] = entry
        if previous is not None:
            delete_output(s.base for s in previous.streams)
        self._forget_old_records(thread)
        await self._spawn(entry, executable, full_env)
        return _info(entry)

    @staticmethod
    async def _reap_writer(entry: _Entry, writer: trio.Process) -> None:
        await writer.wait()
        entry.writer_done.set()

    async def _spawn(self, entry: _Entry, executable: str, env: Mapping[str, str]) -> None:
        r = entry.record
        r.status = ProcessStatus.starting
        r.started_at = time.time()
        self._save()
        bind_fds: dict[str, int] = {}  # the workdir's descriptor, bound in the sandbox
        try:
            try:
                argv, pass_fds = launch_argv(
                    self.config,
                    [executable, *r.args],
                    workdir=self._thread_workdirs.get(r.thread_id),
                    home=self._thread_homes.get(r.thread_id),
                    cwd=r.cwd,
                    bind_fds=bind_fds,
                )
            except ProcessError as exc:
                raise self._spawn_failed(entry, str(exc)) from None
            try:
                writer, (out_fd, err_fd) = await start_output_writer(
                    (r.stdout_path, r.stderr_path), self.config.max_log_bytes // 2
                )
            except OSError as exc:
                raise self._spawn_failed(
                    entry, f"could not start its output writer: {exc}"
                ) from exc
            entry.writer = writer
            self._nursery.start_soon(self._reap_writer, entry, writer)
            try:
                proc = await trio.lowlevel.open_process(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=out_fd,
                    stderr=err_fd,
                    cwd=r.cwd,
                    env=dict(env),
                    start_new_session=True,
                    pass_fds=(*pass_fds, *bind_fds.values()),
                )
            except OSError as exc:
                # Its writer sees the pipes close and ends by itself.
                raise self._spawn_failed(
                    entry, f"could not start {r.command!r}: {exc.strerror or exc}"
                ) from exc
            finally:
                os.close(out_fd)
                os.close(err_fd)
        finally:
            for fd in bind_fds.values():
                os.close(fd)
        entry.proc = proc
        if pass_fds:
            note_child(proc.pid, f"process {r.name!r}")  # stopped at start-up if it survives
        r.pid = proc.pid
        r.create_time = create_time(proc.pid)
        entry.tree = ProcessTree(r.pid, r.create_time)
        r.status = ProcessStatus.running
        self._spawned += 1
        self._save()
        self._nursery.start_soon(self._watch, entry)

    def _spawn_failed(self, entry: _Entry, error: str) -> ProcessError:
        r = entry.record
        r.status = ProcessStatus.failed
        r.stopped_at = time.time()
        r.error = error
        self._save()
        return ProcessError(error)

    def _new_entry(self, record: ProcessRecord) -> _Entry:
        chars, lines = self.config.ring_buffer_chars, self.config.ring_buffer_lines
        r = record
        limits = {
            "max_read_bytes": self.config.max_read_bytes,
            "max_line_bytes": self.config.max_line_bytes,
        }
        return _Entry(
            record=r,
            seq=SequenceCounter(max(r.last_seq, r.seq_ceiling)),
            out=StreamTail(
                r.stdout_path,
                r.stdout_offset,
                OutputRing(chars, lines),
                r.stdout_marks,
                generation=r.stdout_generation,
                **limits,
            ),
            err=StreamTail(
                r.stderr_path,
                r.stderr_offset,
                OutputRing(chars, lines),
                r.stderr_marks,
                generation=r.stderr_generation,
                **limits,
            ),
        )

    def _forget_old_records(self, thread_id: str) -> None:
        finished = sorted(
            (
                e
                for (t, _), e in self._entries.items()
                if t == thread_id and not e.record.status.live
            ),
            key=lambda e: e.record.stopped_at or 0.0,
        )
        excess = len(finished) - self.config.max_records_per_thread
        for e in finished[: max(0, excess)]:
            del self._entries[(thread_id, e.record.name)]
            delete_output(s.base for s in e.streams)

    # ---- watching --------------------------------------------------------------------

    def _pump(self, entry: _Entry) -> None:
        """Move newly written output from the files into the rings (no await: atomic)."""
        r = entry.record
        if entry.seq.value + 2 > r.seq_ceiling:
            # Numbers are reserved in blocks, and the block saved before one of it is
            # handed out: after a crash numbering resumes above anything a caller has seen.
            r.seq_ceiling = entry.seq.value + _SEQ_BLOCK
            self._save()
        for stream in entry.streams:
            if stream.read_new(entry.seq):
                entry.dirty = True

    def _flush(self, entry: _Entry) -> None:
        self._pump(entry)
        for stream in entry.streams:
            stream.flush(entry.seq)

    async def _watch(self, entry: _Entry) -> None:
        """Tail the output and notice the exit, for the process's whole life."""
        r = entry.record
        last_sample = 0.0
        while True:
            self._pump(entry)
            now = trio.current_time()
            if now - last_sample >= _TREE_SAMPLE_S:
                last_sample = now
                entry.tree.sample()
                if entry.proc is None and not same_process(r.pid, r.create_time):
                    break
            if entry.proc is not None and entry.proc.poll() is not None:
                break
            await trio.sleep(self.config.poll_interval_s)
        if entry.writer is not None:
            # What the process wrote last may still be in the pipe: let its writer finish
            # (it ends once every holder of the pipe is gone; a daemon may keep it longer).
            with trio.move_on_after(_WRITER_DRAIN_S):
                await entry.writer_done.wait()
        self._flush(entry)
        if entry.proc is not None:
            forget_child(entry.proc.pid)
        r.exit_code = entry.proc.returncode if entry.proc is not None else None
        r.stopped_at = time.time()
        if entry.stop_requested or r.exit_code == 0:
            r.status = ProcessStatus.stopped
        elif entry.proc is None:
            r.status = ProcessStatus.stopped
            r.error = "exited; its exit code is unknown (adopted after a restart of Spindle)"
        else:
            r.status = ProcessStatus.failed
        self._save()
        entry.done.set()

    async def _save_loop(self) -> None:
        # Output offsets change constantly; writing them once a second is plenty (after a
        # crash the newest second of output may be served again, never lost).
        while True:
            await trio.sleep(1.0)
            if any(e.dirty for e in self._entries.values()):
                self._save()

    def _save(self) -> None:
        if self._restoring:
            return  # a half-loaded list must never replace the file
        records = []
        for e in self._entries.values():
            r = e.record
            r.stdout_offset, r.stdout_marks = e.out.delivered, list(e.out.marks)
            r.stderr_offset, r.stderr_marks = e.err.delivered, list(e.err.marks)
            r.stdout_generation, r.stderr_generation = e.out.generation, e.err.generation
            r.last_seq = e.seq.value
            e.dirty = False
            records.append(r)
        self._store.save(records)

    # ---- stopping --------------------------------------------------------------------

    async def _terminate(self, entry: _Entry, force: bool) -> tuple[bool, bool]:
        gone, escalated = await entry.tree.terminate(force=force, grace=self.config.stop_grace_s)
        self._escalations += escalated
        return gone, escalated

    async def _stop_locked(self, entry: _Entry, force: bool) -> StopResult:
        r = entry.record
        if not r.status.live:
            # Exited already, but members of its group may linger: sweep them too.
            gone, escalated = await self._terminate(entry, force)
            return StopResult(process=_info(entry), tree_gone=gone, escalated=escalated)
        entry.stop_requested = True
        r.status = ProcessStatus.stopping
        self._save()
        gone, escalated = await self._terminate(entry, force)
        with trio.move_on_after(2.0):
            await entry.done.wait()
        if not entry.done.is_set():  # the watcher should have seen the exit by now
            r.status = ProcessStatus.stopped if gone else ProcessStatus.failed
            r.stopped_at = time.time()
        if not gone:
            r.status = ProcessStatus.failed
            r.error = f"processes still alive after SIGKILL: {entry.tree.alive_pids()}"
        self._save()
        return StopResult(process=_info(entry), tree_gone=gone, escalated=escalated)

    async def _stop_at_shutdown(self, entry: _Entry) -> None:
        async with self._lock((entry.record.thread_id, entry.record.name)):
            await self._stop_locked(entry, False)

    # ---- restoring after a restart ---------------------------------------------------

    def _restore(self) -> None:
        now = time.time()
        self._restoring = True
        for record in self._store.load():
            entry = self._new_entry(record)
            key = (record.thread_id, record.name)
            self._entries[key] = entry
            self._load_previous_output(entry)
            if not record.status.live:
                self._flush(entry)
                entry.done.set()
                continue
            if same_process(record.pid, record.create_time):
                entry.adopted = True
                entry.tree = ProcessTree(record.pid, record.create_time)
                record.status = ProcessStatus.running
                self._adopted += 1
                self._nursery.start_soon(self._watch, entry)
            else:
                record.status = ProcessStatus.lost
                record.stopped_at = now
                record.error = (
                    "gone when Spindle restarted (no process with its pid and start time)"
                )
                self._lost += 1
                entry.done.set()
        self._restoring = False
        if self._entries:
            self._save()

    def _load_previous_output(self, entry: _Entry) -> None:
        """The output read before the restart back in the rings, then anything written
        since (an orphan kept writing to its files while no Spindle was running)."""
        budget = self.config.ring_buffer_chars * 4  # bytes: UTF-8 is at most 4 per char
        for stream in entry.streams:
            stream.restore(budget, max(entry.record.last_seq, 1))
        self._pump(entry)

    # ---- small pieces ----------------------------------------------------------------

    def _lock(self, key: tuple[str, str]) -> trio.Lock:
        lock = self._locks.get(key)
        if lock is None:
            lock = self._locks[key] = trio.Lock()
        return lock

    def _find(self, caller: Caller, name: str) -> _Entry:
        entry = self._entries.get((caller.thread_id, name))
        if entry is None and caller.sees_all:
            matches = [e for (_, n), e in self._entries.items() if n == name]
            if len(matches) == 1:
                entry = matches[0]
            elif len(matches) > 1:
                threads = ", ".join(sorted(e.record.thread_id for e in matches))
                raise ProcessError(
                    f"{name!r} exists in several threads ({threads}); "
                    "name one with the X-Spindle-Thread header"
                )
        if entry is None:
            mine = sorted(n for (t, n) in self._entries if caller.sees_all or t == caller.thread_id)
            known = ", ".join(mine) if mine else "none"
            raise ProcessError(f"no process named {name!r} (known: {known})")
        return entry

    def _check_open(self) -> None:
        if self.closed:
            raise ProcessError("the process manager is shutting down")
