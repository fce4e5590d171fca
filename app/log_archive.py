"""``spindle log archive`` and ``spindle log restore``: idle threads moved out of the
database into replayable files, and back.

The log keeps every action of every thread for ever, and a streaming thread writes a row
per delta it commits, ~320 bytes each with the index (a 16-character delta): an hour of
one thread streaming 15 deltas a second is ~17 MB. Whole threads are
moved, never parts of one: a thread's rows stay gap-free from seq 1 (what start-up, replay
and ``doctor`` check), and a restored thread is the one archived, byte for byte.

Archiving (the bot stopped: it takes the database's lock, as ``spindle run`` does):

1. The threads: those named, or every thread idle for ``--idle-days`` (no action since).
   A thread qualifies only when nothing is going on in it: no run, no queued prompt, no
   open question, no pending ``/schedule``, no worktree (its files would be forgotten) and
   no workspace job.
2. Each is exported (the ``log export`` format, docs/log-format.md) to a file of its own
   in the archive folder (``<data dir>/archive`` by default), private (0600), never over an
   existing file.
3. The file is read back and folded: the state it gives must equal the thread's state in
   the database, action for action. Only then are the thread's rows and snapshot deleted,
   in one transaction.

SQLite reuses the freed pages for new rows; ``--vacuum`` gives them back to the disk too.
``[runtime] archive_idle_days`` has ``spindle run`` do the same at each start
(``archive_at_start``), under its own lock, before any actor starts.

An archived thread is unknown to Spindle, as a chat thread that never had a conversation:
messages there are not answered until one is started there again, and what was posted
meanwhile is not caught up (restore it first to go on with it). ``spindle replay FILE``
reads an archive as any export; ``spindle log restore FILE`` puts the thread back (refused
while the database has a thread of that id), folding it again so its snapshots are made.
"""

from __future__ import annotations

import argparse
import os
import re
import sqlite3
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from threadspindle.app.config import Settings
from threadspindle.app.exit_codes import (
    EXIT_DATABASE,
    EXIT_FAILURE,
    EXIT_OK,
    EXIT_STORAGE,
    EXIT_USAGE,
)
from threadspindle.app.output_files import write_failure_code, write_private
from threadspindle.runtime.core.actions import Action
from threadspindle.runtime.core.model import ThreadState
from threadspindle.runtime.core.transitions import transition
from threadspindle.runtime.live import replay
from threadspindle.runtime.live.log import EventLog, LogError, LogUnwritable
from threadspindle.runtime.live.store import rebuild_from_log

__all__ = [
    "Candidate",
    "Moved",
    "archive_at_start",
    "busy_reason",
    "cmd_log_archive",
    "cmd_log_restore",
    "idle_threads",
    "move",
]

DAY_S = 86_400.0
RESTORE_FLUSH_ROWS = 5_000  # rows written per transaction while restoring (bounded memory)


def busy_reason(state: ThreadState) -> str | None:
    """Why the thread cannot be archived now; None when nothing is going on in it."""
    if state.run is not None:
        return "a run is active"
    if state.queue:
        return f"{len(state.queue)} prompt(s) are queued"
    if state.blockers:
        return "a question or permission prompt is open"
    if state.schedules:
        return f"{len(state.schedules)} scheduled prompt(s) are pending"
    if state.workspace.worktree is not None:
        path = state.workspace.worktree.path
        return f"it works in the worktree {path} (/worktree merge or remove it first)"
    if state.workspace.job is not None or state.workspace.shell is not None:
        return "a workspace job is running"
    return None


@dataclass(frozen=True)
class Candidate:
    """A thread chosen for the archive, with its state as the database gives it."""

    thread_id: str
    state: ThreadState
    last_at: float


def _file_name(thread_id: str) -> str:
    """A file name for the thread: its id with anything but letters, digits and ``.:_-``
    made ``_`` (a web or Slack id may hold others), never starting with a dot."""
    safe = re.sub(r"[^A-Za-z0-9.:_-]", "_", thread_id)[:120].lstrip(".") or "thread"
    return safe


def _free_path(folder: Path, thread_id: str) -> Path:
    base = _file_name(thread_id)
    path = folder / f"{base}.jsonl"
    n = 2
    while os.path.lexists(path):
        path = folder / f"{base}.{n}.jsonl"
        n += 1
    return path


def _last_at(log: EventLog, thread_id: str) -> float:
    row = log.conn.execute(
        "SELECT at FROM actions WHERE thread_id=? ORDER BY seq DESC LIMIT 1", (thread_id,)
    ).fetchone()
    return float(row[0]) if row is not None else 0.0


