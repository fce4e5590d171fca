"""Reading and checking the event log: every row Spindle reads is decoded and checked here.

One job: turn rows of the ``actions`` and ``snapshots`` tables into typed values, or into a
``LogCorrupt`` naming the file, the thread and the seq. Start-up (``EventLog``), ``spindle
status``, ``spindle log export`` and ``spindle doctor`` all read through ``LogReader``, so a
bad row gets the same message everywhere, never a traceback.

What a readable log is:

- Every ``actions`` row's JSON validates as an ``Action`` whose ``kind`` and ``thread_id`` are
  the row's own columns (a row edited by hand, or an action kind this Spindle does not know,
  is refused: folding past it would rebuild a state the log never had).
- A thread's seqs count 1, 2, 3 ... with no gap. A gap is refused wherever rows are read in
  order: start-up and ``spindle status`` fold a thread from its newest snapshot, so they check
  the tail after it (a gap there would make the rebuilt state skip actions: answered prompts
  coming back as queued); ``spindle log export`` and ``doctor`` read every row from seq 1. A
  gap *below* a snapshot does not change the state start-up rebuilds, so the runtime still
  starts on it, but the thread's export and replay are incomplete and ``doctor`` fails it.
- A row's text columns are valid UTF-8: they are read as bytes and decoded here
  (``_as_bytes``), since SQLite's own decoding fails the whole query with an error that
  names neither the thread nor the seq.
- The tables have the columns Spindle reads (``check_schema``): a renamed or dropped one is
  a ``LogError`` when the file is opened, not an SQLite error in the middle of a read.
- A snapshot's state validates, belongs to its thread, and its seq is not past the thread's
  last row (rows deleted from the end up to and past a snapshot are detected that way;
  rows deleted from the very end of a thread with no snapshot after them cannot be told
  from a thread that simply stopped there).
- ``output_posted`` rows are read from a thread's whole history (they tell a new renderer
  what was already posted): start-up checks all of them in one SQL pass
  (``check_posted_outputs``), so a bad one stops start-up instead of a thread later.

``open_read_only`` opens the file for the readers that must not write (status, export,
doctor): it works while a Spindle runs, on a full disk and on a read-only file system.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter, ValidationError

from threadspindle.runtime.core.actions import Action
from threadspindle.runtime.core.model import ThreadState

__all__ = [
    "ACTION_ADAPTER",
    "SCHEMA_VERSION",
    "check_schema",
    "LogCorrupt",
    "LogError",
    "LogLocked",
    "LogReader",
    "LoggedAction",
    "open_read_only",
]

SCHEMA_VERSION = 1
ACTION_ADAPTER: TypeAdapter[Action] = TypeAdapter(Action)

MAX_PROBLEMS = 20  # problems a full check lists (it counts all of them)

# The columns every reader here selects, per table (``check_schema`` requires them).
COLUMNS = {
    "actions": ("thread_id", "seq", "at", "kind", "action"),
    "snapshots": ("thread_id", "seq", "state"),
}


def _as_bytes(column: str) -> str:
    """SQL for ``column`` with text returned as its bytes (other types as they are): Python's
    sqlite3 decodes text while fetching, and text that is not UTF-8 fails the fetch with no
    way to tell which row it was; decoded here (``_utf8``), the row is named."""
    return f"CASE typeof({column}) WHEN 'text' THEN CAST({column} AS BLOB) ELSE {column} END"


_ROW = ", ".join(_as_bytes(c) for c in ("seq", "at", "kind", "action"))  # one actions row
_SNAPSHOTS = (
    f"SELECT thread_id, {_as_bytes('seq')}, {_as_bytes('state')} FROM snapshots ORDER BY thread_id"
)


class LogError(RuntimeError):
    """The log cannot be used (corrupt, locked by another process, not a Spindle log)."""


class LogLocked(LogError):
    """Another process holds the log (another Spindle, or a transaction of its own): nothing
    is wrong with the file; it can be used once that process lets go."""


class LogCorrupt(LogError):
    """One row (or a missing run of rows) of the log cannot be read. Names file, thread, seq."""

    def __init__(self, path: Path | str, thread_id: str, seq: int | str, reason: str) -> None:
        self.path = Path(path)
        self.thread_id = thread_id
        self.seq = seq
        self.reason = reason
        super().__init__(f"event log {path}: thread {thread_id!r}, seq {seq}: {reason}")


@dataclass(frozen=True, slots=True)
class LoggedAction:
    thread_id: str
    seq: int
    at: float
    action: Action


def check_schema(conn: sqlite3.Connection, path: Path | str) -> None:
    """``LogError`` unless the file has Spindle's tables and a schema version this Spindle
    reads (SQLite's own errors, such as "not a database", pass through)."""
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if not {"meta", "actions", "snapshots"} <= tables:
        raise LogError(
            f"{path} is an SQLite file but not a Spindle event log "
            f"(tables: {sorted(tables)}); refusing to touch it"
        )
    row = conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
    try:
        number: int | None = int(str(row[0])) if row is not None else None
    except ValueError:
        number = None
    if number is None or not 1 <= number <= SCHEMA_VERSION:
        known = "1" if SCHEMA_VERSION == 1 else f"1 to {SCHEMA_VERSION}"
        raise LogError(
            f"event log {path} has schema version {row[0] if row else 'none'!r}; this "
            f"Spindle reads schema version {known}"
        )
    _check_columns(conn, path)


def _check_columns(conn: sqlite3.Connection, path: Path | str) -> None:
    """``LogError`` when a table lacks a column the readers select (renamed or dropped by
    hand): found at opening, every command says so in one line, instead of ``spindle run``
    failing with SQLite's "no such column" in the middle of start-up."""
    for table, wanted in COLUMNS.items():
        have = {str(r[1]) for r in conn.execute(f"PRAGMA table_info({table})")}
        missing = [c for c in wanted if c not in have]
        if missing:
            raise LogError(
                f"event log {path}: its {table} table has no column "
                f"{', '.join(repr(c) for c in missing)} (columns: {sorted(have)}); "
                "not a Spindle log this Spindle reads"
            )


def _validation_reason(exc: ValidationError, what: str = "the action") -> str:
    """The first thing wrong with a row's JSON, in one short line (the first part of an
    action's error location is its kind, left out)."""
    errors = exc.errors(include_url=False)
    first = errors[0]
    kind = first["type"]
    if kind == "json_invalid":
        return f"not valid JSON ({first['ctx']['error']})"
    if kind == "union_tag_invalid":
        return f"unknown action kind {first['ctx']['tag']!r}"
    if kind == "union_tag_not_found":
        return "the action has no kind"
    loc = first["loc"][1:] if what == "the action" else first["loc"]
    where = ".".join(str(part) for part in loc) or what
    more = f" (and {len(errors) - 1} more problem(s))" if len(errors) > 1 else ""
    return f"{where}: {first['msg']}{more}"


def _as_int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class LogReader:
    """Checked, typed reads over one connection to an event log (read-write or read-only)."""

    def __init__(self, conn: sqlite3.Connection, path: Path | str) -> None:
        self.conn = conn
        self.path = Path(path)

    # --- one row ---------------------------------------------------------------------------

    def decode(self, thread_id: str, seq: int, kind: object, raw: object, at: object) -> Action:
        """The action of one ``actions`` row, or ``LogCorrupt``. Text columns may come as
        bytes (``_as_bytes``): they must be UTF-8."""
        kind = self._utf8(thread_id, seq, kind, "kind")
        raw = self._utf8(thread_id, seq, raw, "action")
        at = self._utf8(thread_id, seq, at, "time")
        if not isinstance(raw, str):
            raise LogCorrupt(self.path, thread_id, seq, "the action is not text")
        try:
            action = ACTION_ADAPTER.validate_json(raw)
        except ValidationError as exc:
            raise LogCorrupt(self.path, thread_id, seq, _validation_reason(exc)) from None
        if action.kind != kind:
            raise LogCorrupt(
                self.path,
                thread_id,
                seq,
                f"the row's kind column says {kind!r} but its action is {action.kind!r}",
            )
        if action.thread_id != thread_id:
            raise LogCorrupt(
                self.path, thread_id, seq, f"the action belongs to thread {action.thread_id!r}"
            )
        if not isinstance(at, int | float) or isinstance(at, bool):
            raise LogCorrupt(self.path, thread_id, seq, f"its time is {at!r}, not a number")
        return action

    def _utf8(self, thread_id: str, seq: int, value: object, column: str) -> object:
        """``value`` with bytes decoded as UTF-8 (``LogCorrupt`` naming the row if they are
        not); a value of another type is returned as it is, for the caller to judge."""
        if not isinstance(value, bytes):
            return value
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise LogCorrupt(
                self.path,
                thread_id,
                seq,
                f"its {column} is not valid UTF-8 text (byte {exc.start}: "
                f"{value[exc.start : exc.start + 1]!r})",
            ) from None

    def _seq(self, thread_id: str, value: object) -> int:
        seq = _as_int(value)
        if seq is None or seq < 1:
            if isinstance(value, bytes):  # text read as bytes: shown as the text it was
                value = value.decode("utf-8", "backslashreplace")
            raise LogCorrupt(self.path, thread_id, repr(value), "the seq is not a positive integer")
        return seq

    def _gap(self, thread_id: str, expected: int, found: int) -> LogCorrupt:
        missing = f"seq {expected}" if found == expected + 1 else f"seqs {expected}-{found - 1}"
        return LogCorrupt(
            self.path,
            thread_id,
            expected,
            f"missing: the thread's log jumps from seq {expected - 1} to seq {found} "
            f"({missing} deleted?)",
        )

    # --- threads and snapshots -------------------------------------------------------------

    def last_seqs(self) -> dict[str, int]:
        """Every thread with an action, and its last seq."""
        last: dict[str, int] = {}
        for thread_id, seq in self.conn.execute(
            "SELECT thread_id, MAX(seq) FROM actions GROUP BY thread_id ORDER BY thread_id"
        ):
            last[str(thread_id)] = self._seq(str(thread_id), seq)
        return last

    def thread_ids(self) -> list[str]:
        return list(self.last_seqs())

    def snapshots(
        self, last_seq: Callable[[str], int] | None = None
    ) -> dict[str, tuple[int, ThreadState]]:
        """thread id -> (seq, state) of its snapshot, each checked (``last_seq`` gives the
        thread's last seq, to refuse a snapshot past it)."""
        if last_seq is None:
            lasts = self.last_seqs()

            def last_seq(thread_id: str) -> int:
                return lasts.get(thread_id, 0)

        found: dict[str, tuple[int, ThreadState]] = {}
        for thread_id, seq_value, raw in self.conn.execute(_SNAPSHOTS):
            found[str(thread_id)] = self._snapshot(str(thread_id), seq_value, raw, last_seq)
        return found

    def _snapshot(
        self, thread_id: str, seq_value: object, raw: object, last_seq: Callable[[str], int]
    ) -> tuple[int, ThreadState]:
        seq = self._seq(thread_id, seq_value)
        raw = self._utf8(thread_id, seq, raw, "snapshot")
        if not isinstance(raw, str):
            raise LogCorrupt(self.path, thread_id, seq, "its snapshot is not text")
        try:
            state = ThreadState.model_validate_json(raw)
        except ValidationError as exc:
            reason = _validation_reason(exc, "the state")
            raise LogCorrupt(self.path, thread_id, seq, f"its snapshot: {reason}") from None
        if state.thread_id != thread_id:
            raise LogCorrupt(
                self.path,
                thread_id,
                seq,
                f"its snapshot is the state of thread {state.thread_id!r}",
            )
        last = last_seq(thread_id)
        if seq > last:
            raise LogCorrupt(
                self.path,
                thread_id,
                seq,
                f"the thread's snapshot is at seq {seq} but its log ends at seq {last} "
                "(rows deleted?)",
            )
        return seq, state

    # --- a thread's rows -------------------------------------------------------------------

    def actions(self, thread_id: str, after_seq: int = 0) -> Iterator[LoggedAction]:
        """The thread's actions with ``seq > after_seq``, in order, each checked, the first
        being ``after_seq + 1`` and none missing."""
        expected = after_seq + 1
        for seq_value, at, kind, raw in self.conn.execute(
            f"SELECT {_ROW} FROM actions WHERE thread_id=? AND seq>? ORDER BY seq",
            (thread_id, after_seq),
        ):
            seq = self._seq(thread_id, seq_value)
            if seq != expected:
                raise self._gap(thread_id, expected, seq)
            action = self.decode(thread_id, seq, kind, raw, at)
            yield LoggedAction(thread_id, seq, float(at), action)
            expected += 1

    read = actions  # the name ``EventLog`` and ``runtime.live.store.rebuild_from_log`` use

    def export_rows(self, thread_id: str) -> Iterator[tuple[int, float, dict[str, Any]]]:
        """Every row of the thread from seq 1 as (seq, at, the stored action's JSON object),
        each checked as ``actions`` does: what ``spindle log export`` writes."""
        expected = 1
        for seq_value, at, kind, raw in self.conn.execute(
            f"SELECT {_ROW} FROM actions WHERE thread_id=? ORDER BY seq",
            (thread_id,),
        ):
            seq = self._seq(thread_id, seq_value)
            if seq != expected:
                raise self._gap(thread_id, expected, seq)
            self.decode(thread_id, seq, kind, raw, at)  # checks that raw is UTF-8 JSON
            yield seq, float(at), json.loads(raw)
            expected += 1

    def posted_outputs(self, thread_id: str) -> dict[str, tuple[str, ...]]:
        """key -> platform message ids of every output the thread's log says was posted
        (from ``OutputPosted``)."""
        posted: dict[str, tuple[str, ...]] = {}
        for seq, raw in self.conn.execute(
            f"SELECT seq, {_as_bytes('action')} FROM actions "
            "WHERE thread_id=? AND kind='output_posted' ORDER BY seq",
            (thread_id,),
        ):
            try:
                data = json.loads(raw)  # bytes that are not UTF-8 raise a ValueError
                key = data["key"]
                ids = data.get("message_ids", ())
                if not isinstance(key, str) or not all(isinstance(m, str) for m in ids):
                    raise TypeError
            except (ValueError, KeyError, TypeError, AttributeError):
                raise LogCorrupt(
                    self.path, thread_id, seq, "an output_posted row that cannot be read"
                ) from None
            # Each OutputPosted names the messages that apply newly posted for the key (a
            # long output grows into several): the key's ids are all of them, in order.
            new = [m for m in ids if m not in posted.get(key, ())]
            posted[key] = posted.get(key, ()) + tuple(new)
        return posted

    def check_posted_outputs(self) -> None:
        """Every thread's ``output_posted`` rows have the shape ``posted_outputs`` reads, in
        one pass in SQLite (no row is parsed in Python): ``LogCorrupt`` for the first one
        that has not."""
        row = self.conn.execute(
            """
            SELECT thread_id, seq FROM actions
            WHERE kind = 'output_posted' AND NOT CASE WHEN json_valid(action) THEN
                json_type(action, '$.key') = 'text'
                AND json_extract(action, '$.kind') = 'output_posted'
                AND json_extract(action, '$.thread_id') IS thread_id
                AND coalesce(json_type(action, '$.message_ids'), 'array') = 'array'
            ELSE 0 END
            ORDER BY thread_id, seq LIMIT 1
            """
        ).fetchone()
        if row is not None:
            raise LogCorrupt(self.path, row[0], row[1], "an output_posted row that cannot be read")

    # --- the whole log ---------------------------------------------------------------------

    def problems(self, limit: int = MAX_PROBLEMS) -> tuple[list[LogCorrupt], int]:
        """Check every row of every thread and every snapshot (``spindle doctor``): the
        first ``limit`` problems found, and how many there are in all."""
        found: list[LogCorrupt] = []
        count = 0

        def note(problem: LogCorrupt) -> None:
            nonlocal count
            count += 1
            if len(found) < limit:
                found.append(problem)

        lasts: dict[str, int] = {}
        thread: str | None = None
        expected = 1
        for thread_value, seq_value, at, kind, raw in self.conn.execute(
            f"SELECT thread_id, {_ROW} FROM actions ORDER BY thread_id, seq"
        ):
            thread_id = str(thread_value)
            if thread_id != thread:
                thread, expected = thread_id, 1
            try:
                seq = self._seq(thread_id, seq_value)
            except LogCorrupt as problem:
                note(problem)
                continue
            if seq != expected:
                note(self._gap(thread_id, expected, seq))
            expected = seq + 1
            lasts[thread_id] = seq
            try:
                self.decode(thread_id, seq, kind, raw, at)
            except LogCorrupt as problem:
                note(problem)
        for thread_id, seq_value, raw in self.conn.execute(_SNAPSHOTS):
            try:
                self._snapshot(str(thread_id), seq_value, raw, lambda t: lasts.get(t, 0))
            except LogCorrupt as problem:
                note(problem)
        return found, count


def open_read_only(path: Path | str, *, check: bool = True) -> sqlite3.Connection:
    """Open the log for reading only: no lock taken, nothing written, usable beside a running
    Spindle. When SQLite cannot open its shared-memory file (a read-only file system, a full
    disk) and no write-ahead log is waiting, the file is read as immutable instead: then
    everything is in the database file itself. With ``check``, the file must be a Spindle
    log of a schema this Spindle reads (``check_schema``). Raises ``FileNotFoundError`` when
    there is no file and ``LogError`` naming it when it cannot be read."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(str(path))
    uri = path.resolve().as_uri()
    try:
        conn = sqlite3.connect(f"{uri}?mode=ro", uri=True, timeout=2)
        try:
            conn.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()
        except sqlite3.Error:
            conn.close()
            raise
        return _checked(conn, path, check)
    except sqlite3.OperationalError as exc:
        wal = Path(f"{path}-wal")
        if wal.exists() and wal.stat().st_size > 0:
            raise LogError(f"cannot read event log {path}: {exc}") from None
    except sqlite3.DatabaseError as exc:
        raise LogError(f"event log {path} is corrupt or not a database: {exc}") from None
    try:
        conn = sqlite3.connect(f"{uri}?mode=ro&immutable=1", uri=True, timeout=2)
        conn.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()
    except sqlite3.Error as exc:
        raise LogError(f"cannot read event log {path}: {exc}") from None
    return _checked(conn, path, check)


def _checked(conn: sqlite3.Connection, path: Path, check: bool) -> sqlite3.Connection:
    if check:
        try:
            check_schema(conn, path)
        except sqlite3.DatabaseError as exc:
            conn.close()
            raise LogError(f"event log {path} is corrupt or not a database: {exc}") from None
        except BaseException:
            conn.close()
            raise
    return conn
