"""The small process between a managed process and its output files: it reads the
process's stdout and stderr pipes and writes them to files that never pass their cap.

Why a process of its own: a managed process cannot write its files itself (nothing would
cap them while it writes: ``yes`` wrote 1.4 GB in 20 s, an orphaned ``cat /dev/zero`` 70
GB), nor write into pipes read by Spindle (a pipe would die with Spindle and take the
process with it, SIGPIPE, and an orphan's output would be lost). This writer runs in its
own session, so it outlives Spindle exactly like the process does, and it ends by itself
when the last holder of the pipes' write ends (the process and its descendants) is gone.

The cap: each stream is at most two files, ``<path>`` (the one being written) and
``<path>.1`` (the one before), each at most ``limit`` bytes. When the next write would take
``<path>`` past ``limit``, it is renamed to ``<path>.1`` (replacing the older one) and a new
``<path>`` is started; a reader that kept the old file open, or knows its inode, finishes
it under its new name. A write that fails (disk full) is dropped, and the next write that
succeeds is preceded by a note saying how much was lost. Reads are at most 64 KiB, and a
full pipe blocks the writing process until this writer has caught up: memory stays
bounded however fast the process writes.

It is started by path with ``python -I -S`` (``supervisor.py``) and imports only the
standard library: it starts in milliseconds and holds a few megabytes.

Usage: ``output_writer.py LIMIT FD PATH [FD PATH ...]``: FD is the read end of a pipe,
PATH the file its output goes to (created by the caller; its content is kept).
"""

from __future__ import annotations

import os
import select
import signal
import sys

__all__ = ["READ_BYTES", "CappedFile", "main", "pump"]

READ_BYTES = 64 * 1024


class CappedFile:
    """One output file that never grows past ``limit`` bytes (see the module docstring)."""

    def __init__(self, path: str, limit: int) -> None:
        if limit <= 0:
            raise ValueError("limit must be positive")
        self.path = path
        self.limit = limit
        self.read_size = min(READ_BYTES, limit)  # so that one read always fits in a file
        self.fd = self._open()
        self.size = os.fstat(self.fd).st_size
        self.lost = 0  # bytes dropped since the last successful write
        self.lost_reason = ""

    def _open(self) -> int:
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC
        return os.open(self.path, flags, 0o600)

    def write(self, data: bytes) -> None:
        if self.lost:
            note = f"\n[spindle: {self.lost} bytes of output lost: {self.lost_reason}]\n"
            if not self._put(note.encode()):
                self.lost += len(data)
                return
            self.lost = 0
        if not self._put(data):
            self.lost += len(data)

    def _put(self, data: bytes) -> bool:
        try:
            if self.size + len(data) > self.limit:
                self._rotate()
            view = memoryview(data)[-self.limit :]
            while view:
                written = os.write(self.fd, view)
                self.size += written
                view = view[written:]
            return True
        except OSError as exc:
            self.lost_reason = exc.strerror or str(exc)
            return False

    def _rotate(self) -> None:
        try:
            os.replace(self.path, self.path + ".1")
            fresh = self._open()
        except OSError:
            # Cannot rename or create (read-only directory?): empty the file in place
            # instead; the cap holds either way.
            os.ftruncate(self.fd, 0)
        else:
            os.close(self.fd)
            self.fd = fresh
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
    if len(argv) < 3 or len(argv) % 2 == 0:
        print("usage: output_writer.py LIMIT FD PATH [FD PATH ...]", file=sys.stderr)
        return 2
    limit = int(argv[0])
    sources = {
        int(fd): CappedFile(path, limit) for fd, path in zip(argv[1::2], argv[2::2], strict=True)
    }
    pump(sources)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
