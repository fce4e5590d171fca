"""The durable event log: every committed action of every thread, append-only, in SQLite.

The log is the source of truth; the store is a cache of its fold. Invariants it keeps:

- Per thread, ``seq`` counts 1, 2, 3 ... in commit order with no gap: the log order is the
  commit order (the serialized-mutation invariant, written down).
- ``append`` never touches the disk: it assigns the seq and buffers the row, returning a
  ticket. ``flush`` writes every buffered row (and any due snapshot) in one transaction, so
  commits are batched per scheduler tick. Whoever must not act before an action is durable
  (the reactor, before a user-visible effect; ingress, before acknowledging a prompt) awaits
  ``wait_durable(ticket)``.
- A snapshot (the thread's state after ``seq``) is written every ``snapshot_every`` actions
  of a thread, in the same transaction as the action it follows, so start-up folds only the
  tail after the newest snapshot.
- Opening never creates, truncates or rewrites anything that is not ours: a file that is
  not a Spindle log, a corrupt file or a log held by another process gives ``LogError``
  naming the file. Opening ends with one small write, so a disk that is full or read-only
  is found then (``LogUnwritable``), not by the first prompt.
- Every row read back is checked (``runtime.live.log_read``): a row that cannot be read, or a
  gap in a thread's seqs, is ``LogCorrupt`` naming the file, the thread and the seq.
- A write the disk refuses (full, read-only, I/O error: ``runtime.live.log_unwritable``
  tells those from other errors) loses nothing: the batch stays buffered, ``unwritable``
  says why, listeners are told, and the flusher retries every ``retry_interval_s`` until a
  write succeeds (then listeners are told again). Whatever waits for durability waits
  meanwhile, so nothing is shown or acknowledged that the log could forget. What is still
  buffered when the log is closed is reported by ``close`` (``LogUnwritable.unsaved``).

SQLite calls are short and run synchronously on the trio thread (WAL with
``synchronous=NORMAL``: a commit survives a crash of this process, SIGKILL included; pass
``synchronous="FULL"`` to survive power loss too). While the flusher runs, WAL checkpoints
are made from a worker thread instead (``runtime.live.log_checkpoints``). ``python -m bench``
style measurements are in docs/architecture.md, section "The live runtime".
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sqlite3
import time
from collections import deque
from collections.abc import Callable, Collection, Iterator
from pathlib import Path
from typing import Any

import trio

from threadspindle.runtime.core.actions import Action
from threadspindle.runtime.core.frozen import Frozen
from threadspindle.runtime.core.model import ThreadState
from threadspindle.runtime.core.storable import storable
from threadspindle.runtime.live.log_checkpoints import WalCheckpoints
from threadspindle.runtime.live.log_read import (
    ACTION_ADAPTER,
    SCHEMA_VERSION,
    LogCorrupt,
    LogError,
    LoggedAction,
    LogLocked,
    LogReader,
    check_schema,
)
from threadspindle.runtime.live.log_unwritable import (
    LogUnwritable,
    held_by_another,
    storage_error,
)

__all__ = [
    "ACTION_ADAPTER",
    "EventLog",
    "LogCorrupt",
    "LogError",
    "LogLocked",
    "LogStatistics",
    "LogUnwritable",
    "LoggedAction",
    "action_json",
    "default_log_path",
]


_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS snapshots (
    thread_id TEXT PRIMARY KEY,
    seq INTEGER NOT NULL,
    state TEXT NOT NULL
);
"""
# The actions in commit order (a rowid table: a flush appends its rows at the table's end)
# and a small index by thread. Logs made before kept the table clustered by (thread_id, seq),
# which reads the same but writes a flush's rows into as many pages as threads in it:
# ~5x the time per row at 1,000 streaming threads (docs/performance.md, "Latency under
# load"). Both layouts answer the same queries; an existing table is left as it is.
_ACTIONS_SCHEMA = """
BEGIN;
CREATE TABLE actions (
    thread_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    at REAL NOT NULL,
    kind TEXT NOT NULL,
    action TEXT NOT NULL
);
CREATE UNIQUE INDEX actions_by_thread ON actions(thread_id, seq);
COMMIT;
"""


