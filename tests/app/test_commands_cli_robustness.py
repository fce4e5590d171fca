"""The ``spindle`` subcommands on awkward outputs and inputs, through the real processes:
each says one line and exits with its code, never a traceback, and never replaces what it
was pointed at.

- ``log export -o`` through a symbolic link writes the link's target (the link stays); onto
  a FIFO it writes into the FIFO (it used to rename a regular file over both); a directory
  is refused.
- ``status``, ``replay``, ``web-timeline``, ``log export`` and ``doctor`` with standard output
  on a full disk (``/dev/full``): exit 5 and "Cannot write to standard output" (a traceback
  before, or "Cannot write None"); with it closed (``>&-``): exit 1 and one line.
- ``log export -o`` onto Spindle's own files is refused; an export is private.
- ``init`` where it cannot write (a directory, under a file, a full disk): one line.
- ``replay --check`` with a missing file or a directory, ``replay`` and ``web-timeline`` of
  a line nested too deeply for the JSON parser: exit 1 naming the file.
- ``run --workdir`` with a control character or longer than 4096 bytes: exit 2 before
  anything starts (a traceback on a fresh data dir before).
- ``run`` on a log with a row whose text is not UTF-8 or with a renamed column: exit 4
  naming the file (and the thread and seq of the row), like every other unreadable row.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import stat
import subprocess
import threading
from pathlib import Path

import pytest
from cli_harness import SPINDLE, environment, lines, make_place, spindle

THREAD = "console:main"


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real log of one answered prompt."""
    place = make_place(tmp_path_factory.mktemp("recorded"))
    out = spindle(
        place, "run", "--no-mcp", "--agent", "echo", stdin=lines("hello there", "/wait", "/quit")
    )
    assert out.returncode == 0, out.stderr
    return place["data"] / "spindle.db"


@pytest.fixture
def place(tmp_path: Path, recorded: Path) -> dict[str, Path]:
    place = make_place(tmp_path)
    place["data"].mkdir()
    shutil.copy(recorded, place["data"] / "spindle.db")
    return place


def _export(place: dict[str, Path]) -> str:
    out = spindle(place, "log", "export", THREAD)
    assert out.returncode == 0, out.stderr
    return out.stdout


def _one_clear_line(err: str) -> str:
    assert "Traceback" not in err and "Exception ignored" not in err, err
    return err


# --- log export -o ---------------------------------------------------------------------------


def test_export_through_a_symlink_writes_its_target_and_keeps_the_link(
    place: dict[str, Path], tmp_path: Path
) -> None:
    (tmp_path / "exports").mkdir()
    target = tmp_path / "exports" / "real.jsonl"
    link = tmp_path / "link.jsonl"
    link.symlink_to(target)
    out = spindle(place, "log", "export", THREAD, "-o", str(link))
    assert out.returncode == 0, out.stderr
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_text() == _export(place)
    assert sorted(p.name for p in (tmp_path / "exports").iterdir()) == ["real.jsonl"]


def test_export_onto_a_fifo_writes_into_it(place: dict[str, Path], tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    # The reading end is open before spindle runs (so its open does not wait), and a
    # writing end of our own keeps the reader from seeing end-of-file until spindle is done.
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    keep = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    os.set_blocking(reader, True)
    received: list[bytes] = []

    def read_all() -> None:
        while chunk := os.read(reader, 65536):
            received.append(chunk)

    thread = threading.Thread(target=read_all, daemon=True)
    thread.start()
    try:
        out = spindle(place, "log", "export", THREAD, "-o", str(fifo))
    finally:
        os.close(keep)
        thread.join(timeout=30)
        os.close(reader)
    assert out.returncode == 0, out.stderr
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)  # still the FIFO, not a file renamed over it
    assert b"".join(received).decode() == _export(place)
    assert not (tmp_path / ".pipe.partial").exists()


def test_export_onto_a_directory_is_refused(place: dict[str, Path], tmp_path: Path) -> None:
    folder = tmp_path / "folder"
    folder.mkdir()
    out = spindle(place, "log", "export", THREAD, "-o", str(folder))
    assert out.returncode == 2
    assert f"Cannot write {folder}: it is a directory" in _one_clear_line(out.stderr)
    assert list(folder.iterdir()) == [] and not (tmp_path / ".folder.partial").exists()


