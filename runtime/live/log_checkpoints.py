"""The event log's WAL checkpoints, made from a worker thread instead of the trio thread.

SQLite checkpoints the WAL itself inside the commit that crosses ``SQLITE_AUTOCHECKPOINT``
pages: a copy of ~1,000 pages and an fsync on the trio thread, blocking every task. While
the flusher runs, ``WalCheckpoints`` (a mixin of ``EventLog``, which holds its state) turns
that off and checkpoints PASSIVE from a worker thread on a second connection every
``CHECKPOINT_EVERY_ROWS`` rows written; a WAL that grows past ``WAL_RESTART_FRAMES`` all
the same gets one RESTART checkpoint in the writer. When the flusher ends, SQLite's own
checkpoints are back.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from pathlib import Path

import trio

logger = logging.getLogger("spindle.log")

__all__ = ["CHECKPOINT_EVERY_ROWS", "SQLITE_AUTOCHECKPOINT", "WAL_RESTART_FRAMES", "WalCheckpoints"]


SQLITE_AUTOCHECKPOINT = 1000  # SQLite's default: pages in the WAL before a commit checkpoints
# Background checkpoints (``EventLog._run_checkpoints``): one per this many rows written
# (a row is a few hundred bytes: a few hundred pages), and the WAL's size (in frames, pages)
# past which the writer restarts it itself.
CHECKPOINT_EVERY_ROWS = 2000
WAL_RESTART_FRAMES = 50_000


class WalCheckpoints:
    """Background WAL checkpoints for ``EventLog``: its ``_write`` calls
    ``_restart_wal_if_due``, its ``_done`` ``_count_rows_written``, its flusher runs
    ``_run_checkpoints`` beside it."""

    # What the checkpoints use of the log (``EventLog`` sets them).
    path: Path
    _conn: sqlite3.Connection | None

    def _init_checkpoints(self, checkpoint_in_thread: bool) -> None:
        # While the flusher runs, WAL checkpoints are made from a worker thread on a second
        # connection instead of inside the commit that crosses SQLite's threshold
        # (``_run_checkpoints``).
        self.checkpoint_in_thread = checkpoint_in_thread
        self.checkpoint_every_rows = CHECKPOINT_EVERY_ROWS
        self.wal_restart_frames = WAL_RESTART_FRAMES
        self._checkpoint_conn: sqlite3.Connection | None = None
        self._checkpoint_due: trio.Event | None = None
        self._rows_since_checkpoint = 0
        self._restart_wal = False  # the WAL outgrew ``wal_restart_frames``: the next flush
        self._checkpointing = False  # a checkpoint runs in the worker thread
        self.checkpoints = 0  # made from the worker thread
        self.checkpoint_seconds = 0.0
        self.wal_restarts = 0

    def _count_rows_written(self, rows: int) -> None:
        if self._checkpoint_due is not None:
            self._rows_since_checkpoint += rows
            if self._rows_since_checkpoint >= self.checkpoint_every_rows:
                self._checkpoint_due.set()

    def _restart_wal_if_due(self, conn: sqlite3.Connection) -> None:
        """After a commit, in the writer."""
        if self._restart_wal and not self._checkpointing:
            # Rare: background checkpoints never caught up with the writes, so the WAL
            # never started over; this one, in the writer, lets the next write restart it.
            self._restart_wal = False
            self.wal_restarts += 1
            conn.execute("PRAGMA wal_checkpoint(RESTART)")

    def _open_checkpoint_conn(self) -> bool:
        """A second connection for checkpoints, and SQLite's own (inside a commit, on the
        trio thread: copying ~1,000 pages and an fsync) turned off meanwhile. False (SQLite
        keeps checkpointing itself) for a log in memory or a connection that cannot open."""
        if self._conn is None or str(self.path) == ":memory:":
            return False
        try:
            self._checkpoint_conn = sqlite3.connect(
                self.path, isolation_level=None, check_same_thread=False, timeout=0.5
            )
            self._conn.execute("PRAGMA wal_autocheckpoint=0")
        except sqlite3.Error as exc:
            logger.warning("checkpoints stay in the writer: %s", exc)
            self._close_checkpoint_conn()
            return False
        self._checkpoint_due = trio.Event()
        return True

    def _close_checkpoint_conn(self) -> None:
        conn, self._checkpoint_conn = self._checkpoint_conn, None
        self._checkpoint_due = None
        if conn is not None:
            conn.close()
        if self._conn is not None:
            try:
                self._conn.execute(f"PRAGMA wal_autocheckpoint={SQLITE_AUTOCHECKPOINT}")
            except sqlite3.Error:
                pass

    async def _run_checkpoints(self) -> None:
        """Checkpoint the WAL from a worker thread every ``checkpoint_every_rows`` rows
        written (PASSIVE: it never blocks the writer, which goes on meanwhile). A WAL that
        grows past ``wal_restart_frames`` all the same (checkpoints that never catch up)
        gets one RESTART checkpoint in the writer (``_write``). Until cancelled; the
        connection is closed and SQLite's own checkpoints are back after it."""
        try:
            while True:
                due = self._checkpoint_due
                assert due is not None
                await due.wait()
                self._checkpoint_due = trio.Event()
                self._rows_since_checkpoint = 0
                started = time.perf_counter()
                self._checkpointing = True
                try:
                    _, frames, _ = await trio.to_thread.run_sync(
                        self._checkpoint, abandon_on_cancel=False
                    )
                except sqlite3.Error as exc:  # a full disk, say: the next one tries again
                    logger.warning("WAL checkpoint failed: %s", exc)
                    continue
                finally:
                    self._checkpointing = False
                self.checkpoints += 1
                self.checkpoint_seconds += time.perf_counter() - started
                if frames >= self.wal_restart_frames:
                    self._restart_wal = True
        finally:
            self._close_checkpoint_conn()

    def _checkpoint(self) -> tuple[int, int, int]:
        conn = self._checkpoint_conn
        assert conn is not None
        row = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        return int(row[0]), int(row[1]), int(row[2])