def _fold_file(path: Path) -> tuple[str | None, ThreadState | None, int]:
    """The thread an export file holds, the state its actions fold to and their number
    (None, None, 0 for a file without an action). ``ValueError`` for a file that is not
    one thread's actions from seq 1 on (``read_jsonl`` checks the one thread); ``OSError``
    when it cannot be read."""
    thread_id: str | None = None
    state: ThreadState | None = None
    count = 0
    with path.open(encoding="utf-8") as lines:
        for seq, action in replay.read_jsonl(lines, str(path)):
            count += 1
            if seq != count:
                raise ValueError(f"{path}: seq {seq} where {count} was due: not a whole thread")
            if state is None:
                thread_id, state = action.thread_id, ThreadState.new(action.thread_id)
            state = transition(state, action).state
    return thread_id, state, count


def cmd_log_archive(args: argparse.Namespace, settings: Settings) -> int:
    if not args.threads and args.idle_days is None:
        print(
            "Name the threads to archive, or --idle-days N for every thread idle that long.",
            file=sys.stderr,
        )
        return EXIT_USAGE
    if args.idle_days is not None and args.idle_days < 0:
        print("--idle-days must be 0 or more.", file=sys.stderr)
        return EXIT_USAGE
    db = settings.database_path
    if not db.exists():
        print(f"No database at {db}.", file=sys.stderr)
        return EXIT_DATABASE
    folder: Path = args.to or settings.data_path / "archive"
    try:
        with EventLog(db) as log:
            return _archive(log, args, folder)
    except LogError as exc:  # locked (the bot runs), corrupt, a disk that refuses writes
        print(str(exc), file=sys.stderr)
        return EXIT_STORAGE if isinstance(exc, LogUnwritable) else EXIT_DATABASE
    except sqlite3.Error as exc:
        print(f"Cannot use {db}: {exc}", file=sys.stderr)
        return EXIT_DATABASE


def idle_threads(
    log: EventLog, states: Mapping[str, ThreadState], idle_days: float
) -> list[Candidate]:
    """The threads with no action for ``idle_days`` and nothing going on, by id."""
    cutoff = time.time() - idle_days * DAY_S
    chosen = []
    for thread_id in sorted(states):
        last_at = _last_at(log, thread_id)
        if last_at <= cutoff and busy_reason(states[thread_id]) is None:
            chosen.append(Candidate(thread_id, states[thread_id], last_at))
    return chosen


@dataclass
class Moved:
    """What ``move`` did: one line per thread (``said``), ``problems`` among them, and the
    error that stopped it (``stopped_by``: the folder or a file could not be written; the
    threads after it were not tried and stay in the database)."""

    threads: int = 0
    actions: int = 0
    problems: int = 0
    said: list[str] = field(default_factory=list)
    stopped_by: OSError | None = None


def move(log: EventLog, chosen: list[Candidate], folder: Path) -> Moved:
    """Archive each thread (see the module docstring)."""
    moved = Moved()
    try:
        if chosen:
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        moved.said.append(f"Not archived: cannot make {folder}: {exc.strerror or exc}")
        moved.problems, moved.stopped_by = 1, exc
        return moved
    for c in chosen:
        path = _free_path(folder, c.thread_id)
        try:
            write_private(path, partial(replay.export_thread, log.path, c.thread_id))
            thread_id, folded, count = _fold_file(path)
        except OSError as exc:  # the disk: the next thread would fare no better
            moved.said.append(f"Not archived: {c.thread_id}: {path}: {exc.strerror or exc}")
            moved.problems, moved.stopped_by = moved.problems + 1, exc
            return moved
        except (ValueError, KeyError, LogError) as exc:
            moved.said.append(f"Not archived: {c.thread_id}: {exc}")
            moved.problems += 1
            continue
        if thread_id != c.thread_id or folded != c.state or count != log.last_seq(c.thread_id):
            # Never delete what the file would not give back.
            moved.said.append(
                f"Not archived: {c.thread_id}: {path} does not fold to the thread's state "
                "(left beside the database, which keeps the thread)"
            )
            moved.problems += 1
            continue
        log.remove_thread(c.thread_id)
        moved.threads += 1
        moved.actions += count
        moved.said.append(f"archived {c.thread_id} ({count} actions) to {path}")
    return moved


