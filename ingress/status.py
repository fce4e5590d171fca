"""``spindle status``: every thread's phase, agent, workdir, queue and counters, read-only.

It opens the database with SQLite's read-only mode (no lock taken, nothing written), so it
works while the bot runs: it folds each thread from its newest snapshot, exactly as start-up
does, without touching the running process.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path

from runtime.log import ACTION_ADAPTER
from runtime.model import ThreadState
from runtime.transitions import transition

__all__ = ["ThreadRow", "format_status", "read_status"]


@dataclass(frozen=True)
class ThreadRow:
    thread_id: str
    state: ThreadState
    actions: int


def read_status(db_path: Path) -> list[ThreadRow]:
    if not db_path.exists():
        raise FileNotFoundError(db_path)
    conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True, timeout=2)
    try:
        snapshots = {
            tid: (seq, ThreadState.model_validate_json(state))
            for tid, seq, state in conn.execute("SELECT thread_id, seq, state FROM snapshots")
        }
        rows = []
        threads = [r[0] for r in conn.execute("SELECT DISTINCT thread_id FROM actions ORDER BY 1")]
        for tid in threads:
            seq, state = snapshots.get(tid, (0, ThreadState.new(tid)))
            count = seq
            for (raw,) in conn.execute(
                "SELECT action FROM actions WHERE thread_id=? AND seq>? ORDER BY seq", (tid, seq)
            ):
                state = transition(state, ACTION_ADAPTER.validate_json(raw)).state
                count += 1
            rows.append(ThreadRow(tid, state, count))
        return rows
    finally:
        conn.close()


def format_status(rows: list[ThreadRow]) -> str:
    if not rows:
        return "No threads yet."
    header = (
        f"{'thread':24} {'phase':12} {'agent':9} {'queue':>5} {'runs':>5} {'done':>5} "
        f"{'stale':>5}  workdir"
    )
    lines = [header, "-" * len(header)]
    for row in rows:
        s = row.state
        conv = s.conversation
        phase = s.run.phase.value if s.run else "idle"
        c = s.counters
        lines.append(
            f"{row.thread_id[:24]:24} {phase:12} {(conv.agent if conv else '-'):9} "
            f"{len(s.queue):>5} {c.runs:>5} {c.completed:>5} {c.stale_drops:>5}  "
            f"{conv.workdir if conv else '-'}"
        )
    return "\n".join(lines)
