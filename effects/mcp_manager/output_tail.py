"""One output stream of a managed process: the files its writer fills, tailed into a ring.

The process's output reaches its files through its own writer process
(``output_writer.py``), which writes a stream to numbered files ``<base>.<n>.log``, at most
two of them at a time. ``StreamTail`` reads what was appended since the last read, cuts it
into whole lines (``LineAssembler``), numbers each chunk from the process's
``SequenceCounter`` and keeps *marks* ``(seq, file offset)`` for the newest chunks; the marks
are persisted, so after a restart the text read before gets its old numbers back.

Bounds, whatever the process writes: one read takes at most ``max_read_bytes`` from a file;
when more than that is waiting, the older part is skipped unread (the ring could not have
kept it anyway) and the ring gets a note saying how much (``SKIP_NOTE``). When file ``n + 1``
exists, file ``n`` is complete: its rest is read and the tail moves on. When file ``n`` is
gone (the writer went two files further between two reads), the loss is noted
(``SKIP_NOTE_UNKNOWN``) and the oldest file left is read. Every read is therefore a few
hundred kilobytes at most, fast enough for the trio thread (a page-cache read), and
nothing reads the files on the way to ``/status``.
"""

from __future__ import annotations

import collections
import os
import time
from collections.abc import Sequence
from typing import BinaryIO

from .output_writer import generation_path
from .ring_buffer import LineAssembler, OutputRing, SequenceCounter

__all__ = ["MAX_MARKS", "SKIP_NOTE", "SKIP_NOTE_UNKNOWN", "StreamTail", "output_files"]

MAX_MARKS = 128  # chunk marks kept (and persisted) per stream
SKIP_NOTE = "[spindle: {skipped} bytes of output skipped: written faster than read]\n"
SKIP_NOTE_UNKNOWN = "[spindle: output skipped: written faster than read]\n"
_MOVES_PER_READ = 3  # files moved through in one read_new; the next read goes on


def output_files(base: str) -> dict[int, str]:
    """The files of the stream named ``base`` that exist now, by generation."""
    folder, prefix = os.path.split(base)
    prefix += "."
    found: dict[int, str] = {}
    try:
        names = os.listdir(folder)
    except (FileNotFoundError, NotADirectoryError):
        return found
    for name in names:
        if name.startswith(prefix) and name.endswith(".log"):
            number = name[len(prefix) : -len(".log")]
            if number.isascii() and number.isdigit():
                found[int(number)] = os.path.join(folder, name)
    return found


class StreamTail:
    """One output stream of a process: its files, what of them was read, its ring, and
    marks.

    A mark ``(seq, offset)`` says the chunk numbered ``seq`` ends at byte ``offset`` of file
    ``generation``. The newest marks are persisted, so after a restart the text read before
    it gets its old numbers back: a caller's ``since_seq`` still means the same thing."""

    def __init__(
        self,
        base: str,
        offset: int,
        ring: OutputRing,
        marks: Sequence[tuple[int, int]],
        *,
        generation: int = 0,
        max_read_bytes: int = 256 * 1024,
        max_line_bytes: int = 64 * 1024,
    ) -> None:
        self.base = base
        self.generation = generation  # the file being read
        self.offset = offset  # bytes read from it
        self.max_read_bytes = max_read_bytes
        self.assembler = LineAssembler(max_line_bytes=max_line_bytes)
        self.ring = ring
        self.marks: collections.deque[tuple[int, int]] = collections.deque(marks, MAX_MARKS)
        self.skipped_bytes = 0

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

    def _move_to(self, generation: int) -> None:
        self.generation, self.offset = generation, 0
        self.marks.clear()

    def _open(self, generation: int) -> BinaryIO | None:
        try:
            return open(generation_path(self.base, generation), "rb")
        except (FileNotFoundError, NotADirectoryError):
            return None

    def _read_from(self, f: BinaryIO, seq: SequenceCounter) -> bool:
        appended = False
        size = os.fstat(f.fileno()).st_size
        if size < self.offset:  # emptied in place (by a writer that could not rotate)
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
        appended = False
        for _ in range(_MOVES_PER_READ):
            # Looked at before reading: when the next file exists, this one is complete.
            complete = os.path.exists(generation_path(self.base, self.generation + 1))
            f = self._open(self.generation)
            if f is None:
                later = sorted(g for g in output_files(self.base) if g > self.generation)
                if not later:
                    return appended  # nothing written yet
                appended = self._skip(seq, None)
                self._move_to(later[0])
                continue
            with f:
                appended = self._read_from(f, seq) or appended
            if not complete:
                return appended
            self._move_to(self.generation + 1)
        return appended

    def flush(self, seq: SequenceCounter) -> bool:
        return self._append(seq, self.assembler.flush())

    def restore(self, max_bytes: int, fallback_seq: int) -> None:
        """Put the text read before a restart back in the ring, under its old numbers (when
        its file is gone, the next ``read_new`` notes the loss)."""
        f = self._open(self.generation)
        if f is None:
            self.offset = 0
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
