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
  naming the file.

SQLite calls are short and run synchronously on the trio thread (WAL with
``synchronous=NORMAL``: a commit survives a crash of this process, SIGKILL included; pass
``synchronous="FULL"`` to survive power loss too). ``python -m bench`` style measurements
are in docs/architecture.md, section "The live runtime".
"""

from __future__ import annotations

import fcntl
import json
import os
import sqlite3
import time
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trio
from pydantic import TypeAdapter

from runtime.actions import Action
from runtime.model import ThreadState

__all__ = [
    "ACTION_ADAPTER",
    "EventLog",
    "LogError",
    "LoggedAction",
    "default_log_path",
]

SCHEMA_VERSION = 1
ACTION_ADAPTER: TypeAdapter[Action] = TypeAdapter(Action)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS actions (
    thread_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    at REAL NOT NULL,
    kind TEXT NOT NULL,
    action TEXT NOT NULL,
    PRIMARY KEY (thread_id, seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS snapshots (
    thread_id TEXT PRIMARY KEY,
    seq INTEGER NOT NULL,
    state TEXT NOT NULL
);
"""


class LogError(RuntimeError):
    """The log cannot be used (corrupt, locked by another process, not a Spindle log)."""


def default_log_path() -> Path:
    """``<user data dir>/spindle/events.sqlite3`` (platformdirs)."""
    import platformdirs

    return Path(platformdirs.user_data_dir("spindle")) / "events.sqlite3"


@dataclass(frozen=True, slots=True)
class LoggedAction:
    thread_id: str
    seq: int
    at: float
    action: Action


