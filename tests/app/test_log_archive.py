"""``spindle log archive`` and ``spindle log restore`` through the real command: idle
threads leave the database for a private, replayable file that folds to their state, busy
or recent ones stay, and a restore puts back the very rows (snapshots included)."""

from __future__ import annotations

import argparse
import sqlite3
import stat
import time
from pathlib import Path

import pytest
from cli_harness import make_place, spindle

from threadspindle.app import doctor, log_archive
from threadspindle.app.config import load_settings
from threadspindle.runtime.core.model import Policy, ThreadState
from threadspindle.runtime.core.transitions import transition
from threadspindle.runtime.live import replay
from threadspindle.runtime.live.log import EventLog
from threadspindle.testkit.thread_script import ThreadScript

DAY = 86_400.0


def _thread(log: EventLog, script: ThreadScript, *, finish: bool, deltas: int = 30) -> None:
    """A conversation with one prompt streamed over ``deltas`` text deltas, finished or not
    (then its run is still active: the thread is busy)."""
    # As the runtime does: from the default state, the policy by a logged PolicySet.
    state = ThreadState.new(script.thread_id)

    def commit(action: object) -> None:
        nonlocal state
        state = transition(state, action).state  # type: ignore[arg-type]
        log.append(action, state)  # type: ignore[arg-type]

    commit(script.policy(Policy(allowed_roots=("/",))))
    commit(script.start("echo", "/tmp", "/tmp"))
    commit(script.connected("s1"))
    commit(script.user("hello"))
    assert state.run is not None
    run_id = state.run.id
    for n in range(deltas):
        commit(script.text(run_id, f"word {n} "))
    if finish:
        commit(script.done(run_id))
        commit(script.posted(f"{script.thread_id}/{run_id}/0", "m1"))


@pytest.fixture
def place(tmp_path: Path) -> dict[str, Path]:
    place = make_place(tmp_path)
    place["data"].mkdir()
    long_ago = time.time() - 40 * DAY
    # A snapshot every 7 actions: the database's state of a thread comes from its newest
    # one, the file's from a fold from the start; the two must agree.
    with EventLog(place["data"] / "spindle.db", snapshot_every=7) as log:
        _thread(log, ThreadScript("old", start=long_ago), finish=True)
        _thread(log, ThreadScript("busy", start=long_ago), finish=False)
        _thread(log, ThreadScript("recent", start=time.time() - 60), finish=True)
        log.flush()
    return place


def _rows(db: Path, thread_id: str) -> tuple[list[tuple], list[tuple]]:
    conn = sqlite3.connect(db)
    try:
        actions = conn.execute(
            "SELECT seq, at, kind, action FROM actions WHERE thread_id=? ORDER BY seq",
            (thread_id,),
        ).fetchall()
        snapshots = conn.execute(
            "SELECT seq, state FROM snapshots WHERE thread_id=?", (thread_id,)
        ).fetchall()
    finally:
        conn.close()
    return actions, snapshots


