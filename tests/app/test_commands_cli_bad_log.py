"""A log with a row that cannot be read, through the real ``spindle`` processes (issue 19.2).

A corrupt row, an action kind this Spindle does not know, and rows deleted from the middle of
a thread each make ``spindle run`` stop at once with exit 4 naming the file, the thread and the
seq (it used to hang, deaf to SIGTERM); ``spindle status`` and ``spindle log export`` say the
same instead of a traceback, and ``spindle doctor`` fails the database instead of calling it
OK. SIGTERM while ``spindle run`` starts ends it the orderly way.
"""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest
from cli_harness import SPINDLE, environment, lines, make_place, spindle

THREAD = "console:main"


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real log: a prompt and three queued ones, all answered by the echo agent."""
    place = make_place(tmp_path_factory.mktemp("recorded"))
    out = spindle(
        place,
        "run",
        "--no-mcp",
        "--agent",
        "echo",
        stdin=lines("first", "/queue alpha", "/queue beta", "/queue gamma", "/wait", "/quit"),
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("echo (demo agent)") == 4  # four answers
    return place["data"] / "spindle.db"


@pytest.fixture
def place(tmp_path: Path, recorded: Path) -> dict[str, Path]:
    place = make_place(tmp_path)
    place["data"].mkdir()
    shutil.copy(recorded, place["data"] / "spindle.db")
    return place


def _seq_of(db: Path, text: str) -> int:
    conn = sqlite3.connect(db)
    try:
        return conn.execute(
            "SELECT seq FROM actions WHERE thread_id=? AND action LIKE ? ORDER BY seq",
            (THREAD, f'%"text":"{text}"%'),
        ).fetchone()[0]
    finally:
        conn.close()


def _damage(db: Path, case: str) -> int:
    """Damage the log; returns the seq the messages must name."""
    seq = _seq_of(db, "beta")
    conn = sqlite3.connect(db)
    if case == "corrupt row":
        conn.execute("UPDATE actions SET action='{not json' WHERE seq=?", (seq,))
    elif case == "unknown kind":
        conn.execute(
            "UPDATE actions SET action=replace(action, '\"queue_command\"', '\"bogus\"') "
            "WHERE seq=?",
            (seq,),
        )
    else:  # the rows that dispatched and answered "beta" and "gamma" are deleted
        seq += 1
        conn.execute("DELETE FROM actions WHERE seq BETWEEN ? AND ?", (seq, seq + 12))
    conn.commit()
    conn.close()
    return seq


def _rows(db: Path) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(db)
    try:
        return conn.execute("SELECT * FROM actions ORDER BY thread_id, seq").fetchall()
    finally:
        conn.close()


CASES = {
    "corrupt row": "not valid JSON",
    "unknown kind": "unknown action kind 'bogus'",
    "deleted rows": "missing: the thread's log jumps from seq",
}


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_every_command_names_the_file_thread_and_seq_of_an_unreadable_row(
    place: dict[str, Path], case: str
) -> None:
    db = place["data"] / "spindle.db"
    seq = _damage(db, case)
    before = _rows(db)
    named = f"{db}: thread '{THREAD}', seq {seq}: {CASES[case]}"

    started = time.monotonic()
    run = spindle(place, "run", "--no-mcp", "--agent", "echo", stdin="hello\n/quit\n", timeout=60)
    assert time.monotonic() - started < 20  # promptly: it used to hang forever
    assert run.returncode == 4, run.stderr
    assert named in run.stderr and "Traceback" not in run.stderr
    assert run.stdout == ""  # nothing started: no prompt was taken

    status = spindle(place, "status")
    assert status.returncode == 4
    assert named in status.stderr and "Traceback" not in status.stderr
    assert status.stdout == ""  # no table with answered prompts back in a queue

    export = spindle(place, "log", "export", THREAD)
    assert export.returncode == 4
    assert named in export.stderr and "Traceback" not in export.stderr
    assert export.stdout == ""  # every row is checked before a line is written
    target = place["work"] / "thread.jsonl"
    export_file = spindle(place, "log", "export", THREAD, "-o", str(target))
    assert export_file.returncode == 4 and not target.exists()
    assert list(place["work"].iterdir()) == []  # no half-written file left behind

    doctor = spindle(place, "doctor")
    assert doctor.returncode == 3
    database = next(line for line in doctor.stdout.splitlines() if "database:" in line)
    assert database.startswith("FAIL") and f"thread '{THREAD}', seq {seq}" in database

    assert _rows(db) == before  # no row was changed or removed by any of them


def test_an_undamaged_log_passes_doctor_and_status(place: dict[str, Path]) -> None:
    doctor = spindle(place, "doctor")
    database = next(line for line in doctor.stdout.splitlines() if "database:" in line)
    assert database.startswith("OK") and "every row reads" in database
    status = spindle(place, "status")
    assert status.returncode == 0 and THREAD in status.stdout


def test_sigterm_while_run_starts_stops_it_the_orderly_way(place: dict[str, Path]) -> None:
    db = place["data"] / "spindle.db"
    conn = sqlite3.connect(db)
    threads_before = conn.execute("SELECT COUNT(DISTINCT thread_id) FROM actions").fetchone()[0]
    conn.close()
    proc = subprocess.Popen(
        [*SPINDLE, "run", "--no-mcp", "--agent", "echo"],
        stdin=subprocess.PIPE,  # left open: only the signal stops it
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=place["work"],
        env=environment(place),
    )
    # Start-up is under way once the process holds the database open.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            fds = [
                os.readlink(f"/proc/{proc.pid}/fd/{fd}")
                for fd in os.listdir(f"/proc/{proc.pid}/fd")
            ]
        except OSError:
            fds = []
        if str(db) in fds:
            break
        time.sleep(0.005)
    else:
        proc.kill()
        pytest.fail("spindle run never opened its database")
    proc.send_signal(signal.SIGTERM)
    try:
        out, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("SIGTERM during start-up was ignored")
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    status = spindle(place, "status")
    assert status.returncode == 0 and THREAD in status.stdout
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT COUNT(DISTINCT thread_id) FROM actions").fetchone()[0] == (
        threads_before
    )
    conn.close()


def test_doctor_with_a_data_dir_that_cannot_be_made_says_nothing_else_is_fine(
    tmp_path: Path,
) -> None:
    # Under a file (as under /proc) the folder can never be made: the database was
    # "OK (created on first run)", and the disk check, measuring whatever parent existed,
    # advised freeing space.
    place = make_place(tmp_path)
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    place["data"] = blocker / "data"
    doctor = spindle(place, "doctor")
    rows = {line.split(":")[0].split(None, 1)[1]: line for line in doctor.stdout.splitlines()}
    assert rows["data directory"].startswith("FAIL")
    assert rows["database"].startswith("WARN") and "its folder is unusable" in rows["database"]
    assert rows["disk space"].startswith("WARN") and "not checked" in rows["disk space"]
    assert "free some space" not in doctor.stdout
    assert doctor.returncode == 3