class EventLog:
    """One SQLite file holding the action log and snapshots of every thread."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        snapshot_every: int = 1000,
        synchronous: str = "NORMAL",
        batch_window_s: float = 0.0,
        flush_in_thread: bool = False,
    ) -> None:
        self.path = Path(path)
        self.snapshot_every = snapshot_every
        self.batch_window_s = batch_window_s
        self.flush_in_thread = flush_in_thread  # write batches from a worker thread
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
        self.flushes = 0
        self.flush_seconds = 0.0  # time spent in flush(), for measurements
        self.rows_written = 0

    # --- opening ---------------------------------------------------------------------------

    def open(self) -> EventLog:
        """Open (creating a new file if none exists). Raises ``LogError`` naming the file."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        lock_path = str(self.path) + ".lock"
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise LogError(
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
                tables = {
                    r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")
                }
                if not {"meta", "actions", "snapshots"} <= tables:
                    raise LogError(
                        f"{self.path} is an SQLite file but not a Spindle event log "
                        f"(tables: {sorted(tables)}); refusing to touch it"
                    )
                version = conn.execute(
                    "SELECT value FROM meta WHERE key='schema_version'"
                ).fetchone()
                if version is None or int(version[0]) > SCHEMA_VERSION:
                    raise LogError(
                        f"event log {self.path} has schema version "
                        f"{version[0] if version else 'none'}; this Spindle reads "
                        f"up to {SCHEMA_VERSION}"
                    )
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(f"PRAGMA synchronous={self._synchronous}")
            # Needs the write lock: a log held by another writer fails here, after `timeout`.
            conn.executescript(_SCHEMA)
            conn.execute(
                "INSERT OR IGNORE INTO meta(key, value) VALUES ('schema_version', ?)",
                (str(SCHEMA_VERSION),),
            )
            for thread_id, seq in conn.execute(
                "SELECT thread_id, MAX(seq) FROM actions GROUP BY thread_id"
            ):
                self._next_seq[thread_id] = int(seq) + 1
        except LogError:
            conn.close()
            raise
        except sqlite3.OperationalError as exc:
            conn.close()
            if "locked" in str(exc) or "busy" in str(exc):
                raise LogError(
                    f"event log {self.path} is locked by another process: {exc}"
                ) from exc
            raise LogError(f"event log {self.path} cannot be used: {exc}") from exc
        except sqlite3.DatabaseError as exc:
            conn.close()
            raise LogError(f"event log {self.path} is corrupt or not a database: {exc}") from exc
        return conn

    def close(self) -> None:
        if self._conn is not None:
            try:
                self.flush()
            finally:
                self._conn.close()
                self._conn = None
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing releases the flock
            self._lock_fd = None

    def __enter__(self) -> EventLog:
        return self.open() if self._conn is None else self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def conn(self) -> sqlite3.Connection:
        if self._conn is None:
            raise LogError(f"event log {self.path} is not open")
        return self._conn

    # --- writing ---------------------------------------------------------------------------

    def append(self, action: Action, state_after: ThreadState | None = None) -> int:
        """Buffer ``action`` as the thread's next entry; returns the durability ticket.
        ``state_after`` is stored as a snapshot when one is due."""
        thread_id = action.thread_id
        seq = self._next_seq.get(thread_id, 1)
        self._next_seq[thread_id] = seq + 1
        self._pending.append((thread_id, seq, action.at, action.kind, action.model_dump_json()))
        if state_after is not None and seq % self.snapshot_every == 0:
            self._pending_snapshots[thread_id] = (seq, state_after.model_dump_json())
        self._appended += 1
        if self._wakeup is not None:
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
        conn.execute("BEGIN")
        try:
            conn.executemany(
                "INSERT INTO actions(thread_id, seq, at, kind, action) VALUES (?,?,?,?,?)", rows
            )
            conn.executemany(
                "INSERT OR REPLACE INTO snapshots(thread_id, seq, state) VALUES (?,?,?)",
                [(t, s, j) for t, (s, j) in snaps.items()],
            )
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            # Keep the rows for the next attempt: their seqs are already handed out.
            self._pending[:0] = rows
            for t, snap in snaps.items():
                self._pending_snapshots.setdefault(t, snap)
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
        if self._flushed is not None:
            done, self._flushed = self._flushed, trio.Event()
            done.set()

    def is_durable(self, ticket: int) -> bool:
        return ticket <= self._durable

    async def wait_durable(self, ticket: int) -> None:
        """Return once the action with this ticket is on disk."""
        while self._durable < ticket:
            assert self._flushed is not None, "create the EventLog inside trio to await it"
            await self._flushed.wait()

    async def run_flusher(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Flush whenever something is buffered: one transaction per scheduler tick (or per
        ``batch_window_s``). Runs until cancelled; a final flush happens on the way out."""
        if self._wakeup is None:
            self._wakeup, self._flushed = trio.Event(), trio.Event()
        task_status.started()
        try:
            while True:
                await self._wakeup.wait()
                self._wakeup = trio.Event()
                if self.batch_window_s > 0:
                    await trio.sleep(self.batch_window_s)
                else:
                    await trio.lowlevel.checkpoint()  # let every ready actor append first
                if self.flush_in_thread:
                    batch = self._take()
                    if batch is not None:
                        # The worker thread owns the connection only while this waits.
                        await trio.to_thread.run_sync(self._write, *batch, abandon_on_cancel=False)
                        self._done(*batch)
                else:
                    self.flush()
        finally:
            with trio.CancelScope(shield=True):
                if self._conn is not None:
                    self.flush()

    # --- reading ---------------------------------------------------------------------------

    def thread_ids(self) -> list[str]:
        """Every thread with an action in the log (known since ``open``: no table scan)."""
        return list(self._next_seq)

    def last_seq(self, thread_id: str) -> int:
        return self._next_seq.get(thread_id, 1) - 1

    def latest_snapshot(self, thread_id: str) -> tuple[int, ThreadState] | None:
        row = self.conn.execute(
            "SELECT seq, state FROM snapshots WHERE thread_id=?", (thread_id,)
        ).fetchone()
        if row is None:
            return None
        return int(row[0]), ThreadState.model_validate_json(row[1])

    def snapshots(self) -> dict[str, tuple[int, ThreadState]]:
        return {
            t: (int(s), ThreadState.model_validate_json(j))
            for t, s, j in self.conn.execute("SELECT thread_id, seq, state FROM snapshots")
        }

    def read(self, thread_id: str, after_seq: int = 0) -> Iterator[LoggedAction]:
        """The thread's actions with ``seq > after_seq``, in order (durable ones only)."""
        cur = self.conn.execute(
            "SELECT seq, at, action FROM actions WHERE thread_id=? AND seq>? ORDER BY seq",
            (thread_id, after_seq),
        )
        for seq, at, raw in cur:
            yield LoggedAction(thread_id, int(seq), float(at), ACTION_ADAPTER.validate_json(raw))

    def read_raw(self, thread_id: str) -> Iterator[tuple[int, float, dict[str, Any]]]:
        cur = self.conn.execute(
            "SELECT seq, at, action FROM actions WHERE thread_id=? ORDER BY seq", (thread_id,)
        )
        for seq, at, raw in cur:
            yield int(seq), float(at), json.loads(raw)

    def posted_outputs(self, thread_id: str) -> dict[str, tuple[str, ...]]:
        """key -> platform message ids of every output the thread's log says was posted
        (from ``OutputPosted``): a renderer made after a restart starts from this, so it can
        still edit or dismiss what the previous process posted."""
        posted: dict[str, tuple[str, ...]] = {}
        cur = self.conn.execute(
            "SELECT action FROM actions WHERE thread_id=? AND kind='output_posted' ORDER BY seq",
            (thread_id,),
        )
        for (raw,) in cur:
            data = json.loads(raw)
            # Each OutputPosted names the messages that apply newly posted for the key (a
            # long output grows into several): the key's ids are all of them, in order.
            key = data["key"]
            new = [m for m in data.get("message_ids", ()) if m not in posted.get(key, ())]
            posted[key] = posted.get(key, ()) + tuple(new)
        return posted

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

    def statistics(self) -> dict[str, int]:
        return {
            "appended": self._appended,
            "durable": self._durable,
            "pending": len(self._pending),
            "flushes": self.flushes,
            "rows_written": self.rows_written,
            "flush_us": int(self.flush_seconds * 1e6),
        }


def _in_trio() -> bool:
    try:
        trio.lowlevel.current_task()
    except RuntimeError:
        return False
    return True