def default_log_path() -> Path:
    """``<user data dir>/spindle/events.sqlite3`` (platformdirs)."""
    import platformdirs

    return Path(platformdirs.user_data_dir("spindle")) / "events.sqlite3"


def action_json(action: Action) -> str:
    """The action's row. Ingress and the agents' parsers replace lone surrogates with
    U+FFFD (``runtime.core.storable``); one that got past them anyway is replaced here, in
    the row only, rather than fail the write: a row must read back (as JSON, a lone
    surrogate escape does not)."""
    try:
        return action.model_dump_json()
    except ValueError:
        return storable(action).model_dump_json()


class EventLog(WalCheckpoints):
    """One SQLite file holding the action log and snapshots of every thread."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        snapshot_every: int = 1000,
        synchronous: str = "NORMAL",
        batch_window_s: float = 0.0,
        flush_in_thread: bool = False,
        retry_interval_s: float = 1.0,
        checkpoint_in_thread: bool = True,
    ) -> None:
        self.path = Path(path)
        self.snapshot_every = snapshot_every
        self.batch_window_s = batch_window_s
        self.flush_in_thread = flush_in_thread  # write batches from a worker thread
        self._init_checkpoints(checkpoint_in_thread)
        self.retry_interval_s = retry_interval_s  # while the disk refuses writes
        # Why the last write failed while the disk refuses writes; None when they succeed.
        self.unwritable: LogUnwritable | None = None
        self.write_failures = 0
        self._listeners: list[Callable[[LogUnwritable | None], object]] = []
        self._reader: LogReader | None = None
        self._synchronous = synchronous
        self._conn: sqlite3.Connection | None = None
        self._lock_fd: int | None = None
        self._next_seq: dict[str, int] = {}
        # Rows waiting for the next flush: (thread_id, seq, at, kind, json)
        self._pending: list[tuple[str, int, float, str, str]] = []
        self._pending_snapshots: dict[str, tuple[int, str]] = {}
        self._appended = 0  # tickets handed out
        self._durable = 0  # tickets written
        self._flushed = trio.Event() if _in_trio() else None
        self._wakeup = trio.Event() if _in_trio() else None
        self._wakeup_set = False  # ``_wakeup`` set since the flusher last woke (cheap check)
        # (ticket, callback) in registration order: called once the ticket is durable.
        self._on_durable: deque[tuple[int, Callable[[], object]]] = deque()
        self.flushes = 0
        self.flush_seconds = 0.0  # time spent in flush(), for measurements
        self.rows_written = 0

    # --- opening ---------------------------------------------------------------------------

    def open(self) -> EventLog:
        """Open (creating a new file if none exists). Raises ``LogError`` naming the file:
        ``LogUnwritable`` when the disk refuses to write, ``LogCorrupt`` for a bad row."""
        lock_path = str(self.path) + ".lock"
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            # Whatever the reason (no room, no permission, a file in the way, a place such
            # as /proc where nothing can be made), it is where the log cannot be written.
            raise LogUnwritable(
                self.path, f"its folder cannot be made ({exc.strerror or exc})"
            ) from None
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            unwritable = storage_error(exc, self.path)
            if unwritable is not None:
                raise unwritable from None
            raise LogError(f"cannot open event log {self.path}: {exc}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise LogLocked(
                f"event log {self.path} is in use by another Spindle process "
                f"(lock file {lock_path}); stop it first"
            ) from None
        self._lock_fd = fd
        try:
            self._conn = self._connect()
        except BaseException:
            self.close()
            raise
        return self

    def _connect(self) -> sqlite3.Connection:
        existed = self.path.exists() and self.path.stat().st_size > 0
        try:
            conn = sqlite3.connect(
                self.path, isolation_level=None, check_same_thread=False, timeout=0.5
            )
        except sqlite3.Error as exc:
            raise LogError(f"cannot open event log {self.path}: {exc}") from exc
        try:
            if existed:
                check_schema(conn, self.path)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(f"PRAGMA synchronous={self._synchronous}")
            # Needs the write lock: a log held by another writer fails here, after `timeout`.
            conn.executescript(_SCHEMA)
            if (
                conn.execute(
                    "SELECT 1 FROM sqlite_master WHERE type='table' AND name='actions'"
                ).fetchone()
                is None
            ):
                conn.executescript(_ACTIONS_SCHEMA)
            conn.execute(
                "INSERT OR IGNORE INTO meta(key, value) VALUES ('schema_version', ?)",
                (str(SCHEMA_VERSION),),
            )
            # One small write now: a full or read-only disk is found at start-up.
            conn.execute(
                "INSERT OR REPLACE INTO meta(key, value) VALUES ('last_opened_at', ?)",
                (repr(time.time()),),
            )
            reader = LogReader(conn, self.path)
            for thread_id, seq in reader.last_seqs().items():
                self._next_seq[thread_id] = seq + 1
        except LogError:
            conn.close()
            raise
        except sqlite3.OperationalError as exc:
            conn.close()
            # Held by another process at start (a transaction of its own, a backup): no
            # storage failure to wait out as a running log does, but a refusal to start.
            if held_by_another(exc):
                raise LogLocked(
                    f"event log {self.path} is locked by another process ({exc}); "
                    "stop it, or end its transaction, first"
                ) from None
            unwritable = storage_error(exc, self.path)
            if unwritable is not None:
                raise unwritable from None
            raise LogError(f"event log {self.path} cannot be used: {exc}") from exc
        except sqlite3.DatabaseError as exc:
            conn.close()
            unwritable = storage_error(exc, self.path)
            if unwritable is not None:
                raise unwritable from None
            raise LogError(f"event log {self.path} is corrupt or not a database: {exc}") from exc
        self._reader = reader
        return conn

    def close(self) -> None:
        """Flush and close. When the disk still refuses the last flush, the connection and
        the lock are released all the same and ``LogUnwritable`` says how many actions were
        not saved."""
        unsaved: LogUnwritable | None = None
        self._close_checkpoint_conn()  # first: closing the last connection checkpoints
        if self._conn is not None:
            try:
                self.flush()
            except LogUnwritable as exc:
                unsaved = LogUnwritable(self.path, exc.reason, unsaved=len(self._pending))
            finally:
                self._conn.close()
                self._conn = None
                self._reader = None
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing releases the flock
            self._lock_fd = None
        if unsaved is not None:
            raise unsaved

    def __enter__(self) -> EventLog:
        return self.open() if self._conn is None else self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def conn(self) -> sqlite3.Connection:
        if self._conn is None:
            raise LogError(f"event log {self.path} is not open")
        return self._conn

    @property
    def reader(self) -> LogReader:
        if self._reader is None:
            raise LogError(f"event log {self.path} is not open")
        return self._reader

    # --- writing ---------------------------------------------------------------------------

    def append(self, action: Action, state_after: ThreadState | None = None) -> int:
        """Buffer ``action`` as the thread's next entry; returns the durability ticket.
        ``state_after`` is stored as a snapshot when one is due."""
        thread_id = action.thread_id
        # Serialized before its seq is taken: an action that cannot be must not leave a gap
        # in the thread's log (a gap refuses the next start).
        row = action_json(action)
        seq = self._next_seq.get(thread_id, 1)
        self._next_seq[thread_id] = seq + 1
        self._pending.append((thread_id, seq, action.at, action.kind, row))
        if state_after is not None and seq % self.snapshot_every == 0:
            with contextlib.suppress(ValueError):  # a snapshot is an optimisation: skipped
                self._pending_snapshots[thread_id] = (seq, state_after.model_dump_json())
        self._appended += 1
        if self._wakeup is not None and not self._wakeup_set:
            self._wakeup_set = True
            self._wakeup.set()
        return self._appended

    def flush(self) -> int:
        """Write everything buffered in one transaction; returns the rows written."""
        batch = self._take()
        if batch is None:
            return 0
        self._write(*batch)
        self._done(*batch)
        return len(batch[0])

    def _take(
        self,
    ) -> tuple[list[tuple[str, int, float, str, str]], dict[str, tuple[int, str]], int] | None:
        if not self._pending and not self._pending_snapshots:
            return None
        batch = (self._pending, self._pending_snapshots, self._appended)
        self._pending, self._pending_snapshots = [], {}
        return batch

    def _write(
        self,
        rows: list[tuple[str, int, float, str, str]],
        snaps: dict[str, tuple[int, str]],
        ticket: int,
    ) -> None:
        conn = self.conn
        started = time.perf_counter()
        try:
            conn.execute("BEGIN")
            conn.executemany(
                "INSERT INTO actions(thread_id, seq, at, kind, action) VALUES (?,?,?,?,?)", rows
            )
            conn.executemany(
                "INSERT OR REPLACE INTO snapshots(thread_id, seq, state) VALUES (?,?,?)",
                [(t, s, j) for t, (s, j) in snaps.items()],
            )
            conn.execute("COMMIT")
            self._restart_wal_if_due(conn)
        except BaseException as exc:
            # SQLite may have rolled back already (it does on SQLITE_FULL): a second
            # ROLLBACK would fail and hide the error that matters.
            if conn.in_transaction:
                try:
                    conn.execute("ROLLBACK")
                except sqlite3.Error:
                    pass
            # Keep the rows for the next attempt: their seqs are already handed out.
            self._pending[:0] = rows
            for t, snap in snaps.items():
                self._pending_snapshots.setdefault(t, snap)
            unwritable = storage_error(exc, self.path)
            if unwritable is not None:
                raise unwritable from None
            raise
        self.flush_seconds += time.perf_counter() - started

    def _done(
        self,
        rows: list[tuple[str, int, float, str, str]],
        snaps: dict[str, tuple[int, str]],
        ticket: int,
    ) -> None:
        self._durable = ticket
        self.flushes += 1
        self.rows_written += len(rows)
        self._count_rows_written(len(rows))
        self._wake_waiters()
        self._run_durable_callbacks()

    def flush_now(self) -> None:
        """Flush at once, in the caller, for an action that must not wait for the flusher's
        turn (an ``/abort``'s interrupt behind thousands of streaming threads). Left to the
        flusher instead while it writes from a worker thread or the disk refuses writes
        (a failure here keeps the rows buffered for it, as its own would)."""
        if self.flush_in_thread or self.unwritable is not None or self._conn is None:
            return
        try:
            self.flush()
        except (LogUnwritable, sqlite3.Error):
            if self._wakeup is not None:
                self._wakeup_set = True
                self._wakeup.set()  # the flusher retries and reports it

    def when_durable(self, ticket: int, callback: Callable[[], object]) -> None:
        """Call ``callback()`` (synchronously, from the flush) once ``ticket`` is durable;
        at once when it already is. Callbacks registered with growing tickets run in
        registration order. Unlike ``wait_durable`` this wakes no task per waiter: the
        reactor hands a batch of effects to its lane only once it may be applied, so a
        lane wakes once per batch, not once for the batch and again for the flush."""
        if ticket <= self._durable:
            callback()
        else:
            self._on_durable.append((ticket, callback))

    def _run_durable_callbacks(self) -> None:
        queue, durable = self._on_durable, self._durable
        while queue and queue[0][0] <= durable:
            queue.popleft()[1]()

    def _wake_waiters(self) -> None:
        if self._flushed is not None:
            done, self._flushed = self._flushed, trio.Event()
            done.set()

    def is_durable(self, ticket: int) -> bool:
        return ticket <= self._durable

    async def wait_durable(self, ticket: int) -> None:
        """Return once the action with this ticket is on disk (however long the disk
        refuses writes: the reactor must not show what the log could forget)."""
        while self._durable < ticket:
            assert self._flushed is not None, "create the EventLog inside trio to await it"
            await self._flushed.wait()

    async def wait_durable_or_unwritable(self, ticket: int) -> bool:
        """True once the action is on disk; False as soon as the disk refuses writes before
        that (the action stays buffered and is written when the disk takes writes again):
        for ingress, which must not hang on a full disk."""
        while self._durable < ticket:
            if self.unwritable is not None:
                return False
            assert self._flushed is not None, "create the EventLog inside trio to await it"
            await self._flushed.wait()
        return True

    # --- a disk that refuses writes --------------------------------------------------------

    def on_writability(
        self, listener: Callable[[LogUnwritable | None], object]
    ) -> Callable[[], None]:
        """Call ``listener(error)`` when the disk starts refusing writes and
        ``listener(None)`` when a write succeeds again. Returns the unsubscribe call."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener) if listener in self._listeners else None

    def _set_unwritable(self, error: LogUnwritable | None) -> None:
        was = self.unwritable
        self.unwritable = error
        if (was is None) == (error is None):
            return
        self._wake_waiters()
        for listener in list(self._listeners):
            listener(error)

    async def run_flusher(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Flush whenever something is buffered: one transaction per scheduler tick (or per
        ``batch_window_s``). While the disk refuses writes, retry every
        ``retry_interval_s``. Runs until cancelled; a final flush is tried on the way out
        (what it cannot write stays buffered, for ``close`` to report)."""
        if self._wakeup is None:
            self._wakeup, self._flushed = trio.Event(), trio.Event()
        async with trio.open_nursery() as nursery:
            if self.checkpoint_in_thread and self._open_checkpoint_conn():
                nursery.start_soon(self._run_checkpoints)
            task_status.started()
            try:
                await self._flush_forever()
            finally:
                nursery.cancel_scope.cancel()

    async def _flush_forever(self) -> None:
        assert self._wakeup is not None
        try:
            while True:
                if self.unwritable is None:
                    await self._wakeup.wait()
                    if self.batch_window_s > 0:
                        await trio.sleep(self.batch_window_s)
                    # (No extra checkpoint otherwise: woken by the first append of a
                    # scheduler batch, the flusher runs in the next one, after every actor
                    # of that batch appended; one more batch would only add latency.)
                else:
                    await trio.sleep(self.retry_interval_s)
                self._wakeup = trio.Event()
                self._wakeup_set = False
                try:
                    await self._flush_batch()
                except LogUnwritable as exc:
                    self.write_failures += 1
                    self._set_unwritable(exc)
                else:
                    self._set_unwritable(None)
        finally:
            with trio.CancelScope(shield=True):
                if self._conn is not None:
                    try:
                        self.flush()
                    except LogUnwritable:
                        pass  # kept buffered: ``close`` reports it

    async def _flush_batch(self) -> None:
        if not self.flush_in_thread:
            self.flush()
            return
        batch = self._take()
        if batch is not None:
            # The worker thread owns the connection only while this waits.
            await trio.to_thread.run_sync(self._write, *batch, abandon_on_cancel=False)
            self._done(*batch)

    def remove_thread(self, thread_id: str) -> int:
        """Delete the thread's rows and snapshot, and forget what is buffered of it, in one
        transaction (``spindle log archive``, once its file is written and checked; a
        restore that failed half-way). Returns the rows deleted. Not for a thread whose
        actor runs: its next action would start a new log at seq 1."""
        self._pending = [row for row in self._pending if row[0] != thread_id]
        self._pending_snapshots.pop(thread_id, None)
        conn = self.conn
        try:
            conn.execute("BEGIN")
            deleted = conn.execute("DELETE FROM actions WHERE thread_id=?", (thread_id,)).rowcount
            conn.execute("DELETE FROM snapshots WHERE thread_id=?", (thread_id,))
            conn.execute("COMMIT")
        except BaseException as exc:
            if conn.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
            unwritable = storage_error(exc, self.path)
            if unwritable is not None:
                raise unwritable from None
            raise
        self._next_seq.pop(thread_id, None)
        return int(deleted)

    def vacuum(self) -> None:
        """Give the pages deleted rows left back to the disk (SQLite's ``VACUUM``: it
        rewrites the file, and needs as much free space again while it does)."""
        self.flush()
        try:
            self.conn.execute("VACUUM")
        except sqlite3.Error as exc:
            unwritable = storage_error(exc, self.path)
            if unwritable is not None:
                raise unwritable from None
            raise

    # --- reading ---------------------------------------------------------------------------

    def thread_ids(self) -> list[str]:
        """Every thread with an action in the log (known since ``open``: no table scan)."""
        return list(self._next_seq)

    def last_seq(self, thread_id: str) -> int:
        return self._next_seq.get(thread_id, 1) - 1

    def latest_snapshot(self, thread_id: str) -> tuple[int, ThreadState] | None:
        return self.snapshots().get(thread_id)

    def snapshots(self) -> dict[str, tuple[int, ThreadState]]:
        """Every thread's newest snapshot, checked (``LogCorrupt`` otherwise)."""
        return self.reader.snapshots(self.last_seq)

    def read(self, thread_id: str, after_seq: int = 0) -> Iterator[LoggedAction]:
        """The thread's actions with ``seq > after_seq``, in order (durable ones only), each
        checked: ``LogCorrupt`` for a row that cannot be read or a missing seq."""
        return self.reader.actions(thread_id, after_seq)

    def read_raw(self, thread_id: str) -> Iterator[tuple[int, float, dict[str, Any]]]:
        return self.reader.export_rows(thread_id)

    def posted_outputs(self, thread_id: str) -> dict[str, tuple[str, ...]]:
        """key -> platform message ids of every output the thread's log says was posted
        (from ``OutputPosted``): a renderer made after a restart starts from this, so it can
        still edit or dismiss what the previous process posted."""
        return self.reader.posted_outputs(thread_id)

    def check_posted_outputs(self) -> None:
        """Start-up's check of every thread's ``output_posted`` rows (``LogCorrupt``)."""
        self.reader.check_posted_outputs()

    def action_ids(self, thread_id: str, kinds: Collection[str]) -> list[str]:
        """The ids of the thread's durable actions of these kinds, in commit order (ingress
        derives from them what it last saw of a chat, e.g. the newest Discord message)."""
        if not kinds:
            return []
        marks = ",".join("?" * len(kinds))
        cur = self.conn.execute(
            f"SELECT json_extract(action, '$.action_id') FROM actions "
            f"WHERE thread_id=? AND kind IN ({marks}) ORDER BY seq",
            (thread_id, *kinds),
        )
        return [row[0] for row in cur if row[0] is not None]

    def last_action_at(self) -> float | None:
        """The newest ``at`` among the last durable action of each thread (None: an empty
        log): about when the process that wrote the log last did anything."""
        newest: float | None = None
        for thread_id in self.thread_ids():
            row = self.conn.execute(
                "SELECT at FROM actions WHERE thread_id=? ORDER BY seq DESC LIMIT 1",
                (thread_id,),
            ).fetchone()
            if row is not None and (newest is None or row[0] > newest):
                newest = float(row[0])
        return newest

    def statistics(self) -> LogStatistics:
        return LogStatistics(
            appended=self._appended,
            durable=self._durable,
            pending=len(self._pending),
            flushes=self.flushes,
            rows_written=self.rows_written,
            flush_us=int(self.flush_seconds * 1e6),
            write_failures=self.write_failures,
        )


class LogStatistics(Frozen):
    """A snapshot of the log's counters (``EventLog.statistics()``)."""

    appended: int  # actions appended (tickets handed out) since it opened
    durable: int  # the highest ticket written and committed
    pending: int  # appended actions not yet written
    flushes: int  # write transactions committed
    rows_written: int
    flush_us: int  # time spent in those transactions, in microseconds
    write_failures: int  # flushes the disk refused (full, read-only, failing)


def _in_trio() -> bool:
    try:
        trio.lowlevel.current_task()
    except RuntimeError:
        return False
    return True
