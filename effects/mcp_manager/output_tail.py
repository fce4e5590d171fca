"""One output stream of a managed process: the file its writer fills, tailed into a ring.

The process's output reaches its files through its own writer process
(``output_writer.py``), which keeps each stream to ``<path>`` plus the rotated
``<path>.1``. ``StreamTail`` reads what was appended since the last read, cuts it into whole
lines (``LineAssembler``), numbers each chunk from the process's ``SequenceCounter`` and
keeps *marks* ``(seq, file offset)`` for the newest chunks; the marks are persisted, so
after a restart the text read before gets its old numbers back.

Bounds, whatever the process writes: one read takes at most ``max_read_bytes``; when more
than that is waiting, the older part is skipped unread (the ring could not have kept it
anyway) and the ring gets a note saying how much (``SKIP_NOTE``). A file is known by its
inode: when the writer has rotated it, the rest of the old one is read under its new name
``<path>.1`` before the new file is started; when that is gone too (rotated twice between
two reads), the loss is noted. Every read is therefore a few hundred kilobytes at most, fast
enough for the trio thread (a page-cache read), and nothing reads the files on the way to
``/status``.
"""

from __future__ import annotations

import collections
import os
import time
from collections.abc import Sequence
from typing import BinaryIO

from .ring_buffer import LineAssembler, OutputRing, SequenceCounter

__all__ = ["MAX_MARKS", "SKIP_NOTE", "SKIP_NOTE_UNKNOWN", "StreamTail"]

MAX_MARKS = 128  # chunk marks kept (and persisted) per stream
SKIP_NOTE = "[spindle: {skipped} bytes of output skipped: written faster than read]\n"
SKIP_NOTE_UNKNOWN = "[spindle: output skipped: written faster than read]\n"


class StreamTail:
    """One output stream of a process: its file, what of it was read, its ring, and marks.

    A mark ``(seq, offset)`` says the chunk numbered ``seq`` ends at byte ``offset`` of the
    file (the one with inode ``inode``). The newest marks are persisted, so after a restart
    the text read before it gets its old numbers back: a caller's ``since_seq`` still means
    the same thing. ``inode`` 0 means not known yet: the file found at ``path`` is taken."""

    def __init__(
        self,
        path: str,
        offset: int,
        ring: OutputRing,
        marks: Sequence[tuple[int, int]],
        *,
        inode: int = 0,
        max_read_bytes: int = 256 * 1024,
        max_line_bytes: int = 64 * 1024,
    ) -> None:
        self.path = path
        self.offset = offset  # bytes read from the file
        self.inode = inode
        self.max_read_bytes = max_read_bytes
        self.assembler = LineAssembler(max_line_bytes=max_line_bytes)
        self.ring = ring
        self.marks: collections.deque[tuple[int, int]] = collections.deque(marks, MAX_MARKS)
        self.skipped_bytes = 0
        self._lost_unknown = False  # our file vanished while no Spindle was reading it

    @property
    def delivered(self) -> int:
        """Bytes of the file that are in the ring (a partial line held back is not)."""
        return max(0, self.offset - self.assembler.pending_bytes)

    def _append(self, seq: SequenceCounter, text: str) -> bool:
        if not text:
            return False
        number = seq.next()
        self.ring.append(number, text)
        self.marks.append((number, self.delivered))
        return True

    def _skip(self, seq: SequenceCounter, skipped: int | None) -> bool:
        """Record output that will never be read, with a note in the ring."""
        held = self.assembler.discard()
        if skipped is None:
            note = SKIP_NOTE_UNKNOWN
        else:
            skipped += held
            self.skipped_bytes += skipped
            note = SKIP_NOTE.format(skipped=skipped)
        self._append(seq, note)
        self.ring.note_skipped(seq.value, 1 if skipped is None else skipped)
        return True

    def _open_ours(self, path: str) -> BinaryIO | None:
        """``path`` opened when it is the file we are reading (same inode), else None."""
        try:
            f = open(path, "rb")  # noqa: SIM115 (closed by the caller)
        except (FileNotFoundError, NotADirectoryError):
            return None
        if os.fstat(f.fileno()).st_ino != self.inode:
            f.close()
            return None
        return f

    def _read_from(self, f: BinaryIO, seq: SequenceCounter) -> bool:
        appended = False
        size = os.fstat(f.fileno()).st_size
        if size < self.offset:  # emptied (in place, by a writer that could not rotate)
            self.offset = 0
            self.marks.clear()
        waiting = size - self.offset
        if waiting > self.max_read_bytes:
            self.offset += waiting - self.max_read_bytes
            appended = self._skip(seq, waiting - self.max_read_bytes)
            waiting = self.max_read_bytes
        f.seek(self.offset)
        data = f.read(waiting)
        self.offset += len(data)
        return self._append(seq, self.assembler.feed(data, time.monotonic())) or appended

    def read_new(self, seq: SequenceCounter) -> bool:
        """Read what was appended (at most ``max_read_bytes`` from each file); True when the
        ring got something."""
        try:
            current = os.stat(self.path).st_ino
        except (FileNotFoundError, NotADirectoryError):
            return False  # not created yet, forgotten, or between rename and re-creation
        appended = False
        if self._lost_unknown:
            self._lost_unknown = False
            appended = self._skip(seq, None)
        if self.inode == 0:
            self.inode = current
        if current != self.inode:
            # Rotated by the writer: finish our file under its new name, then the new one.
            old = self._open_ours(self.path + ".1")
            if old is None:
                appended = self._skip(seq, None)
            else:
                with old:
                    appended = self._read_from(old, seq) or appended
            self.inode, self.offset = current, 0
            self.marks.clear()
        f = self._open_ours(self.path)
        if f is None:
            return appended  # rotated again just now: the next read takes it
        with f:
            return self._read_from(f, seq) or appended

    def flush(self, seq: SequenceCounter) -> bool:
        return self._append(seq, self.assembler.flush())

    def restore(self, max_bytes: int, fallback_seq: int) -> None:
        """Put the text read before a restart back in the ring, under its old numbers."""
        if self.inode == 0:  # saved by a Spindle that did not record it: the file there
            try:
                self.inode = os.stat(self.path).st_ino
            except (FileNotFoundError, NotADirectoryError):
                pass
        f = self._open_ours(self.path) or self._open_ours(self.path + ".1")
        if f is None:
            if self.offset or self.marks:
                self._lost_unknown = True  # rotated away while no Spindle was reading
            self.inode, self.offset = 0, 0
            self.marks.clear()
            return
        with f:
            size = os.fstat(f.fileno()).st_size
            if size < self.offset:
                self.offset = 0
                self.marks.clear()
                return
            start = max(0, self.offset - max_bytes)
            f.seek(start)
            data = f.read(self.offset - start)
        done = start
        for number, end in self.marks:
            if done < end <= self.offset:
                # Text older than the oldest kept mark shares its number: served again
                # rather than skipped.
                self.ring.append(
                    number, data[done - start : end - start].decode("utf-8", "replace")
                )
                done = end
        if done < self.offset:
            self.ring.append(fallback_seq, data[done - start :].decode("utf-8", "replace"))
