"""The small process between a managed process and its output files: it reads the
process's stdout and stderr pipes and writes them to files that never pass their cap.

Why a process of its own: a managed process cannot write its files itself (nothing would
cap them while it writes: ``yes`` wrote 1.4 GB in 20 s, an orphaned ``cat /dev/zero`` 70
GB), nor write into pipes read by Spindle (a pipe would die with Spindle and take the
process with it, SIGPIPE, and an orphan's output would be lost). This writer runs in its
own session, so it outlives Spindle exactly like the process does, and it ends by itself
when the last holder of the pipes' write ends (the process and its descendants) is gone.

The cap: a stream is written to numbered files ``<base>.<n>.log`` (``generation_path``),
at most ``limit`` bytes each. When the next write would take file ``n`` past ``limit``, file
``n + 1`` is started and file ``n - 1`` deleted: at most two files, ``2 * limit`` bytes, are
on disk per stream. A name is never used twice, so a reader knows by the name alone which
file it is reading and that a file ``n + 1`` means ``n`` is complete (an inode number would
not do: a deleted file's number is soon given to a new one). A write that fails (disk full)
is dropped, and the next write that succeeds is preceded by a note saying how much was
lost. Reads are at most 64 KiB, and a full pipe blocks the writing process until this
writer has caught up: memory stays bounded however fast the process writes.

It is started by path with ``python -I -S`` (``supervisor.py``) and imports only the
standard library: it starts in milliseconds and holds a few megabytes.

Usage: ``output_writer.py LIMIT FD BASE [FD BASE ...]``: FD is the read end of a pipe, BASE
names the files its output goes to.
"""

from __future__ import annotations

import os
import select
import signal
import sys

__all__ = ["READ_BYTES", "CappedFile", "generation_path", "main", "pump"]

READ_BYTES = 64 * 1024
# Room kept in a file for the note of lost output that may come before a read (its reason
# is cut to fit): with a read as large as the file, the note's head was cut off.
NOTE_ROOM = 160


def generation_path(base: str, generation: int) -> str:
    """The file holding generation ``generation`` of the stream named ``base``."""
    return f"{base}.{generation}.log"


class CappedFile:
    """One output stream in files that never grow past ``limit`` bytes (see the module
    docstring)."""

    def __init__(self, base: str, limit: int) -> None:
        if limit <= 0:
            raise ValueError("limit must be positive")
        self.base = base
        self.limit = limit
        # So that one read, and the note that may come with it, always fit in a file (a file
        # too small to keep the room reads as much as it holds: a note's head may be cut).
        room = NOTE_ROOM if limit >= 4 * NOTE_ROOM else 0
        self.read_size = min(READ_BYTES, limit - room)
        self.generation = 0
        self.fd = self._open(0, truncate=False)
        self.size = os.fstat(self.fd).st_size
        self.lost = 0  # bytes dropped since the last successful write
        self.lost_reason = ""

    def _open(self, generation: int, *, truncate: bool) -> int:
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC
        if truncate:
            flags |= os.O_TRUNC
        return os.open(generation_path(self.base, generation), flags, 0o600)

    def write(self, data: bytes) -> None:
        note = b""
        if self.lost:
            reason = self.lost_reason[:80]
            note = f"\n[spindle: {self.lost} bytes of output lost: {reason}]\n".encode()
        unwritten = self._put(note + data)
        # A note that could not be written is not output lost: only this read's bytes count
        # (each failed write's note was counted with them, the count grew by ~50 a failure).
        self.lost = self.lost + min(unwritten, len(data)) if unwritten else 0

    def _put(self, data: bytes) -> int:
        """Write ``data``; the number of its bytes that could not be written."""
        view = memoryview(data)[-self.limit :]
        try:
            if self.size + len(view) > self.limit:
                self._rotate()
            while view:
                written = os.write(self.fd, view)
                self.size += written
                view = view[written:]
        except OSError as exc:
            self.lost_reason = exc.strerror or str(exc)
        return len(view)

    def _rotate(self) -> None:
        try:
            fresh = self._open(self.generation + 1, truncate=True)
        except OSError:
            # Cannot create a file (read-only directory?): empty this one in place instead;
            # the cap holds either way.
            os.ftruncate(self.fd, 0)
        else:
            os.close(self.fd)
            self.fd = fresh
            self.generation += 1
            try:
                os.unlink(generation_path(self.base, self.generation - 2))
            except FileNotFoundError:
                pass
        self.size = 0

    def close(self) -> None:
        os.close(self.fd)


def pump(sources: dict[int, CappedFile]) -> None:
    """Copy each pipe into its file until every pipe is at its end."""
    poller = select.poll()
    for fd in sources:
        poller.register(fd, select.POLLIN)
    while sources:
        for fd, _ in poller.poll():
            target = sources.get(fd)
            if target is None:
                continue
            data = os.read(fd, target.read_size)
            if data:
                target.write(data)
            else:  # every writer closed it
                poller.unregister(fd)
                os.close(fd)
                target.close()
                del sources[fd]


def main(argv: list[str]) -> int:
    # Its own session already keeps terminal signals away; a hang-up of whatever started
    # Spindle must not end it either (the process it serves would get SIGPIPE).
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # A file-size limit inherited from Spindle's caller: a failed write (noted), not death.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    if len(argv) < 3 or len(argv) % 2 == 0:
        print("usage: output_writer.py LIMIT FD BASE [FD BASE ...]", file=sys.stderr)
        return 2
    limit = int(argv[0])
    sources = {
        int(fd): CappedFile(base, limit) for fd, base in zip(argv[1::2], argv[2::2], strict=True)
    }
    pump(sources)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
