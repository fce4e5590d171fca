"""The output writer process (``output_writer.py``) on its own: real pipes, real processes.
Its files stay within their cap however fast the other end writes, the newest output is
always on disk, it ends when the writing side is gone, and a failed write is noted."""

from __future__ import annotations

import os
import re
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

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


def test_a_failed_write_is_dropped_and_noted_when_writing_works_again(tmp_path: Path) -> None:
    base = tmp_path / "out"

    def small_files() -> None:  # files past 100 kB cannot be written: EFBIG, like a full disk
        resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, 100_000))

    writer, write_end = _start_writer(150_000, base, preexec_fn=small_files)
    chunk = b"x" * 999 + b"\n"
    for _ in range(130):  # 130 kB: the last 30 kB cannot be written
        os.write(write_end, chunk)
        time.sleep(0.0005)
    os.write(write_end, b"after\n" * 10_000)  # takes the file past its cap: a new file
    os.close(write_end)
    assert writer.wait(timeout=10) == 0
    on_disk = _on_disk(base)
    # The dropped read may have taken the first "after" lines with it (under load a read
    # holds more), so what follows the note is a tail of the "after" lines.
    note = re.search(rb"\[spindle: (\d+) bytes of output lost: File too large\]\n", on_disk)
    assert note is not None and int(note.group(1)) > 0
    assert (b"after\n" * 10_000).endswith(on_disk[note.end() :])
    assert on_disk.endswith(b"after\n")
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
