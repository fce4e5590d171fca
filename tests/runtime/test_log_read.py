"""Every row Spindle reads back is checked: a row that cannot be read, an action kind this
Spindle does not know, a row edited so its columns disagree with its JSON, a missing seq or
a snapshot past the end of its thread give ``LogCorrupt`` naming the file, the thread and
the seq; start-up fails with it at once instead of hanging (issue 19.2)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
import trio
from runtime_harness import Chat, running, until

from threadspindle.runtime.core.actions import OutputPosted, StatusRequested
from threadspindle.runtime.core.model import ThreadState
from threadspindle.runtime.core.transitions import transition
from threadspindle.runtime.live.log import EventLog, LogCorrupt, LogError
from threadspindle.runtime.live.log_read import ACTION_ADAPTER, LogReader, open_read_only
from threadspindle.runtime.live.registry import open_runtime
from threadspindle.runtime.live.store import rebuild_from_log
from threadspindle.testkit.fake_chat import RenderWorld


def _status(thread_id: str, n: int) -> StatusRequested:
    return StatusRequested(thread_id=thread_id, action_id=f"s{n}", at=float(n))


def _write(path: Path, count: int, *, snapshot_every: int = 1000, thread: str = "t") -> None:
    state = ThreadState.new(thread)
    with EventLog(path, snapshot_every=snapshot_every) as log:
        for n in range(1, count + 1):
            action = _status(thread, n)
            state = transition(state, action).state
            log.append(action, state)
        log.flush()


def _sql(path: Path, statement: str) -> None:
    conn = sqlite3.connect(path)
    conn.execute(statement)
    conn.commit()
    conn.close()


BAD_ROWS = {
    "not JSON": (
        "UPDATE actions SET action='{not json' WHERE seq=7",
        "not valid JSON",
    ),
    "unknown kind": (
        'UPDATE actions SET action=replace(action, \'"kind":"status"\', \'"kind":"bogus"\') '
        "WHERE seq=7",
        "unknown action kind 'bogus'",
    ),
    "kind column edited": (
        "UPDATE actions SET kind='bogus' WHERE seq=7",
        "the row's kind column says 'bogus' but its action is 'status'",
    ),
    "another thread's action": (
        'UPDATE actions SET action=replace(action, \'"thread_id":"t"\', \'"thread_id":"u"\') '
        "WHERE seq=7",
        "the action belongs to thread 'u'",
    ),
    "a field removed": (
        "UPDATE actions SET action=replace(action, '\"action_id\":\"s7\",', '') WHERE seq=7",
        "action_id: Field required",
    ),
    "time not a number": ("UPDATE actions SET at='soon' WHERE seq=7", "not a number"),
}


@pytest.mark.parametrize("case", list(BAD_ROWS), ids=list(BAD_ROWS))
def test_a_bad_row_is_named_by_file_thread_and_seq(tmp_path: Path, case: str) -> None:
    path = tmp_path / "log.sqlite3"
    _write(path, 10)
    statement, reason = BAD_ROWS[case]
    _sql(path, statement)
    with EventLog(path) as log:
        with pytest.raises(LogCorrupt) as caught:
            rebuild_from_log(log, transition)
    error = caught.value
    assert (error.path, error.thread_id, error.seq) == (path, "t", 7)
    assert str(error).startswith(f"event log {path}: thread 't', seq 7: ")
    assert reason in str(error)
    # The read-only readers (status, export, doctor) say the same.
    conn = open_read_only(path)
    try:
        reader = LogReader(conn, path)
        with pytest.raises(LogCorrupt, match="seq 7"):
            rebuild_from_log(reader, transition)
        with pytest.raises(LogCorrupt, match="seq 7"):
            list(reader.export_rows("t"))
        problems, count = reader.problems()
        assert count == 1 and str(problems[0]) == str(error)
    finally:
        conn.close()


async def test_a_gap_in_the_folded_tail_stops_start_up_instead_of_requeueing_answered_prompts(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with running(tmp_path) as rt:
        chat = Chat(rt, "t1", str(tmp_path))
        await chat.start()
        for n in range(5):
            await chat.queue(f"prompt {n}")
        await until(lambda: rt.snapshot("t1").counters.completed == 5)
        await rt.wait_quiet("t1")
    path = tmp_path / "events.sqlite3"
    conn = sqlite3.connect(path)
    # The rows that dispatched and answered the third to fifth prompt.
    first, last = conn.execute(
        "SELECT MIN(seq), MAX(seq) FROM actions WHERE thread_id='t1' AND seq > ("
        "  SELECT seq FROM actions WHERE thread_id='t1' AND action LIKE '%prompt 4%')"
    ).fetchone()
    conn.execute(
        "DELETE FROM actions WHERE thread_id='t1' AND seq BETWEEN ? AND ?", (first, last - 3)
    )
    conn.commit()
    conn.close()
    with EventLog(path) as log:
        # Folding past the gap would bring back answered prompts as queued ...
        state = ThreadState.new("t1")
        for (raw,) in log.conn.execute(
            "SELECT action FROM actions WHERE thread_id='t1' ORDER BY seq"
        ):
            state = transition(state, ACTION_ADAPTER.validate_json(raw)).state
        assert state.queue or state.run is not None
        # ... so start-up refuses the log, naming the first missing seq, at once.
        with trio.fail_after(5):
            with pytest.raises(LogCorrupt, match=rf"thread 't1', seq {first}: missing"):
                async with open_runtime(
                    log=log,
                    renderer_factory=RenderWorld().renderer,
                    adapter_factory=lambda start, thread_id: None,
                    clock=trio.current_time,
                ):
                    pytest.fail("started on a log with a gap")


def test_a_gap_below_a_snapshot_does_not_change_start_up_but_export_and_doctor_see_it(
    tmp_path: Path,
) -> None:
    path = tmp_path / "log.sqlite3"
    _write(path, 25, snapshot_every=10)
    with EventLog(path, snapshot_every=10) as log:
        expected, _ = rebuild_from_log(log, transition)
    _sql(path, "DELETE FROM actions WHERE seq BETWEEN 3 AND 4")
    with EventLog(path, snapshot_every=10) as log:
        store, folded = rebuild_from_log(log, transition)
        assert folded == 5 and store.get("t") == expected.get("t")  # 21..25 from seq 20
        with pytest.raises(LogCorrupt, match=r"seq 3: missing: .* from seq 2 to seq 5"):
            list(log.read_raw("t"))  # what `spindle log export` writes
        problems, count = log.reader.problems()
        assert count == 1 and problems[0].seq == 3


def test_rows_deleted_up_to_and_past_the_snapshot_are_detected(tmp_path: Path) -> None:
    path = tmp_path / "log.sqlite3"
    _write(path, 25, snapshot_every=10)
    _sql(path, "DELETE FROM actions WHERE seq >= 19")
    with EventLog(path, snapshot_every=10) as log:
        with pytest.raises(LogCorrupt, match="snapshot is at seq 20 but its log ends at seq 18"):
            rebuild_from_log(log, transition)


def test_a_bad_output_posted_row_below_the_snapshot_is_found_at_start_up(
    tmp_path: Path,
) -> None:
    path = tmp_path / "log.sqlite3"
    with EventLog(path) as log:
        for n in range(1, 4):
            log.append(
                OutputPosted(thread_id="t", action_id=f"p{n}", at=0.0, key=f"k{n}", message_ids=())
            )
        log.flush()
    _sql(path, 'UPDATE actions SET action=\'{"kind": "output_posted"}\' WHERE seq=2')
    with EventLog(path) as log:
        with pytest.raises(LogCorrupt, match="thread 't', seq 2: an output_posted row"):
            log.check_posted_outputs()
        with pytest.raises(LogCorrupt, match="seq 2"):
            log.posted_outputs("t")


@pytest.mark.parametrize("value", ["abc", "2", ""])
def test_a_schema_version_this_spindle_cannot_read_is_refused_by_name(
    tmp_path: Path, value: str
) -> None:
    path = tmp_path / "log.sqlite3"
    _write(path, 2)
    _sql(path, f"UPDATE meta SET value='{value}' WHERE key='schema_version'")
    with pytest.raises(LogError, match=rf"{path} has schema version '{value}'"):
        EventLog(path).open()
    with pytest.raises(LogError, match=rf"{path} has schema version '{value}'"):
        open_read_only(path)
