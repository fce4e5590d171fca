"""Rows SQLite cannot hand over as text, a table with a column renamed, and exported lines
Python's JSON parser cannot follow: each is a clear error naming where it is, never an
``sqlite3.OperationalError`` or a ``RecursionError`` from the middle of a read.

Before: text that is not UTF-8 in an ``actions`` row made every reader fail with SQLite's
"Could not decode to UTF-8 column 'action'" (``spindle run`` with a traceback); a renamed
column failed start-up with "no such column" from inside the runtime; a line of ``[[[[...``
made ``spindle replay`` and ``spindle web-timeline`` end on a ``RecursionError``.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from threadspindle.ingress.web.timeline import timeline_of_lines
from threadspindle.runtime.core.actions import OutputPosted, StatusRequested
from threadspindle.runtime.core.model import ThreadState
from threadspindle.runtime.core.transitions import transition
from threadspindle.runtime.live.log import EventLog, LogCorrupt, LogError
from threadspindle.runtime.live.log_read import LogReader, open_read_only
from threadspindle.runtime.live.replay import read_jsonl
from threadspindle.runtime.live.store import rebuild_from_log


def _write(path: Path, count: int, *, snapshot_every: int = 1000) -> None:
    state = ThreadState.new("t")
    with EventLog(path, snapshot_every=snapshot_every) as log:
        for n in range(1, count + 1):
            action = StatusRequested(thread_id="t", action_id=f"s{n}", at=float(n))
            state = transition(state, action).state
            log.append(action, state)
        log.flush()


def _sql(path: Path, statement: str) -> None:
    conn = sqlite3.connect(path)
    conn.execute(statement)
    conn.commit()
    conn.close()


# Each makes the text of one column of the row at seq 7 bytes that are not UTF-8.
NOT_UTF8 = {
    "action": "UPDATE actions SET action=CAST(replace(action, 's7', X'FFFE') AS TEXT) WHERE seq=7",
    "kind": "UPDATE actions SET kind=CAST(X'FF' AS TEXT) WHERE seq=7",
    "time": "UPDATE actions SET at=CAST(X'FF' AS TEXT) WHERE seq=7",
}


@pytest.mark.parametrize("column", list(NOT_UTF8))
def test_a_row_whose_text_is_not_utf8_is_named_by_thread_and_seq(
    tmp_path: Path, column: str
) -> None:
    path = tmp_path / "log.sqlite3"
    _write(path, 10)
    _sql(path, NOT_UTF8[column])
    named = f"event log {path}: thread 't', seq 7: its {column} is not valid UTF-8"
    with EventLog(path) as log:  # start-up: the fold of the thread
        with pytest.raises(LogCorrupt, match=named) as caught:
            rebuild_from_log(log, transition)
    assert (caught.value.thread_id, caught.value.seq) == ("t", 7)
    conn = open_read_only(path)  # status, export, doctor
    try:
        reader = LogReader(conn, path)
        with pytest.raises(LogCorrupt, match=named):
            rebuild_from_log(reader, transition)
        with pytest.raises(LogCorrupt, match=named):
            list(reader.export_rows("t"))
        problems, count = reader.problems()
        assert count == 1 and str(problems[0]).startswith(named)
    finally:
        conn.close()


def test_a_snapshot_that_is_not_utf8_is_named_by_thread_and_seq(tmp_path: Path) -> None:
    path = tmp_path / "log.sqlite3"
    _write(path, 10, snapshot_every=5)
    _sql(path, "UPDATE snapshots SET state=CAST(replace(state, '\"t\"', X'FF') AS TEXT)")
    seq = sqlite3.connect(path).execute("SELECT seq FROM snapshots").fetchone()[0]
    named = f"thread 't', seq {seq}: its snapshot is not valid UTF-8"
    with EventLog(path) as log, pytest.raises(LogCorrupt, match=named):
        log.snapshots()
    conn = open_read_only(path)
    try:
        problems, count = LogReader(conn, path).problems()
        assert count == 1 and named in str(problems[0])
    finally:
        conn.close()


def test_an_output_posted_row_that_is_not_utf8_is_named(tmp_path: Path) -> None:
    path = tmp_path / "log.sqlite3"
    with EventLog(path) as log:
        log.append(OutputPosted(thread_id="t", action_id="o1", at=1.0, key="k1"))
        log.flush()
    _sql(path, "UPDATE actions SET action=CAST(replace(action, 'k1', X'FF') AS TEXT)")
    with EventLog(path) as log:
        with pytest.raises(LogCorrupt, match="thread 't', seq 1: an output_posted row"):
            log.posted_outputs("t")


def test_a_blob_action_that_is_utf8_json_still_reads(tmp_path: Path) -> None:
    """Reading text as bytes must not refuse what read before: a BLOB holding the JSON."""
    path = tmp_path / "log.sqlite3"
    _write(path, 3)
    _sql(path, "UPDATE actions SET action=CAST(action AS BLOB) WHERE seq=2")
    with EventLog(path) as log:
        assert [row.seq for row in log.read("t")] == [1, 2, 3]
        assert [seq for seq, _, _ in log.read_raw("t")] == [1, 2, 3]


@pytest.mark.parametrize(
    ("table", "statement"),
    [
        ("actions", "ALTER TABLE actions RENAME COLUMN kind TO kind2"),
        ("snapshots", "ALTER TABLE snapshots RENAME COLUMN state TO state2"),
    ],
)
def test_a_renamed_column_is_refused_by_name_when_the_log_is_opened(
    tmp_path: Path, table: str, statement: str
) -> None:
    path = tmp_path / "log.sqlite3"
    _write(path, 3)
    _sql(path, statement)
    refused = rf"event log {path}: its {table} table has no column"
    with pytest.raises(LogError, match=refused):
        EventLog(path).open()
    with pytest.raises(LogError, match=refused):
        open_read_only(path)


def test_a_line_nested_too_deeply_is_a_value_error_naming_the_line() -> None:
    lines = ["\n", "[" * 100_000 + "\n"]
    with pytest.raises(ValueError, match=r"^up\.jsonl:2: JSON nested too deeply"):
        list(read_jsonl(lines, "up.jsonl"))
    with pytest.raises(ValueError, match="nested too deeply"):  # the web timeline's reader
        timeline_of_lines(lines, "up.jsonl")


def test_a_seq_that_is_not_a_number_is_a_value_error_naming_the_line() -> None:
    action = StatusRequested(thread_id="t", action_id="s1", at=1.0).model_dump_json()
    line = f'{{"format":"spindle-log","v":1,"thread_id":"t","seq":[1],"action":{action}}}'
    with pytest.raises(ValueError, match=r"^up\.jsonl:1: bad seq \[1\]"):
        list(read_jsonl([line], "up.jsonl"))


def _line(seq: object, thread: str = "t", action_id: str = "s1") -> str:
    action = StatusRequested(thread_id=thread, action_id=action_id, at=1.0).model_dump_json()
    return f'{{"format":"spindle-log","v":1,"thread_id":"{thread}","seq":{seq},"action":{action}}}'


@pytest.mark.parametrize("seq", ["1e999", "3.9", '"3"', "true", "-1", "NaN"])
def test_a_seq_that_is_no_whole_number_is_a_value_error_naming_the_line(seq: str) -> None:
    # (1e999 raised an OverflowError nobody caught: a traceback from `spindle replay`.)
    with pytest.raises(ValueError, match=r"^up\.jsonl:2: bad seq"):
        list(read_jsonl([_line(1), _line(seq, action_id="s2")], "up.jsonl"))


def test_another_threads_line_or_a_seq_that_does_not_grow_is_refused() -> None:
    # Folded into the first thread, another thread's actions made a state neither had.
    mixed = [_line(1), _line(2, thread="other", action_id="o1")]
    with pytest.raises(ValueError, match=r"^up\.jsonl:2: an action of thread 'other'"):
        list(read_jsonl(mixed, "up.jsonl"))
    for seqs in ((2, 1), (1, 1)):
        lines = [_line(seq, action_id=f"s{i}") for i, seq in enumerate(seqs)]
        with pytest.raises(ValueError, match=r"^up\.jsonl:2: seq 1 after seq"):
            list(read_jsonl(lines, "up.jsonl"))
    assert [seq for seq, _ in read_jsonl([_line(1), "", _line(5, action_id="s5")])] == [1, 5]


@pytest.mark.parametrize("at", ["NaN", "1e308", "-1.0", "Infinity"])
def test_an_action_at_no_time_a_clock_gives_is_refused(at: str) -> None:
    # The web timeline refused these and `spindle replay` took them: one reader for both.
    line = _line(1).replace('"at":1.0', f'"at":{at}')
    assert f'"at":{at}' in line
    with pytest.raises(ValueError, match=r"^up\.jsonl:1: action s1 is at .*not a time between"):
        list(read_jsonl([line], "up.jsonl"))
