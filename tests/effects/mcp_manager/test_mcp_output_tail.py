"""Tailing one output stream into its ring: bounded reads (a backlog is skipped to its newest
part, with a note), the writer's numbered files (a complete file is finished before the next
is started; a file deleted before it was read is noted), and the text read before a restart
restored under its old numbers. Real files, no processes."""

from __future__ import annotations

import os
from pathlib import Path

from threadspindle.effects.mcp_manager.output_tail import SKIP_NOTE, SKIP_NOTE_UNKNOWN, StreamTail
from threadspindle.effects.mcp_manager.output_writer import generation_path
from threadspindle.effects.mcp_manager.ring_buffer import OutputRing, SequenceCounter


class Files:
    """What output_writer.py does to the files of one stream, step by step."""

    def __init__(self, base: Path) -> None:
        self.base = str(base)
        self.generation = 0
        Path(generation_path(self.base, 0)).write_bytes(b"")

    def append(self, data: bytes) -> None:
        with open(generation_path(self.base, self.generation), "ab") as f:
            f.write(data)

    def rotate(self) -> None:
        self.generation += 1
        Path(generation_path(self.base, self.generation)).write_bytes(b"")
        old = generation_path(self.base, self.generation - 2)
        if os.path.exists(old):
            os.unlink(old)


def _tail(files: Files, **kw: int) -> StreamTail:
    return StreamTail(files.base, 0, OutputRing(10_000), [], **kw)


def test_a_backlog_larger_than_one_read_is_skipped_to_its_newest_part(tmp_path: Path) -> None:
    files = Files(tmp_path / "out")
    tail, seq = _tail(files, max_read_bytes=100), SequenceCounter()
    files.append(b"first\n")
    assert tail.read_new(seq)
    seen = seq.value
    lines = b"".join(b"line %04d\n" % i for i in range(1000))  # 10 bytes each
    files.append(lines)
    assert tail.read_new(seq)
    text, truncated = tail.ring.read(10_000, since_seq=seen)
    newest = "".join(f"line {i:04d}\n" for i in range(990, 1000))  # the last 100 bytes
    assert text == SKIP_NOTE.format(skipped=len(lines) - 100) + newest
    assert truncated is True  # a caller at `seen` missed the skipped part
    assert tail.skipped_bytes == len(lines) - 100
    assert tail.read_new(seq) is False  # nothing new: nothing read, nothing noted


def test_a_complete_file_is_finished_before_the_next_one(tmp_path: Path) -> None:
    files = Files(tmp_path / "out")
    tail, seq = _tail(files), SequenceCounter()
    files.append(b"one\ntw")
    assert tail.read_new(seq)
    files.append(b"o\nthree\n")  # written after our read, then the writer moves on
    files.rotate()
    files.append(b"four\n")
    assert tail.read_new(seq)
    assert tail.ring.read(10_000) == ("one\ntwo\nthree\nfour\n", False)
    assert (tail.generation, tail.offset) == (1, 5)


def test_a_file_deleted_before_it_was_read_is_noted_as_skipped(tmp_path: Path) -> None:
    files = Files(tmp_path / "out")
    tail, seq = _tail(files), SequenceCounter()
    files.append(b"one\n")
    tail.read_new(seq)
    seen = seq.value
    for text in (b"lost\n", b"next\n"):
        files.append(text)
        files.rotate()  # the second rotation deletes the file the tail was reading
    files.append(b"newest\n")
    assert tail.read_new(seq)
    # The oldest file left is read whole, then the newest.
    assert tail.ring.read(10_000, since_seq=seen) == (SKIP_NOTE_UNKNOWN + "next\nnewest\n", True)


def test_restore_finds_the_text_read_before_after_the_writer_moved_on(tmp_path: Path) -> None:
    files = Files(tmp_path / "out")
    before, seq = _tail(files), SequenceCounter()
    files.append(b"a\n")
    before.read_new(seq)
    files.append(b"b\n")
    before.read_new(seq)
    saved = (before.delivered, list(before.marks), before.generation, seq.value)
    files.append(b"c\n")  # written while no Spindle was running, then the writer moved on
    files.rotate()
    files.append(b"d\n")

    offset, marks, generation, last_seq = saved
    after = StreamTail(files.base, offset, OutputRing(10_000), marks, generation=generation)
    seq = SequenceCounter(last_seq)
    after.restore(10_000, last_seq)
    assert after.ring.read(10_000) == ("a\nb\n", False)
    assert after.ring.read(10_000, since_seq=marks[0][0]) == ("b\n", False)  # old numbers
    after.read_new(seq)
    assert after.ring.read(10_000, since_seq=last_seq) == ("c\nd\n", False)


def test_restore_when_the_file_is_gone_notes_the_gap(tmp_path: Path) -> None:
    files = Files(tmp_path / "out")
    before, seq = _tail(files), SequenceCounter()
    files.append(b"a\n")
    before.read_new(seq)
    for _ in range(3):
        files.append(b"gone\n")
        files.rotate()
    files.append(b"now\n")
    after = StreamTail(
        files.base,
        before.delivered,
        OutputRing(10_000),
        list(before.marks),
        generation=before.generation,
    )
    after.restore(10_000, seq.value)
    assert after.read_new(seq)
    assert after.ring.read(10_000) == (SKIP_NOTE_UNKNOWN + "gone\nnow\n", True)
