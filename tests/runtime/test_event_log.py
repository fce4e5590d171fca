"""The durable SQLite event log: seq order, batched flushes and durability tickets,
snapshots that shorten start-up, recovery of interrupted runs, and clear errors (naming
the file, touching nothing) for corrupt, foreign and locked databases."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
import trio
from runtime_harness import Chat, running, until

from threadspindle.runtime.core.actions import StatusRequested, UserMessage
from threadspindle.runtime.core.model import ThreadState
from threadspindle.runtime.core.transitions import transition
from threadspindle.runtime.live.log import EventLog, LogError, LogLocked
from threadspindle.runtime.live.store import rebuild_from_log


def _status(thread_id: str, n: int) -> StatusRequested:
    return StatusRequested(thread_id=thread_id, action_id=f"s{n}", at=float(n))


def test_append_assigns_gapless_seqs_and_flush_makes_them_readable(tmp_path: Path) -> None:
    with EventLog(tmp_path / "log.sqlite3") as log:
        tickets = [log.append(_status("a" if n % 2 else "b", n)) for n in range(1, 7)]
        assert tickets == [1, 2, 3, 4, 5, 6]
        assert not log.is_durable(1)
        assert list(log.read("a")) == []  # nothing on disk before the flush
        assert log.flush() == 6 and log.is_durable(6)
        assert [e.seq for e in log.read("a")] == [1, 2, 3]
        assert [e.action.action_id for e in log.read("b")] == ["s2", "s4", "s6"]
    with EventLog(tmp_path / "log.sqlite3") as log:  # reopened: seqs continue
        log.append(_status("a", 7))
        log.flush()
        assert [e.seq for e in log.read("a")] == [1, 2, 3, 4]


@pytest.mark.parametrize("in_thread", [False, True], ids=["trio-thread", "worker-thread"])
async def test_wait_durable_returns_after_the_flusher_commits(
    tmp_path: Path, in_thread: bool
) -> None:
    with EventLog(tmp_path / "log.sqlite3", flush_in_thread=in_thread) as log:
        async with trio.open_nursery() as nursery:
            await nursery.start(log.run_flusher)
            tickets = [log.append(_status("t", n)) for n in range(1, 101)]
            await log.wait_durable(tickets[-1])
            assert log.is_durable(100)
            assert log.flushes == 1  # one transaction for the whole batch
            nursery.cancel_scope.cancel()
        raw = sqlite3.connect(tmp_path / "log.sqlite3")
        assert raw.execute("SELECT COUNT(*) FROM actions").fetchone()[0] == 100
        assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_snapshots_let_start_up_fold_only_the_tail(tmp_path: Path) -> None:
    path = tmp_path / "log.sqlite3"
    state = ThreadState.new("t")
    states = {}
    with EventLog(path, snapshot_every=100) as log:
        for n in range(1, 251):
            state = transition(state, _status("t", n)).state
            states[n] = state
            log.append(_status("t", n), state)
        log.flush()
    with EventLog(path, snapshot_every=100) as log:
        seq, snap = log.latest_snapshot("t")
        assert seq == 200 and snap == states[200]
        store, folded = rebuild_from_log(log, transition)
        assert folded == 50  # 201..250, not 250
        assert store.get("t") == state  # the same state as folding everything


def test_a_corrupt_file_is_refused_by_name_and_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "events.sqlite3"
    garbage = b"this is not a database at all\x00" * 200
    path.write_bytes(garbage)
    with pytest.raises(LogError, match=str(path)):
        EventLog(path).open()
    assert path.read_bytes() == garbage


def test_a_foreign_sqlite_file_is_refused_and_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "other.sqlite3"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE notes(x TEXT)")
    conn.execute("INSERT INTO notes VALUES ('keep me')")
    conn.commit()
    conn.close()
    before = path.read_bytes()
    with pytest.raises(LogError, match="not a Spindle event log"):
        EventLog(path).open()
    assert path.read_bytes() == before


def test_a_log_in_use_is_refused_by_name(tmp_path: Path) -> None:
    path = tmp_path / "events.sqlite3"
    with EventLog(path):
        with pytest.raises(LogLocked, match=f"{path}.*in use"):
            EventLog(path).open()
    # a foreign writer holding SQLite's lock: locked, not a storage failure (the disk is fine)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(LogLocked, match=f"{path}.*locked by another process"):
            EventLog(path).open()
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    with EventLog(path) as log:  # free again: opens fine
        assert log.thread_ids() == []


async def test_restart_reports_the_active_run_interrupted_and_the_queue_goes_on(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    # First life: a long tool step is running, two prompts wait behind it.
    async with running(tmp_path) as rt:
        chat = Chat(rt, "t1", str(tmp_path))
        await chat.start()
        await chat.say("TOOL step")
        await until(lambda: rt.chat.texts("t1", "tool") != [])
        await chat.queue("second")
        await chat.queue("third")
        await rt.wait_quiet("t1")
        rt.log.flush()
        # The crash image: what is durable now (a copy, as if the process died here).
        crash = sqlite3.connect(tmp_path / "crash.sqlite3")
        rt.log.conn.backup(crash)
        crash.close()
        posted_before = set(rt.chat.keys("t1"))
    # Second life, on the crash image.
    async with running(tmp_path, log_name="crash.sqlite3") as rt:
        assert rt.recovered == ["t1"]
        await until(lambda: rt.snapshot("t1").counters.completed == 2)
        state = rt.snapshot("t1")
        assert state.queue == () and state.run is None
        assert [t for _, t in rt.agents.delivered] == ["second", "third"]
        notices = rt.chat.texts("t1", "notice")
        assert any("restarted while this run was active" in n for n in notices)
        assert not set(rt.chat.keys("t1")) & posted_before  # nothing posted twice
        assert rt.agents.starts[0].session_id == "sess-1"  # the session is resumed
        # What the first life posted is known, so a new renderer can still edit it.
        known = rt.log.posted_outputs("t1")
        assert posted_before <= set(known) and all(known[k] for k in posted_before)
        assert posted_before == set(rt.chat.seeded("t1"))  # the new renderer was told


async def test_post_is_refused_after_shutdown(tmp_path: Path, autojump_clock) -> None:
    from threadspindle.runtime.live.registry import RuntimeClosed

    async with running(tmp_path) as rt:
        pass
    with pytest.raises(RuntimeClosed):
        await rt.post(UserMessage(thread_id="t", action_id="x", at=0.0, author_id="u", text="hi"))


def test_posted_outputs_gathers_every_message_of_a_key(tmp_path: Path) -> None:
    from threadspindle.runtime.core.actions import OutputPosted
    from threadspindle.runtime.live.log import EventLog

    log = EventLog(tmp_path / "log.sqlite3").open()
    try:
        for i, ids in enumerate([("m1",), ("m2", "m3"), ("m3",)]):
            log.append(
                OutputPosted(
                    thread_id="t", action_id=f"p{i}", at=float(i), key="k", message_ids=ids
                )
            )
        log.flush()
        assert log.posted_outputs("t") == {"k": ("m1", "m2", "m3")}
    finally:
        log.close()


def test_action_ids_of_some_kinds_and_the_last_action_time(tmp_path: Path) -> None:
    with EventLog(tmp_path / "log.sqlite3") as log:
        assert log.last_action_at() is None
        log.append(UserMessage(thread_id="a", action_id="msg-7", at=5.0, author_id="u", text="x"))
        log.append(_status("a", 9))
        log.append(UserMessage(thread_id="a", action_id="msg-3", at=6.0, author_id="u", text="y"))
        log.append(_status("b", 4))
        log.flush()
        assert log.action_ids("a", ("user_message",)) == ["msg-7", "msg-3"]  # commit order
        assert log.action_ids("a", ("user_message", "status")) == ["msg-7", "s9", "msg-3"]
        assert log.action_ids("b", ("user_message",)) == [] == log.action_ids("a", ())
        assert log.last_action_at() == 6.0  # thread a's last action; b's was at 4.0


def test_when_durable_calls_back_from_the_flush_in_order(tmp_path: Path) -> None:
    calls: list[int] = []
    with EventLog(tmp_path / "log.sqlite3") as log:
        tickets = [log.append(_status("a", n)) for n in range(1, 4)]
        for ticket in tickets:
            log.when_durable(ticket, lambda t=ticket: calls.append(t))
        assert calls == []  # nothing durable yet: nothing called
        log.flush()
        assert calls == [1, 2, 3]
        log.when_durable(2, lambda: calls.append(-2))  # already durable: called at once
        assert calls == [1, 2, 3, -2]
        later = log.append(_status("a", 4))
        log.when_durable(later, lambda: calls.append(later))
        log.flush_now()  # the flush an action with agent effects asks for
        assert calls == [1, 2, 3, -2, 4] and log.is_durable(later)


def test_a_new_log_appends_in_commit_order_and_an_old_clustered_log_is_kept(
    tmp_path: Path,
) -> None:
    """A new log keeps its actions in a rowid table (a flush appends at its end) with a unique
    index by (thread, seq); a log made with the table clustered by (thread_id, seq) opens,
    appends and reads as before, and gets no second index."""
    new = tmp_path / "new.sqlite3"
    with EventLog(new) as log:
        for n in range(1, 7):
            log.append(_status("ab"[n % 2], n))
        log.flush()
    raw = sqlite3.connect(new)
    table_sql = raw.execute("SELECT sql FROM sqlite_master WHERE name='actions'").fetchone()[0]
    assert "WITHOUT ROWID" not in table_sql
    assert [r[0] for r in raw.execute("SELECT thread_id FROM actions ORDER BY rowid")] == list(
        "bababa"
    )  # commit order
    with pytest.raises(sqlite3.IntegrityError):  # the index keeps (thread, seq) unique
        raw.execute("INSERT INTO actions VALUES ('a', 1, 0, 'status_requested', '{}')")
    plan = raw.execute(
        "EXPLAIN QUERY PLAN SELECT seq FROM actions WHERE thread_id='a' AND seq>1 ORDER BY seq"
    ).fetchall()
    assert "actions_by_thread" in str(plan)
    raw.close()

    old = tmp_path / "old.sqlite3"
    raw = sqlite3.connect(old)
    raw.executescript(
        """
        CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
        INSERT INTO meta VALUES ('schema_version', '1');
        CREATE TABLE actions (thread_id TEXT NOT NULL, seq INTEGER NOT NULL,
            at REAL NOT NULL, kind TEXT NOT NULL, action TEXT NOT NULL,
            PRIMARY KEY (thread_id, seq)) WITHOUT ROWID;
        CREATE TABLE snapshots (thread_id TEXT PRIMARY KEY, seq INTEGER NOT NULL,
            state TEXT NOT NULL);
        """
    )
    raw.close()
    for round_ in range(2):  # reopened: seqs continue
        with EventLog(old) as log:
            for n in range(1, 4):
                log.append(_status("t", 3 * round_ + n))
            log.flush()
            assert [e.action.action_id for e in log.read("t")] == [
                f"s{n}" for n in range(1, 3 * round_ + 4)
            ]
    raw = sqlite3.connect(old)
    assert (
        raw.execute(
            "SELECT COUNT(*) FROM sqlite_master WHERE type='index' AND name='actions_by_thread'"
        ).fetchone()[0]
        == 0
    )
    raw.close()


async def test_wal_checkpoints_run_in_a_worker_thread_while_the_flusher_runs(
    tmp_path: Path,
) -> None:
    """With the flusher running, SQLite's own checkpoints (inside a commit, on the trio
    thread) are off and a worker thread checkpoints every ``checkpoint_every_rows`` rows;
    a WAL past ``wal_restart_frames`` is restarted by the writer; SQLite's own come back
    when the flusher ends, and every row is there."""
    path = tmp_path / "log.sqlite3"
    with EventLog(path) as log:
        log.checkpoint_every_rows = 200
        assert log.conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 1000
        async with trio.open_nursery() as nursery:
            await nursery.start(log.run_flusher)
            assert log.conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0
            # Five rounds of 200 rows, each waited out: one checkpoint each. (Written
            # without a pause, rows written while a checkpoint runs count toward the next
            # one, and how many checkpoints 1,000 rows make depends on the machine's speed.)
            for round_ in range(5):
                done = log.checkpoints
                for n in range(round_ * 200 + 1, round_ * 200 + 201):
                    ticket = log.append(_status(f"t{n % 7}", n))
                    if n % 50 == 0:
                        await log.wait_durable(ticket)
                await until(lambda done=done: log.checkpoints > done)
            assert log.checkpoints == 5
            # From here on a checkpoint runs only when the test asks for one, and none is
            # running or due: a checkpoint running while the writer commits makes it leave
            # the restart to the next commit (and one due would run at any moment).
            log.checkpoint_every_rows = 10**9
            await until(lambda: not log._checkpointing and not log._checkpoint_due.is_set())
            assert log.wal_restarts == 0
            log.wal_restart_frames = 1  # any WAL is too long now: the writer restarts it
            for n in range(1001, 1201):
                ticket = log.append(_status(f"t{n % 7}", n))
            await log.wait_durable(ticket)
            log._checkpoint_due.set()
            await until(lambda: log._restart_wal)  # said by that checkpoint
            await until(lambda: not log._checkpointing)
            await log.wait_durable(log.append(_status("t0", 1201)))
            assert log.wal_restarts == 1 and not log._restart_wal
            nursery.cancel_scope.cancel()
        assert log.conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 1000
        assert log._checkpoint_conn is None
    with EventLog(path) as log:
        assert sum(len(list(log.read(f"t{k}"))) for k in range(7)) == 1201


def test_a_lone_surrogate_leaves_no_gap_and_the_log_reads_back(tmp_path: Path) -> None:
    # "\ud800" has no UTF-8 form: the row could not be written as it is. Before, the seq
    # was taken before the row failed, and the gap refused every later start.
    path = tmp_path / "log.sqlite3"
    bad = UserMessage(thread_id="a", action_id="u1", at=1.0, text="hi \ud800", author_id="x")
    with EventLog(path) as log:
        log.append(_status("a", 0))
        log.append(bad, ThreadState.new("a").replace(last_note="cut \ud800"))
        log.append(_status("a", 2))
        log.flush()
    with EventLog(path) as log:  # reopened: no gap, every row reads
        entries = list(log.read("a"))
        assert [e.seq for e in entries] == [1, 2, 3]
        assert entries[1].action.text == "hi \ufffd"


async def test_ingress_text_with_a_lone_surrogate_is_stored_with_a_replacement(
    tmp_path: Path, autojump_clock
) -> None:
    async with running(tmp_path) as rt:
        await rt.post(
            UserMessage(thread_id="t", action_id="u1", at=1.0, text="x \ud800 y", author_id="x")
        )
        await rt.wait_quiet()
        [entry] = [e for e in rt.log.read("t") if e.action.kind == "user_message"]
        assert entry.action.text == "x \ufffd y"
