"""The output writer process (``output_writer.py``) on its own: real pipes, real processes.
Its files stay within their cap however fast the other end writes, the newest output is
always on disk, it ends when the writing side is gone, and a failed write is noted."""

from __future__ import annotations

import array
import errno
import fcntl
import os
import resource
import signal
import subprocess
import sys
import termios
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from threadspindle.effects.mcp_manager import output_writer
from threadspindle.effects.mcp_manager.output_writer import CappedFile, generation_path


def _files(base: Path) -> list[Path]:
    """The stream's files on disk, oldest first."""
    found = sorted(base.parent.glob(f"{base.name}.*.log"), key=lambda p: int(p.suffixes[-2][1:]))
    return found


def _on_disk(base: Path) -> bytes:
    return b"".join(p.read_bytes() for p in _files(base))


def _start_writer(limit: int, base: Path, **popen: object) -> tuple[subprocess.Popen, int]:
    """The writer as the supervisor starts it; returns it and the pipe's write end."""
    read_end, write_end = os.pipe()
    writer = subprocess.Popen(
        [sys.executable, "-I", "-S", output_writer.__file__, str(limit), str(read_end), str(base)],
        pass_fds=(read_end,),
        start_new_session=True,
        env={},
        **popen,  # type: ignore[arg-type]
    )
    os.close(read_end)
    return writer, write_end


def test_yes_for_two_seconds_never_passes_the_cap(tmp_path: Path) -> None:
    base, limit = tmp_path / "out", 256 * 1024
    writer, write_end = _start_writer(limit, base)
    yes = subprocess.Popen(["yes"], stdout=write_end)
    os.close(write_end)
    largest_file = most_files = 0
    try:
        end = time.monotonic() + 2.0
        while time.monotonic() < end:
            files = _files(base)
            most_files = max(most_files, len(files))
            for p in files:
                try:
                    largest_file = max(largest_file, p.stat().st_size)
                except FileNotFoundError:
                    pass  # deleted by a rotation since the listing
            time.sleep(0.01)
    finally:
        yes.kill()
        yes.wait()
    assert writer.wait(timeout=10) == 0  # it ends with the last writer of its pipe
    assert largest_file <= limit
    assert most_files <= 3  # two, and for an instant the next one before the oldest goes
    files = _files(base)
    assert len(files) == 2 and int(files[-1].suffixes[-2][1:]) > 2  # it did rotate, often
    assert _on_disk(base).strip(b"y\n") == b""  # nothing but yes's output


def test_the_newest_output_is_kept_across_rotations(tmp_path: Path) -> None:
    base, limit = tmp_path / "out", 1000
    target = CappedFile(str(base), limit)
    written = b"".join(b"%05d\n" % i for i in range(2000))  # 12 000 bytes, in 300-byte writes
    for i in range(0, len(written), 300):
        target.write(written[i : i + 300])
        assert all(p.stat().st_size <= limit for p in _files(base))
        assert len(_files(base)) <= 2
    target.close()
    on_disk = _on_disk(base)
    assert written.endswith(on_disk) and len(on_disk) > limit
    assert Path(generation_path(str(base), target.generation)).exists()


def _drained(write_end: int) -> bool:
    """Nothing waits in the pipe (``FIONREAD`` answers for either end of a pipe)."""
    waiting = array.array("i", [0])
    fcntl.ioctl(write_end, termios.FIONREAD, waiting)
    return waiting[0] == 0


def _until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 20
    while not check():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.005)


def test_a_failed_write_is_dropped_and_noted_when_writing_works_again(tmp_path: Path) -> None:
    base = tmp_path / "out"
    first = base.parent / f"{base.name}.0.log"

    def small_files() -> None:  # files past 100 kB cannot be written: EFBIG, like a full disk
        resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, 100_000))

    writer, write_end = _start_writer(150_000, base, preexec_fn=small_files)
    chunk = b"x" * 999 + b"\n"
    # What the writer reads together depends on how far behind it is: the writer is stopped
    # while the pipe is filled, so each step is read as the test means it, on any machine.
    for _ in range(100):  # 100 kB: the file is full
        os.write(write_end, chunk)
    _until(lambda: first.exists() and first.stat().st_size == 100_000, "the file full")
    for _ in range(3):  # 30 kB more in three reads: they fit the cap, not the disk (EFBIG)
        os.kill(writer.pid, signal.SIGSTOP)
        for _ in range(10):
            os.write(write_end, chunk)
        os.kill(writer.pid, signal.SIGCONT)
        _until(lambda: _drained(write_end), "10 kB read")
    os.kill(writer.pid, signal.SIGSTOP)
    after = b"after\n" * 10_000  # 60 kB, read at once: past the cap, so a new file
    os.write(write_end, after)
    os.kill(writer.pid, signal.SIGCONT)
    os.close(write_end)
    assert writer.wait(timeout=10) == 0
    # Every byte that could not be written is counted once, and the note comes first in the
    # new file, before the newest output.
    note = b"\n[spindle: 30000 bytes of output lost: File too large]\n"
    assert _on_disk(base) == chunk * 100 + note + after
    assert all(p.stat().st_size <= 100_000 for p in _files(base))


def test_it_ignores_hangups_and_interrupts(tmp_path: Path) -> None:
    base = tmp_path / "out"
    writer, write_end = _start_writer(10_000, base)
    time.sleep(0.3)  # its signal handlers are set up
    writer.send_signal(signal.SIGHUP)
    writer.send_signal(signal.SIGINT)
    os.write(write_end, b"still here\n")
    os.close(write_end)
    assert writer.wait(timeout=10) == 0
    assert _on_disk(base) == b"still here\n"


def test_a_note_of_lost_output_is_whole_when_a_read_fills_a_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A read may be as large as the writer reads: the note that comes before it must fit
    # too (with a read the size of the file, the note's head was cut off).
    base = tmp_path / "out"
    target = CappedFile(str(base), 2048)
    first = b"a" * target.read_size
    target.write(first)
    real_write = os.write

    def full_disk(fd: int, data: bytes) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC) + " (and a long explanation)" * 9)

    monkeypatch.setattr(output_writer.os, "write", full_disk)
    target.write(b"b" * target.read_size)
    monkeypatch.setattr(output_writer.os, "write", real_write)
    last = b"c" * target.read_size
    target.write(last)
    target.close()
    on_disk = _on_disk(base)
    assert on_disk.endswith(last)
    assert on_disk.startswith(first)
    note = on_disk[len(first) : -len(last)]
    assert note.startswith(f"\n[spindle: {target.read_size} bytes of output lost: ".encode())
    assert note.endswith(b"]\n") and len(note) <= output_writer.NOTE_ROOM
    assert all(p.stat().st_size <= 2048 for p in _files(base))
