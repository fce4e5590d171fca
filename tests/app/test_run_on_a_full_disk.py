"""``spindle run`` on a disk that fills up, and on a read-only one (issue 19.6).

The data dir is on a real 2 MiB tmpfs mounted in a private mount namespace
(``disk_harness.SmallDisk``): filling it is a real ENOSPC for SQLite and the JSON log file,
remounting it read-only a real EROFS. Spindle used to exit 1 with a traceback when the disk
filled up (a failed ROLLBACK hid the real error), printed 179 lines of tracebacks when
restarted on the full disk, and a logging traceback on a read-only one, where ``spindle
status`` failed as well.
"""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_harness import SPINDLE, environment, lines, make_place
from disk_harness import SmallDisk

THREAD = "console:main"
FULL = "⚠ Spindle cannot save anything right now: the disk is full"


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[SmallDisk]:
    small = SmallDisk(tmp_path / "disk", size_kib=2048)
    try:
        yield small
    finally:
        small.close()


@pytest.fixture
def place(tmp_path: Path, disk: SmallDisk) -> dict[str, Path]:
    place = make_place(tmp_path / "place")
    place["data"] = disk.path / "data"
    return place


def spindle_in(disk: SmallDisk, place: dict[str, Path], *args: str, stdin: str = ""):
    return disk.run(
        [*SPINDLE, *args],
        cwd=place["work"],
        input=stdin,
        env=environment(place),
        timeout=60,
    )


def logged_prompts(disk: SmallDisk, place: dict[str, Path], tmp_path: Path) -> list[str]:
    """The prompts in the log, read from a copy (SQLite cannot open a file through
    /proc/<pid>/root: it resolves the link to the host's own root)."""
    copy = tmp_path / "copy"
    copy.mkdir(exist_ok=True)
    for name in ("spindle.db", "spindle.db-wal"):
        source = disk.outside(place["data"] / name)
        if source.exists():
            shutil.copy(source, copy / name)
    conn = sqlite3.connect(copy / "spindle.db")
    try:
        rows = conn.execute(
            "SELECT json_extract(action, '$.text') FROM actions "
            "WHERE kind IN ('user_message', 'queue_command') ORDER BY seq"
        )
        return [text for (text,) in rows]
    finally:
        conn.close()