def test_export_onto_spindles_own_files_is_refused(place: dict[str, Path], tmp_path: Path) -> None:
    # Written over, the database held one thread's export: every other thread was lost.
    db = place["data"] / "spindle.db"
    before = db.read_bytes()
    link = tmp_path / "innocent.jsonl"
    link.symlink_to(db)
    for output, what in ((db, "Spindle's database"), (link, "Spindle's database")):
        out = spindle(place, "log", "export", THREAD, "-o", str(output))
        assert out.returncode == 2, out.stderr
        assert f"Cannot write {output}: it is {what}" in _one_clear_line(out.stderr)
    assert db.read_bytes() == before
    assert spindle(place, "status").returncode == 0
    # Read from JetStream, it is refused the same, before any server is asked.
    out = spindle(place, "log", "export", THREAD, "--nats", "nats://127.0.0.1:9", "-o", str(db))
    assert out.returncode == 2, out.stderr
    assert f"Cannot write {db}: it is Spindle's database" in _one_clear_line(out.stderr)
    assert db.read_bytes() == before


def test_an_export_is_private_or_keeps_the_mode_of_the_file_it_replaces(
    place: dict[str, Path], tmp_path: Path
) -> None:
    # It quotes every prompt: made with the umask, it was readable by anyone.
    fresh, shared = tmp_path / "fresh.jsonl", tmp_path / "shared.jsonl"
    shared.write_text("old")
    shared.chmod(0o640)
    for output in (fresh, shared):
        assert spindle(place, "log", "export", THREAD, "-o", str(output)).returncode == 0
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o600
    assert stat.S_IMODE(shared.stat().st_mode) == 0o640
    assert fresh.read_text() == shared.read_text() == _export(place)


def test_a_web_timeline_page_is_written_as_an_export_is(
    place: dict[str, Path], tmp_path: Path
) -> None:
    """``web-timeline -o`` wrote its page with the umask and over anything: the database
    itself (every thread lost), and a directory was exit 1, not 2. It is now written as an
    export is: private, whole, never over Spindle's own files."""
    exported = tmp_path / "thread.jsonl"
    exported.write_text(_export(place))
    db = place["data"] / "spindle.db"
    before = db.read_bytes()
    out = spindle(place, "web-timeline", str(exported), "-o", str(db))
    assert out.returncode == 2
    assert f"Cannot write {db}: it is Spindle's database" in _one_clear_line(out.stderr)
    assert db.read_bytes() == before
    out = spindle(place, "web-timeline", str(exported), "-o", str(tmp_path))
    assert out.returncode == 2 and "it is a directory" in _one_clear_line(out.stderr)
    page = tmp_path / "page.html"
    assert spindle(place, "web-timeline", str(exported), "-o", str(page)).returncode == 0
    assert stat.S_IMODE(page.stat().st_mode) == 0o600
    assert page.read_text().startswith("<!doctype html>")


def test_dash_is_standard_output(place: dict[str, Path], tmp_path: Path) -> None:
    """``-o -`` wrote a file named "-" in the working directory."""
    exported = spindle(place, "log", "export", THREAD, "-o", "-")
    assert exported.returncode == 0 and exported.stdout == _export(place)
    source = tmp_path / "thread.jsonl"
    source.write_text(exported.stdout)
    page = spindle(place, "web-timeline", str(source), "-o", "-")
    assert page.returncode == 0 and page.stdout.startswith("<!doctype html>")
    assert not (place["work"] / "-").exists()


# --- standard output on a full disk ----------------------------------------------------------


def _dev_full() -> bool:
    try:
        return stat.S_ISCHR(os.stat("/dev/full").st_mode)
    except OSError:
        return False


