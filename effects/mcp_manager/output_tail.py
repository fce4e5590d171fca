"""One output stream of a managed process: the file it writes to, tailed into a ring.

The process writes its stdout/stderr into files (``O_APPEND``), never pipes, so its output
outlives Spindle. ``StreamTail`` reads what was appended since the last read, cuts it into
whole lines (``LineAssembler``), numbers each chunk from the process's ``SequenceCounter``
and keeps *marks* ``(seq, file offset)`` for the newest chunks; the marks are persisted, so
after a restart the text read before gets its old numbers back. A file past
``max_log_bytes`` is emptied (the writer's ``O_APPEND`` puts its next write at the new end).
"""

from __future__ import annotations

import collections
import os
import time
from collections.abc import Sequence

from .ring_buffer import LineAssembler, OutputRing, SequenceCounter

__all__ = ["MAX_MARKS", "StreamTail"]

MAX_MARKS = 128  # chunk marks kept (and persisted) per stream


class StreamTail:
    """One output stream of a process: its file, what of it was read, its ring, and marks.

    A mark ``(seq, offset)`` says the chunk numbered ``seq`` ends at byte ``offset`` of the
    file. The newest marks are persisted, so after a restart the text read before it gets its
    old numbers back: a caller's ``since_seq`` still means the same thing."""

    def __init__(
        self, path: str, offset: int, ring: OutputRing, marks: Sequence[tuple[int, int]]
    ) -> None:
        self.path = path
        self.offset = offset  # bytes read from the file
        self.assembler = LineAssembler()
        self.ring = ring
        self.marks: collections.deque[tuple[int, int]] = collections.deque(marks, MAX_MARKS)

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

    def read_new(self, seq: SequenceCounter, max_log_bytes: int) -> bool:
        """Read what was appended to the file; True when the ring got something."""
        try:
            with open(self.path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if size < self.offset:  # emptied (by us, past max_log_bytes)
                    self.offset = 0
                    self.marks.clear()
                f.seek(self.offset)
                data = f.read(max(0, size - self.offset))
        except FileNotFoundError:
            return False
        self.offset += len(data)
        appended = self._append(seq, self.assembler.feed(data, time.monotonic()))
        if self.offset > max_log_bytes:
            # The writer has O_APPEND: after the truncation it writes at the new end.
            os.truncate(self.path, 0)
            self.offset = 0
            self.marks.clear()
        return appended

    def flush(self, seq: SequenceCounter) -> bool:
        return self._append(seq, self.assembler.flush())

    def restore(self, max_bytes: int, fallback_seq: int) -> None:
        """Put the text read before a restart back in the ring, under its old numbers."""
        try:
            with open(self.path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if size < self.offset:
                    self.offset = 0
                    self.marks.clear()
                    return
                start = max(0, self.offset - max_bytes)
                f.seek(start)
                data = f.read(self.offset - start)
        except FileNotFoundError:
            self.offset = 0
            self.marks.clear()
            return
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