def _archive(log: EventLog, args: argparse.Namespace, folder: Path) -> int:
    store, _ = rebuild_from_log(log, transition)
    states = store.snapshot()
    failed = False
    chosen: list[Candidate] = []
    if args.threads:
        for thread_id in args.threads:
            state = states.get(thread_id)
            if state is None:
                print(f"No thread {thread_id!r} in {log.path}.", file=sys.stderr)
                failed = True
            elif reason := busy_reason(state):
                print(f"Not archived: {thread_id}: {reason}.", file=sys.stderr)
                failed = True
            else:
                chosen.append(Candidate(thread_id, state, _last_at(log, thread_id)))
    else:
        chosen = idle_threads(log, states, args.idle_days)
    if args.dry_run:
        for c in chosen:
            idle = (time.time() - c.last_at) / DAY_S
            count = log.last_seq(c.thread_id)
            print(f"would archive {c.thread_id} ({count} actions, idle {idle:.0f} days)")
        print(f"{len(chosen)} thread(s) would be archived to {folder}.", file=sys.stderr)
        return EXIT_FAILURE if failed else EXIT_OK
    moved = move(log, chosen, folder)
    for line in moved.said:
        print(line, file=sys.stderr if line.startswith("Not archived") else sys.stdout)
    if moved.stopped_by is not None:
        print(f"Archived {moved.threads} thread(s) before that; stopped.", file=sys.stderr)
        return write_failure_code(moved.stopped_by)
    note = ""
    if moved.threads and args.vacuum:
        log.vacuum()
        note = " The database gave the space back to the disk (VACUUM)."
    elif moved.threads:
        note = " The database reuses the space for new rows (--vacuum gives it back to the disk)."
    print(f"Archived {moved.threads} thread(s), {moved.actions} actions.{note}", file=sys.stderr)
    return EXIT_FAILURE if failed or moved.problems else EXIT_OK


def archive_at_start(log: EventLog, idle_days: float, folder: Path) -> Moved:
    """``[runtime] archive_idle_days``: ``spindle run`` archives idle threads under its
    own lock, before any actor starts. A folder or file that cannot be written leaves the
    remaining threads in the database (said, not fatal: the bot starts all the same)."""
    store, _ = rebuild_from_log(log, transition)
    return move(log, idle_threads(log, store.snapshot(), idle_days), folder)


def _actions_of(path: Path) -> Iterator[tuple[int, Action]]:
    with path.open(encoding="utf-8") as lines:
        yield from replay.read_jsonl(lines, str(path))


def cmd_log_restore(args: argparse.Namespace, settings: Settings) -> int:
    db = settings.database_path
    try:
        with EventLog(db) as log:
            failed = False
            for path in args.files:
                failed |= not _restore(log, path)
            return EXIT_FAILURE if failed else EXIT_OK
    except LogError as exc:
        print(str(exc), file=sys.stderr)
        return EXIT_STORAGE if isinstance(exc, LogUnwritable) else EXIT_DATABASE
    except sqlite3.Error as exc:
        print(f"Cannot use {db}: {exc}", file=sys.stderr)
        return EXIT_DATABASE


def _restore(log: EventLog, path: Path) -> bool:
    """Put one archived thread back; False (said why) when it cannot be."""
    # First the whole file, read and checked: nothing is written for a file that is not
    # one thread's actions from seq 1 on.
    try:
        thread_id, state, count = _fold_file(path)
    except ValueError as exc:  # (its text names the file and the line)
        print(f"Not restored: {exc}", file=sys.stderr)
        return False
    except OSError as exc:
        print(f"Not restored: {path}: {exc.strerror or exc}", file=sys.stderr)
        return False
    if thread_id is None or state is None:
        print(f"Not restored: {path} holds no action.", file=sys.stderr)
        return False
    # An archive is of a thread with nothing going on. A file that ends in a run or a
    # queued prompt is not one, and restored it would run that prompt at the next start.
    if reason := busy_reason(state):
        said = f"Not restored: {path}: at its end {thread_id} is not idle ({reason})."
        print(said, file=sys.stderr)
        return False
    if log.last_seq(thread_id):
        print(
            f"Not restored: {path}: the database has a thread {thread_id!r} already "
            f"({log.last_seq(thread_id)} actions).",
            file=sys.stderr,
        )
        return False
    # Read again to write it (memory stays bounded): a file changed since the check is not
    # what was checked, and nothing of it is kept.
    folded, state = state, ThreadState.new(thread_id)
    written = 0
    try:
        for written, (_, action) in enumerate(_actions_of(path), 1):
            if action.thread_id != thread_id:
                raise ValueError(f"{path}: another thread than {thread_id!r}")
            state = transition(state, action).state
            log.append(action, state)
            if written % RESTORE_FLUSH_ROWS == 0:
                log.flush()
        log.flush()
        if written != count or state != folded:
            raise ValueError(f"{path}: not the actions it held a moment ago")
    except (ValueError, OSError) as exc:
        log.remove_thread(thread_id)
        print(f"Not restored: {path} changed while it was restored ({exc}).", file=sys.stderr)
        return False
    except BaseException:
        log.remove_thread(thread_id)  # nothing half restored
        raise
    print(f"restored {thread_id} ({count} actions) from {path}")
    return True