def test_idle_threads_are_archived_replayable_and_restored_row_for_row(
    place: dict[str, Path],
) -> None:
    db = place["data"] / "spindle.db"
    before = _rows(db, "old")
    assert len(before[0]) == 36 and before[1][0][0] == 35
    exported = spindle(place, "log", "export", "old")
    assert exported.returncode == 0, exported.stderr

    dry = spindle(place, "log", "archive", "--idle-days", "30", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.startswith("would archive old (36 actions, idle 40 days)")
    assert _rows(db, "old") == before

    out = spindle(place, "log", "archive", "--idle-days", "30")
    assert out.returncode == 0, out.stderr
    archive = place["data"] / "archive" / "old.jsonl"
    assert out.stdout == f"archived old (36 actions) to {archive}\n"
    # The busy thread is as old, the recent one is idle: neither goes.
    assert _rows(db, "old") == ([], [])
    assert len(_rows(db, "busy")[0]) == 34 and len(_rows(db, "recent")[0]) == 36
    assert stat.S_IMODE(archive.stat().st_mode) == 0o600
    assert archive.read_text() == exported.stdout  # the export format, whole
    replayed = spindle(place, "replay", str(archive))
    assert replayed.returncode == 0 and '"type":"append_output"' in replayed.stdout
    status = spindle(place, "status")
    assert "old" not in status.stdout.split() and "busy" in status.stdout.split()

    restored = spindle(place, "log", "restore", str(archive))
    assert restored.returncode == 0, restored.stderr
    assert restored.stdout == f"restored old (36 actions) from {archive}\n"
    # Restored with the command's own snapshot interval (1,000): the rows are the same
    # bytes; the 7-action test interval's snapshot is not made again.
    assert _rows(db, "old") == (before[0], [])
    again = spindle(place, "log", "restore", str(archive))
    assert again.returncode == 1
    assert "the database has a thread 'old' already (36 actions)" in again.stderr
    assert _rows(db, "old")[0] == before[0]


def test_a_busy_thread_is_named_and_kept(place: dict[str, Path]) -> None:
    db = place["data"] / "spindle.db"
    before = _rows(db, "busy")
    out = spindle(place, "log", "archive", "busy", "nosuch")
    assert out.returncode == 1
    assert "Not archived: busy: a run is active." in out.stderr
    assert "No thread 'nosuch'" in out.stderr
    assert _rows(db, "busy") == before
    assert not (place["data"] / "archive").exists()


def test_nothing_named_is_a_usage_error(place: dict[str, Path]) -> None:
    out = spindle(place, "log", "archive")
    assert out.returncode == 2 and "--idle-days" in out.stderr


def test_the_running_bot_s_database_is_left_alone(place: dict[str, Path]) -> None:
    db = place["data"] / "spindle.db"
    before = _rows(db, "old")
    with EventLog(db):  # as ``spindle run`` holds it
        out = spindle(place, "log", "archive", "old")
    assert out.returncode == 4 and "in use by another Spindle process" in out.stderr
    assert _rows(db, "old") == before


def test_a_file_that_does_not_fold_to_the_thread_keeps_the_thread(
    place: dict[str, Path], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The deletion waits on the check: an export that lost its last line must not cost
    # the thread (whatever made it so: a bug, a disk that lied).
    db = place["data"] / "spindle.db"
    before = _rows(db, "old")
    real = replay.export_thread

    def short_export(db_path: object, thread_id: str, out: object) -> int:
        class Short:
            def __init__(self) -> None:
                self.lines: list[str] = []

            def write(self, text: str) -> None:
                self.lines.append(text)

        buffer = Short()
        real(db_path, thread_id, buffer)  # type: ignore[arg-type]
        for line in buffer.lines[:-1]:
            out.write(line)  # type: ignore[attr-defined]
        return len(buffer.lines) - 1

    monkeypatch.setattr(replay, "export_thread", short_export)
    toml = place["config"]
    toml.write_text(f'data_dir = "{place["data"]}"\n')
    args = argparse.Namespace(threads=["old"], idle_days=None, to=None, dry_run=False, vacuum=False)
    assert log_archive.cmd_log_archive(args, load_settings(toml)) == 1
    assert "does not fold to the thread's state" in capsys.readouterr().err
    assert _rows(db, "old") == before


def test_vacuum_gives_the_space_back(tmp_path: Path) -> None:
    place = make_place(tmp_path)
    place["data"].mkdir()
    db = place["data"] / "spindle.db"
    with EventLog(db) as log:
        _thread(log, ThreadScript("big", start=time.time() - 40 * DAY), finish=True, deltas=20_000)
        _thread(log, ThreadScript("small", start=time.time()), finish=True, deltas=10)
        log.flush()
    size = db.stat().st_size
    out = spindle(place, "log", "archive", "big", "--vacuum")
    assert out.returncode == 0, out.stderr
    assert "gave the space back" in out.stderr
    assert db.stat().st_size < size / 10
    assert len(_rows(db, "small")[0]) == 16


def test_doctor_names_archiving_once_the_database_is_large(
    place: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    toml = place["config"]
    toml.write_text(f'data_dir = "{place["data"]}"\n')
    settings = load_settings(toml)
    assert doctor._check_database(settings).status == "ok"
    monkeypatch.setattr(doctor, "LARGE_DATABASE_BYTES", 4096)
    check = doctor._check_database(settings)
    assert check.status == "warn" and "spindle log archive --idle-days 30" in check.fix


def test_spindle_run_archives_idle_threads_at_start_when_configured(
    place: dict[str, Path],
) -> None:
    db = place["data"] / "spindle.db"
    busy, recent = _rows(db, "busy"), _rows(db, "recent")
    place["config"].write_text("[runtime]\narchive_idle_days = 30\n")
    out = spindle(place, "run", "--no-mcp", "--agent", "echo", stdin="/quit\n")
    assert out.returncode == 0, out.stderr
    archive = place["data"] / "archive"
    assert (
        f"Archived 1 thread(s) idle for 30 days or more to {archive} "
        "(`spindle log restore FILE` puts one back)."
    ) in out.stderr
    assert _rows(db, "old") == ([], [])
    # As old, but its run never ended: kept (and the start recovered that run after it).
    assert _rows(db, "busy")[0][: len(busy[0])] == busy[0]
    assert _rows(db, "recent")[0][: len(recent[0])] == recent[0]  # idle, but not for long
    assert len(list(replay.read_jsonl((archive / "old.jsonl").read_text().splitlines()))) == 36
    restored = spindle(place, "log", "restore", str(archive / "old.jsonl"))
    assert restored.returncode == 0, restored.stderr


def test_restore_takes_only_an_idle_thread_s_whole_log(place: dict[str, Path]) -> None:
    # A file that ends with a prompt queued or running would run it at the next start.
    busy = place["work"] / "busy.jsonl"
    exported = spindle(place, "log", "export", "busy", "-o", str(busy))
    assert exported.returncode == 0, exported.stderr
    (place["data"] / "spindle.db").unlink()
    out = spindle(place, "log", "restore", str(busy))
    assert out.returncode == 1
    assert f"Not restored: {busy}: at its end busy is not idle (a run is active)." in out.stderr
    # Lines missing from its start: not a whole thread.
    lines = busy.read_text().splitlines()
    cut = place["work"] / "cut.jsonl"
    cut.write_text("\n".join(lines[1:]) + "\n")
    out = spindle(place, "log", "restore", str(cut))
    assert out.returncode == 1
    assert f"Not restored: {cut}: seq 2 where 1 was due: not a whole thread" in out.stderr
    assert _rows(place["data"] / "spindle.db", "busy") == ([], [])


def test_an_archive_folder_that_cannot_be_written_keeps_every_thread(
    place: dict[str, Path],
) -> None:
    db = place["data"] / "spindle.db"
    before = _rows(db, "old")
    blocked = place["work"] / "a-file"
    blocked.write_text("")
    out = spindle(place, "log", "archive", "old", "--to", str(blocked / "archive"))
    assert out.returncode == 1, out.stderr
    assert f"Not archived: cannot make {blocked / 'archive'}: Not a directory" in out.stderr
    assert "Archived 0 thread(s) before that; stopped." in out.stderr
    assert _rows(db, "old") == before


def test_a_file_changed_while_it_is_restored_leaves_nothing_of_it(
    place: dict[str, Path], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The file is read twice (checked, then written, so memory stays bounded): one that
    # lost its last line in between is not what was checked.
    out = spindle(place, "log", "archive", "old")
    assert out.returncode == 0, out.stderr
    archive = place["data"] / "archive" / "old.jsonl"
    real = log_archive._actions_of
    monkeypatch.setattr(log_archive, "_actions_of", lambda path: list(real(path))[:-1])
    db = place["data"] / "spindle.db"
    with EventLog(db) as log:
        assert log_archive._restore(log, archive) is False
    said = capsys.readouterr().err
    assert f"Not restored: {archive} changed while it was restored" in said
    assert _rows(db, "old") == ([], [])
    monkeypatch.setattr(log_archive, "_actions_of", real)
    restored = spindle(place, "log", "restore", str(archive))  # the file as it is: whole
    assert restored.returncode == 0, restored.stderr
    assert len(_rows(db, "old")[0]) == 36