class Console:
    """``spindle run`` in the namespace, fed line by line, its output gathered as it comes."""

    def __init__(self, disk: SmallDisk, place: dict[str, Path]) -> None:
        self.proc = disk.popen(
            [*SPINDLE, "run", "--no-mcp", "--agent", "echo"],
            cwd=place["work"],
            env=environment(place),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.out: list[str] = []
        self.err: list[str] = []
        for stream, sink in ((self.proc.stdout, self.out), (self.proc.stderr, self.err)):
            threading.Thread(target=self._gather, args=(stream, sink), daemon=True).start()

    @staticmethod
    def _gather(stream, sink: list[str]) -> None:
        for line in stream:
            sink.append(line)

    def say(self, text: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(text + "\n")
        self.proc.stdin.flush()

    def wait_for(self, text: str, count: int = 1, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if "".join(self.out).count(text) >= count:
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        self.proc.kill()
        pytest.fail(f"no {text!r} (x{count}) in:\n{''.join(self.out)}\n{''.join(self.err)}")

    def quit(self) -> int:
        self.say("/quit")
        return self.proc.wait(timeout=60)


def test_a_disk_filling_up_mid_run_refuses_prompts_keeps_reads_and_recovers_by_itself(
    disk: SmallDisk, place: dict[str, Path], tmp_path: Path
) -> None:
    chat = Console(disk, place)
    chat.say("hello before")
    chat.wait_for("echo (demo agent)")
    disk.fill()
    # The prompt that meets the full disk: held in memory, the thread told at once.
    chat.say("held while full")
    chat.wait_for(FULL)
    # Prompts sent while it is full are refused with a message, nothing hangs.
    chat.say("refused while full")
    chat.wait_for("Not accepted. " + FULL)
    # Reads still work: /status in the chat, and `spindle status` beside it.
    chat.say("/status")
    chat.wait_for("Queue: 0/50")
    status = spindle_in(disk, place, "status")
    assert status.returncode == 0, status.stderr
    assert THREAD in status.stdout
    assert "held while full" not in "".join(chat.out)  # its answer waits for the disk
    disk.free()
    # It recovers by itself, tells the thread, and the held prompt runs.
    chat.wait_for("✅ Spindle can save again")
    chat.wait_for("echo (demo agent)", count=2)
    assert "held while full" in "".join(chat.out)
    chat.say("after space is back")
    chat.wait_for("echo (demo agent)", count=3)
    assert chat.quit() == 0, "".join(chat.err)
    err = "".join(chat.err)
    assert "Traceback" not in err
    assert logged_prompts(disk, place, tmp_path) == [
        "hello before",
        "held while full",
        "after space is back",
    ]


def test_quitting_while_full_is_one_clear_line_and_keeps_what_was_acknowledged(
    disk: SmallDisk, place: dict[str, Path], tmp_path: Path
) -> None:
    first = spindle_in(
        disk,
        place,
        "run",
        "--no-mcp",
        "--agent",
        "echo",
        stdin=lines("hello before", "/wait", "/quit"),
    )
    assert first.returncode == 0, first.stderr
    chat = Console(disk, place)
    chat.say("/status")
    chat.wait_for("Queue: 0/50")
    disk.fill()
    chat.say("sent while full")
    chat.wait_for(FULL)
    assert chat.quit() == 5
    err = "".join(chat.err).strip().splitlines()
    assert not [line for line in err if "Traceback" in line]
    assert err[-1].startswith(
        f"Stopped while {place['data'] / 'spindle.db'} cannot be written (the disk is full): "
    )
    assert err[-1].endswith(
        "action(s) recorded since then were not saved. Nothing that was shown or "
        "acknowledged is among them."
    )
    disk.free()
    after = spindle_in(
        disk, place, "run", "--no-mcp", "--agent", "echo", stdin=lines("later", "/wait", "/quit")
    )
    assert after.returncode == 0, after.stderr
    # "sent while full" was never acknowledged: the thread was told it is held, not saved.
    assert logged_prompts(disk, place, tmp_path) == ["hello before", "later"]


def test_restarting_on_a_full_disk_is_one_clear_line(
    disk: SmallDisk, place: dict[str, Path], tmp_path: Path
) -> None:
    first = spindle_in(
        disk,
        place,
        "run",
        "--no-mcp",
        "--agent",
        "echo",
        stdin=lines("hello before", "/queue kept", "/quit"),
    )
    assert first.returncode == 0, first.stderr
    disk.fill()
    again = spindle_in(disk, place, "run", "--no-mcp", "--agent", "echo", stdin="/quit\n")
    assert again.returncode == 5
    assert again.stderr.strip().splitlines() == [
        f"Cannot start: cannot write the event log {place['data'] / 'spindle.db'}: the disk "
        "is full. Free some space or make it writable, then start again; nothing that was "
        "saved is lost."
    ]
    assert again.stdout == ""
    status = spindle_in(disk, place, "status")
    assert status.returncode == 0 and THREAD in status.stdout
    assert logged_prompts(disk, place, tmp_path) == ["hello before", "kept"]


def test_a_read_only_data_dir_is_one_line_and_status_still_works(
    disk: SmallDisk, place: dict[str, Path]
) -> None:
    first = spindle_in(
        disk,
        place,
        "run",
        "--no-mcp",
        "--agent",
        "echo",
        stdin=lines("hello", "/queue kept for later", "/quit"),
    )
    assert first.returncode == 0, first.stderr
    disk.remount("ro")
    run = spindle_in(disk, place, "run", "--no-mcp", "--agent", "echo", stdin="/quit\n")
    assert run.returncode == 5
    [line] = run.stderr.strip().splitlines()
    assert line.startswith(
        f"Cannot start: cannot write the event log {place['data'] / 'spindle.db'}: "
        "the file system is read-only"
    )
    status = spindle_in(disk, place, "status")
    assert status.returncode == 0, status.stderr
    assert THREAD in status.stdout and status.stderr == ""
    export = spindle_in(disk, place, "log", "export", THREAD)
    assert export.returncode == 0 and "kept for later" in export.stdout
    doctor = spindle_in(disk, place, "doctor")
    rows = {line.split(":")[0].split(None, 1)[1]: line for line in doctor.stdout.splitlines()}
    assert rows["data directory"].startswith("FAIL") and "Read-only" in rows["data directory"]
    assert rows["database"].startswith("OK")
    assert doctor.returncode == 3


def test_the_harness_really_fills_the_disk(disk: SmallDisk) -> None:
    disk.fill()
    probe = disk.run([sys.executable, "-c", f"open('{disk.path}/x', 'w').write('y' * 8192)"])
    assert "No space left on device" in probe.stderr
