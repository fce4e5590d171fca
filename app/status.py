"""``spindle status``: every thread's phase, agent, workdir, queue and counters, read-only.

It opens the database read-only (``runtime.live.log_read.open_read_only``: no lock taken, nothing
written; it works while the bot runs, on a full disk and on a read-only file system) and
folds each thread from its newest snapshot with the same fold and the same row checks as
start-up (``runtime.live.store.rebuild_from_log``), so a row start-up could not read is reported
here the same way: ``LogCorrupt`` naming the file, the thread and the seq.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rich.cells import cell_len

from threadspindle.effects.terminal_text import terminal_safe
from threadspindle.runtime.core.model import ThreadState
from threadspindle.runtime.core.transitions import transition
from threadspindle.runtime.live.log_read import LogReader, open_read_only
from threadspindle.runtime.live.store import rebuild_from_log

__all__ = ["ThreadRow", "format_status", "read_status"]


@dataclass(frozen=True)
class ThreadRow:
    thread_id: str
    state: ThreadState
    actions: int


def read_status(db_path: Path) -> list[ThreadRow]:
    """Every thread's state. Raises ``FileNotFoundError`` without a database and
    ``LogError`` (``LogCorrupt`` for a row) when it cannot be read."""
    conn = open_read_only(db_path)
    try:
        reader = LogReader(conn, db_path)
        lasts = reader.last_seqs()
        store, _ = rebuild_from_log(reader, transition)
        states = store.snapshot()
        return [ThreadRow(tid, states[tid], lasts[tid]) for tid in sorted(states)]
    finally:
        conn.close()


def format_status(rows: list[ThreadRow]) -> str:
    if not rows:
        return "No threads yet."
    # Thread ids whole, never cut (a cut one could not be given to `log export`), padded
    # by the cells a terminal gives them (日本 takes four), escape codes removed.
    ids = [terminal_safe(row.thread_id) for row in rows]
    width = max(24, *(cell_len(i) for i in ids))
    header = (
        f"{_pad('thread', width)} {'phase':12} {'agent':9} {'queue':>5} {'runs':>5} "
        f"{'done':>5} {'stale':>5}  workdir"
    )
    lines = [header, "-" * cell_len(header)]
    for shown, row in zip(ids, rows, strict=True):
        s = row.state
        conv = s.conversation
        phase = s.run.phase.value if s.run else "idle"
        c = s.counters
        lines.append(
            f"{_pad(shown, width)} {phase:12} {(conv.agent if conv else '-'):9} "
            f"{len(s.queue):>5} {c.runs:>5} {c.completed:>5} {c.stale_drops:>5}  "
            f"{terminal_safe(conv.workdir) if conv else '-'}"
        )
    return "\n".join(lines)


def _pad(text: str, width: int) -> str:
    return text + " " * max(width - cell_len(text), 0)