@pytest.mark.parametrize("command", ["status", "replay", "web-timeline", "log export", "doctor"])
def test_stdout_on_a_full_disk_is_exit_5_with_one_line(
    place: dict[str, Path], tmp_path: Path, command: str
) -> None:
    assert _dev_full(), "/dev/full (Linux's always-full device) is missing or not a device"
    exported = tmp_path / "thread.jsonl"
    exported.write_text(_export(place))
    args = {
        "status": ["status"],
        "replay": ["replay", str(exported)],
        "web-timeline": ["web-timeline", str(exported)],
        "log export": ["log", "export", THREAD],
        "doctor": ["doctor"],
    }[command]
    with open("/dev/full", "w") as full:  # only written to: every write fails with ENOSPC
        out = subprocess.run(
            [*SPINDLE, *args],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            cwd=place["work"],
            env=environment(place),
            timeout=60,
        )
    assert out.returncode == 5, out.stderr
    assert _one_clear_line(out.stderr).splitlines() == [
        "Cannot write to standard output: No space left on device"
    ]


@pytest.mark.parametrize("command", ["status", "log export", "doctor"])
def test_stdout_closed_is_one_line(place: dict[str, Path], command: str) -> None:
    # `spindle status >&-`: Python has no sys.stdout (an AttributeError traceback before).
    args = {"status": ["status"], "log export": ["log", "export", THREAD], "doctor": ["doctor"]}
    out = subprocess.run(
        [*SPINDLE, *args[command]],
        stderr=subprocess.PIPE,
        text=True,
        cwd=place["work"],
        env=environment(place),
        timeout=60,
        preexec_fn=lambda: os.close(1),
    )
    assert out.returncode == 1, out.stderr
    assert _one_clear_line(out.stderr).splitlines() == [
        "Cannot write to standard output: it is closed."
    ]


def test_init_where_it_cannot_write_is_one_line(place: dict[str, Path], tmp_path: Path) -> None:
    folder = tmp_path / "folder"
    folder.mkdir()
    a_file = tmp_path / "file.toml"
    a_file.write_text("")
    cases = [
        (folder, 2, f"Cannot write {folder}: it is a directory; name a file."),
        (a_file / "sub.toml", 1, f"Cannot write {a_file / 'sub.toml'}: "),
    ]
    if _dev_full():
        cases.append((Path("/dev/full"), 5, "Cannot write /dev/full: No space left on device"))
    for path, code, says in cases:
        out = spindle(place, "init", "--config", str(path), "--force")
        assert out.returncode == code, out.stderr
        assert _one_clear_line(out.stderr).startswith(says), out.stderr
    assert a_file.read_text() == ""


def test_init_writes_a_private_file_and_never_through_a_link_to_nothing(
    place: dict[str, Path], tmp_path: Path
) -> None:
    fresh = tmp_path / "fresh" / "config.toml"
    out = spindle(place, "init", "--config", str(fresh))
    assert out.returncode == 0, out.stderr
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o600  # a token goes in it
    assert "[discord]" in fresh.read_text()
    # A link to nothing where the config goes (an agent can plant one): written through,
    # the user's tokens would end where the agent reads them.
    planted = tmp_path / "planted.toml"
    lure = tmp_path / "agent-reads-here.toml"
    planted.symlink_to(lure)
    out = spindle(place, "init", "--config", str(planted))
    assert out.returncode == 2, out.stderr
    assert _one_clear_line(out.stderr) == (
        f"{planted} is a symbolic link to {lure}, which does not exist "
        "(use --force to overwrite it).\n"
    )
    assert not lure.exists()


# --- replay and web-timeline inputs ----------------------------------------------------------


@pytest.mark.parametrize("expected", ["missing", "directory"])
def test_replay_check_against_a_missing_file_or_a_directory(
    place: dict[str, Path], tmp_path: Path, expected: str
) -> None:
    exported = tmp_path / "thread.jsonl"
    exported.write_text(_export(place))
    check = tmp_path / "expected.txt"
    if expected == "directory":
        check.mkdir()
    out = spindle(place, "replay", str(exported), "--check", str(check))
    assert out.returncode == 1
    reason = "Is a directory" if expected == "directory" else "No such file or directory"
    assert f"Cannot read {check}: {reason}" in _one_clear_line(out.stderr)


