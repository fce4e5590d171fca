"""Bounded output buffers with sequence numbers, so a caller can read only what is new.

A managed process writes into two files (stdout, stderr); the supervisor tails them into
one ``OutputRing`` per stream. Both rings of a process draw their sequence numbers from one
``SequenceCounter``, so a single ``since_seq`` reads what is new on either stream.

Invariants: a ring never holds more than ``max_chars`` characters, nor (but for its newest
chunk) more than ``max_lines`` lines, a chunk counting as one line at least (so at most
``max_lines + 1`` chunks): the oldest chunks are evicted first, and a single
oversized chunk keeps only its tail of characters; sequence numbers only grow; a chunk's
text is what the process wrote (newlines included), so joining chunks reproduces the
output, except where Spindle says otherwise in the text itself: a line cut at
``max_line_bytes`` (``LINE_CUT_NOTE``) or output skipped unread (``output_tail.py``).
``LineAssembler`` holds at most ``max_line_bytes`` of an unfinished line, whatever the
process writes.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass

__all__ = [
    "LINE_CUT_NOTE",
    "LineAssembler",
    "OutputChunk",
    "OutputRing",
    "SequenceCounter",
    "char_start",
]


class SequenceCounter:
    """The last sequence number handed out; shared by the stdout and stderr rings."""

    def __init__(self, start: int = 0) -> None:
        self.value = start

    def next(self) -> int:
        self.value += 1
        return self.value


@dataclass(frozen=True, slots=True)
class OutputChunk:
    seq: int
    text: str


def _lines_in(text: str) -> int:
    # A chunk without a newline (a partial line released after its wait) counts as one
    # line: so the line bound also bounds the number of chunks, and their overhead.
    return max(1, text.count("\n"))


class OutputRing:
    """The newest ``max_chars`` characters of one stream, as sequence-numbered chunks."""

    def __init__(self, max_chars: int, max_lines: int | None = None) -> None:
        if max_chars <= 0 or (max_lines is not None and max_lines <= 0):
            raise ValueError("max_chars and max_lines must be positive")
        self.max_chars = max_chars
        self.max_lines = max_lines
        self._chunks: collections.deque[OutputChunk] = collections.deque()
        self._chars = 0
        self._lines = 0  # lines held (_lines_in)
        self.evicted_chars = 0  # characters dropped to keep the bound
        self.evicted_through_seq = 0  # every chunk with seq <= this is (at least partly) gone

    def append(self, seq: int, text: str) -> None:
        if not text:
            return
        if len(text) > self.max_chars:
            self.evicted_chars += len(text) - self.max_chars
            self.evicted_through_seq = max(self.evicted_through_seq, seq)
            text = text[-self.max_chars :]
        self._chunks.append(OutputChunk(seq, text))
        self._chars += len(text)
        self._lines += _lines_in(text)
        while self._chars > self.max_chars or self._too_many_lines():
            old = self._chunks.popleft()
            self._chars -= len(old.text)
            self._lines -= _lines_in(old.text)
            self.evicted_chars += len(old.text)
            self.evicted_through_seq = max(self.evicted_through_seq, old.seq)

    def note_skipped(self, seq: int, skipped: int) -> None:
        """``skipped`` characters written before chunk ``seq`` never reached the ring (read
        past: written faster than they could be kept): a caller who saw less than ``seq``
        missed them."""
        self.evicted_chars += skipped
        self.evicted_through_seq = max(self.evicted_through_seq, seq)

    def _too_many_lines(self) -> bool:
        # The newest chunk always stays, even when it alone has more lines than allowed.
        return self.max_lines is not None and self._lines > self.max_lines and len(self._chunks) > 1

    @property
    def chars(self) -> int:
        return self._chars

    @property
    def chunk_count(self) -> int:
        return len(self._chunks)

    @property
    def last_seq(self) -> int:
        return self._chunks[-1].seq if self._chunks else self.evicted_through_seq

    def read(self, tail: int, since_seq: int | None = None) -> tuple[str, bool]:
        """The last ``tail`` characters of the chunks newer than ``since_seq`` (all chunks
        when None). The flag says text the caller asked for is not in the result: cut by
        ``tail``, or evicted from the ring before it was read."""
        chunks = [c for c in self._chunks if since_seq is None or c.seq > since_seq]
        missed = (since_seq is None and self.evicted_chars > 0) or (
            since_seq is not None and since_seq < self.evicted_through_seq
        )
        text = "".join(c.text for c in chunks)
        if tail < len(text):
            return (text[len(text) - tail :] if tail > 0 else ""), True
        return text, missed


LINE_CUT_NOTE = " [spindle: line cut, longer than {limit} bytes]\n"


def char_start(data: bytes, index: int, low: int = 0) -> int:
    """``index`` moved back (not below ``low``) to the first byte of the UTF-8 character it
    falls in."""
    for _ in range(3):
        if index <= low or data[index] & 0xC0 != 0x80:
            break
        index -= 1
    return index


class LineAssembler:
    """Turns raw bytes read from a stream into text made of whole lines, holding at most
    ``max_line_bytes`` of a line that has not ended yet.

    Complete lines are released at once. A trailing partial line is held until its newline
    comes, or until nothing more has arrived for ``hold_s`` seconds (a prompt such as
    ``Password:`` must not wait for a newline that never comes; ``print`` writes the text
    and the newline separately, so one empty read is not enough to call a line finished).
    A line longer than ``max_line_bytes`` is cut: its first ``max_line_bytes`` are released
    with ``LINE_CUT_NOTE`` (which ends the line), the rest of it, up to its newline, is
    dropped (``cat /dev/zero`` writes one endless line: without the cut it would be held
    whole). The caller passes the time: this class reads no clock. Text is cut after a
    newline byte, which in UTF-8 never sits inside a character, or at the start of a
    character, so a character split across two reads stays whole; invalid bytes become
    U+FFFD. ``pending_bytes`` says how many bytes read are not released yet (the
    supervisor's file offsets must not count them); dropped bytes count as released."""

    def __init__(self, hold_s: float = 0.5, max_line_bytes: int = 64 * 1024) -> None:
        if max_line_bytes <= 0:
            raise ValueError("max_line_bytes must be positive")
        self.hold_s = hold_s
        self.max_line_bytes = max_line_bytes
        self._note = LINE_CUT_NOTE.format(limit=max_line_bytes).encode()
        self._pending = b""
        self._pending_since = 0.0
        self._dropping = False  # inside a line that was cut: skip to its newline
        self.cut_lines = 0

    @property
    def pending_bytes(self) -> int:
        return len(self._pending)

    def feed(self, data: bytes, now: float) -> str:
        """The complete lines (newlines kept) that ``data`` finishes; "" when none."""
        if not data:
            if self._pending and now - self._pending_since >= self.hold_s:
                return self.flush()
            return ""
        if self._dropping:
            newline = data.find(b"\n")
            if newline < 0:
                return ""
            self._dropping = False
            data = data[newline + 1 :]
            if not data:
                return ""
        if not self._pending:
            self._pending_since = now
        buf = self._pending + data
        parts, start = self._cut_long_lines(buf)
        if self._dropping:
            self._pending = b""
        else:
            cut = buf.rfind(b"\n", start) + 1
            if cut:
                parts.append(buf[start:cut])
                start = cut
            self._pending = buf[start:]
        if parts:
            self._pending_since = now
        return b"".join(parts).decode("utf-8", "replace")

    def _cut_long_lines(self, buf: bytes) -> tuple[list[bytes], int]:
        """Cut every line of ``buf`` longer than the limit. Returns the released pieces and
        where the uncut rest starts; after it the partial line at the end (if any) is at
        most ``max_line_bytes`` long, or ``_dropping`` is set."""
        limit, end = self.max_line_bytes, len(buf)
        parts: list[bytes] = []
        start = pos = 0  # start: first byte not yet released; pos: a line start
        # Hop from line start to line start through the last newline of each window of
        # limit + 1 bytes: a window without one holds a line longer than the limit. Text of
        # short lines is crossed in big steps, not line by line.
        while pos + limit < end:
            newline = buf.rfind(b"\n", pos, pos + limit + 1)
            if newline >= 0:
                pos = newline + 1
                continue
            head = char_start(buf, pos + limit, pos)
            parts += (buf[start:head], self._note)
            self.cut_lines += 1
            newline = buf.find(b"\n", pos + limit)
            if newline < 0:
                self._dropping = True
                return parts, end
            start = pos = newline + 1
        return parts, start

    def discard(self) -> int:
        """Forget the partial line held (the bytes after it were skipped); its length."""
        dropped, self._pending, self._dropping = len(self._pending), b"", False
        return dropped

    def flush(self) -> str:
        text, self._pending = self._pending.decode("utf-8", "replace"), b""
        return text
