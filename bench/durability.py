"""Durability and replay: replay speed, and start-up time to rebuild the store from a log.

Logs of 100k and 1M actions are written through the real ``EventLog`` (100 threads, each a
realistic sequence from ``bench.core``), then the store is rebuilt with
``runtime.live.store.rebuild_from_log`` — the start-up path — once with the periodic snapshots
and once from a copy of the same file whose snapshots were removed (a full fold).
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import tempfile
import time

from bench.common import median_of
from bench.core import realistic_actions
from threadspindle.runtime.core.model import Policy, ThreadState
from threadspindle.runtime.core.transitions import transition
from threadspindle.runtime.live.log import EventLog
from threadspindle.runtime.live.replay import replay_actions
from threadspindle.runtime.live.store import rebuild_from_log

__all__ = ["run", "write_log"]


def write_log(path: str, total: int, threads: int = 100, snapshot_every: int = 1000) -> int:
    per_thread = total // threads
    base = realistic_actions(per_thread // 75 + 1)[:per_thread]
    log = EventLog(path, snapshot_every=snapshot_every).open()
    written = 0
    try:
        for t in range(threads):
            tid = f"thread-{t}"
            state = ThreadState.new(tid, Policy(allowed_roots=("/work",), queue_limit=10_000))
            for action in base:
                action = action.replace(thread_id=tid)
                state = transition(state, action).state
                log.append(action, state)
                written += 1
            log.flush()
    finally:
        log.close()
    return written


def rebuild_seconds(path: str) -> tuple[float, int]:
    log = EventLog(path).open()
    try:
        start = time.perf_counter()
        _, folded = rebuild_from_log(log, transition)
        return time.perf_counter() - start, folded
    finally:
        log.close()


def replay_rate(n_runs: int) -> float:
    actions = list(enumerate(realistic_actions(n_runs), 1))
    start = time.perf_counter()
    count = sum(1 for _ in replay_actions(actions))
    return count / (time.perf_counter() - start)


def run(quick: bool) -> dict:
    result: dict = {
        "replay_actions_per_s": round(median_of(lambda: replay_rate(20 if quick else 200), 3)[0])
    }
    sizes = [10_000] if quick else [100_000, 1_000_000]
    with tempfile.TemporaryDirectory() as tmp:
        for size in sizes:
            path = os.path.join(tmp, f"log-{size}.db")
            t0 = time.perf_counter()
            written = write_log(path, size)
            write_s = time.perf_counter() - t0
            bare = os.path.join(tmp, f"log-{size}-nosnap.db")
            shutil.copy(path, bare)
            conn = sqlite3.connect(bare)
            conn.execute("DELETE FROM snapshots")
            conn.commit()
            conn.close()
            with_snap, folded_snap = rebuild_seconds(path)
            without, folded_full = rebuild_seconds(bare)
            result[f"rebuild_{size}"] = {
                "actions": written,
                "threads": 100,
                "write_s": round(write_s, 2),
                "with_snapshots_s": round(with_snap, 3),
                "folded_with_snapshots": folded_snap,
                "without_snapshots_s": round(without, 3),
                "folded_without_snapshots": folded_full,
                "file_mb": round(os.path.getsize(path) / 1e6, 1),
            }
    return result