@pytest.mark.parametrize("command", ["replay", "web-timeline"])
def test_a_line_nested_too_deeply_is_named(
    place: dict[str, Path], tmp_path: Path, command: str
) -> None:
    deep = tmp_path / "deep.jsonl"
    deep.write_text("[" * 100_000 + "\n")
    out = spindle(place, command, str(deep))
    assert out.returncode == 1
    assert f"{deep}:1: JSON nested too deeply" in _one_clear_line(out.stderr)


def test_replay_prints_as_it_folds_and_stops_at_a_bad_line_naming_it(
    place: dict[str, Path], tmp_path: Path
) -> None:
    """``replay`` held its whole output until the end (~330 MB for a 100 MB file); it now
    prints as it folds, so a bad line further on stops it there: what came before is
    printed, the line is named, the exit is 1."""
    exported = _export(place).splitlines()
    whole = tmp_path / "thread.jsonl"
    whole.write_text("\n".join(exported) + "\n")
    full = spindle(place, "replay", str(whole))
    assert full.returncode == 0 and full.stdout
    cut = tmp_path / "cut.jsonl"
    last = len(exported)
    cut.write_text("\n".join([*exported, "{not json"]) + "\n")
    out = spindle(place, "replay", str(cut))
    assert out.returncode == 1
    assert f"Cannot replay {cut}: {cut}:{last + 1}: " in _one_clear_line(out.stderr)
    assert out.stdout == full.stdout  # every effect of the good lines, once


# --- run --workdir ---------------------------------------------------------------------------


@pytest.mark.parametrize("workdir", ["/tmp/a\x01b", "/" + "a" * 5000], ids=["control", "long"])
def test_run_refuses_a_workdir_that_cannot_be_one_before_starting(
    tmp_path: Path, workdir: str
) -> None:
    place = make_place(tmp_path)  # a fresh data dir: the first conversation is made at once
    out = spindle(place, "run", "--no-mcp", "--agent", "echo", "--workdir", workdir)
    assert out.returncode == 2
    err = _one_clear_line(out.stderr).splitlines()
    assert len(err) == 1 and err[0].startswith("--workdir: The workdir ")
    assert not place["data"].exists()  # refused before anything was created


# --- run on a log it cannot read -------------------------------------------------------------


def _seq_of_hello(db: Path) -> int:
    conn = sqlite3.connect(db)
    try:
        return conn.execute(
            "SELECT seq FROM actions WHERE thread_id=? AND action LIKE '%hello there%'",
            (THREAD,),
        ).fetchone()[0]
    finally:
        conn.close()


def test_run_on_a_row_that_is_not_utf8_exits_4_naming_thread_and_seq(
    place: dict[str, Path],
) -> None:
    db = place["data"] / "spindle.db"
    seq = _seq_of_hello(db)
    conn = sqlite3.connect(db)
    conn.execute(
        "UPDATE actions SET action=CAST(replace(action, 'hello', X'FFFE') AS TEXT) WHERE seq=?",
        (seq,),
    )
    conn.commit()
    conn.close()
    named = f"{db}: thread '{THREAD}', seq {seq}: its action is not valid UTF-8"
    run = spindle(place, "run", "--no-mcp", "--agent", "echo", stdin="hi\n/quit\n")
    assert run.returncode == 4, run.stderr
    assert named in _one_clear_line(run.stderr)
    for args in (["status"], ["log", "export", THREAD]):
        out = spindle(place, *args)
        assert out.returncode == 4 and named in _one_clear_line(out.stderr)
    doctor = spindle(place, "doctor")
    database = next(line for line in doctor.stdout.splitlines() if "database:" in line)
    assert database.startswith("FAIL") and named in database


def test_run_on_a_renamed_column_exits_4_naming_it(place: dict[str, Path]) -> None:
    db = place["data"] / "spindle.db"
    conn = sqlite3.connect(db)
    conn.execute("ALTER TABLE actions RENAME COLUMN kind TO kind2")
    conn.commit()
    conn.close()
    run = spindle(place, "run", "--no-mcp", "--agent", "echo", stdin="hi\n/quit\n")
    assert run.returncode == 4, run.stderr
    assert f"{db}: its actions table has no column 'kind'" in _one_clear_line(run.stderr)
