"""The bounded output rings and the line assembler (with its line cap), without processes or
HTTP."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from threadspindle.effects.mcp_manager.ring_buffer import (
    LINE_CUT_NOTE,
    LineAssembler,
    OutputRing,
    SequenceCounter,
    char_start,
)


def test_reads_everything_then_only_what_is_new() -> None:
    ring, seq = OutputRing(1000), SequenceCounter()
    ring.append(seq.next(), "a\n")
    ring.append(seq.next(), "b\n")
    assert ring.read(2000) == ("a\nb\n", False)
    mark = seq.value
    ring.append(seq.next(), "c\n")
    assert ring.read(2000, since_seq=mark) == ("c\n", False)
    assert ring.read(2000, since_seq=seq.value) == ("", False)


def test_tail_cuts_to_the_newest_characters() -> None:
    ring = OutputRing(1000)
    ring.append(1, "0123456789")
    assert ring.read(4) == ("6789", True)
    assert ring.read(0) == ("", True)


def test_eviction_keeps_the_bound_and_reports_missed_output() -> None:
    ring = OutputRing(10)
    for i in range(1, 6):
        ring.append(i, f"{i}{i}{i}\n")  # 4 chars each
    assert ring.chars <= 10
    text, truncated = ring.read(100)
    assert text == "444\n555\n" and truncated is True
    assert ring.read(100, since_seq=1) == ("444\n555\n", True)  # 2 and 3 are gone
    assert ring.read(100, since_seq=3) == ("444\n555\n", False)
    ring.append(6, "x" * 25)  # one oversized chunk keeps its tail only
    assert ring.read(100) == ("x" * 10, True)


def test_line_bound_evicts_old_chunks_but_keeps_the_newest() -> None:
    ring = OutputRing(10_000, max_lines=3)
    for i in range(1, 6):
        ring.append(i, f"{i}\n")
    assert ring.read(100) == ("3\n4\n5\n", True)
    ring.append(6, "a\nb\nc\nd\n")  # alone over the bound: kept whole
    assert ring.read(100) == ("a\nb\nc\nd\n", True)


def test_assembler_releases_whole_lines_and_then_a_waiting_partial_line() -> None:
    asm = LineAssembler(hold_s=0.5)
    assert asm.feed(b"one\ntw", now=0.0) == "one\n"
    assert asm.feed(b"o\nPassword: ", now=0.1) == "two\n"
    assert asm.feed(b"", now=0.2) == ""  # print() writes the newline separately: wait
    assert asm.feed(b"", now=0.7) == "Password: "  # nothing more came: release it
    assert asm.feed(b"", now=5.0) == ""
    assert asm.feed(b"tick 5", now=6.0) == ""
    assert asm.feed(b"", now=6.3) == ""
    assert asm.feed(b"\n", now=6.31) == "tick 5\n"  # the late newline: one whole line
    # A UTF-8 character split across two reads stays whole.
    euro = "€".encode()
    assert asm.feed(euro[:1], now=7.0) == ""
    assert asm.feed(euro[1:] + b"\n", now=7.0) == "€\n"
    assert asm.feed(b"\xff\n", now=7.0) == "\ufffd\n"
    assert asm.feed(b"tail", now=7.0) == ""
    assert asm.pending_bytes == 4
    assert asm.flush() == "tail"


@given(st.lists(st.text(max_size=30), max_size=40), st.integers(1, 80))
def test_the_ring_is_always_the_suffix_of_what_was_written(chunks: list[str], size: int) -> None:
    ring, seq = OutputRing(size), SequenceCounter()
    for chunk in chunks:
        ring.append(seq.next(), chunk)
        assert ring.chars <= size
    written = "".join(chunks)
    text, truncated = ring.read(10**6)
    assert written.endswith(text)
    assert truncated == (len(text) < len(written))


@given(st.binary(max_size=200), st.lists(st.integers(1, 50), max_size=20))
def test_assembled_text_is_the_decoded_input(data: bytes, cuts: list[int]) -> None:
    asm, out, pos = LineAssembler(hold_s=0.5), [], 0
    for i, cut in enumerate(cuts):
        out.append(asm.feed(data[pos : pos + cut], now=i * 0.3))
        pos += cut
    out.append(asm.feed(data[pos:], now=len(cuts) * 0.3))
    out.append(asm.flush())
    assert "".join(out) == data.decode("utf-8", "replace")


def _reference_cut(data: bytes, limit: int) -> str:
    """What the assembler must release for ``data`` read in any pieces (no hold timeouts):
    each line whose text is longer than ``limit`` bytes becomes its head plus the note."""
    note = LINE_CUT_NOTE.format(limit=limit).encode()
    pieces = data.split(b"\n")
    lines = [p + b"\n" for p in pieces[:-1]] + ([pieces[-1]] if pieces[-1] else [])
    out = []
    for line in lines:
        body = line.removesuffix(b"\n")
        out.append(body[: char_start(body, limit)] + note if len(body) > limit else line)
    return b"".join(out).decode("utf-8", "replace")


def test_a_line_longer_than_the_limit_is_cut_marked_and_the_rest_dropped() -> None:
    asm = LineAssembler(hold_s=0.5, max_line_bytes=8)
    note = LINE_CUT_NOTE.format(limit=8)
    assert asm.feed(b"short\n0123456789abcdef", now=0.0) == "short\n01234567" + note
    assert asm.pending_bytes == 0
    assert asm.feed(b"x" * 100_000, now=0.1) == ""  # still the same line: dropped
    assert asm.pending_bytes == 0
    assert asm.feed(b"yz\nnext\n", now=0.2) == "next\n"
    assert asm.cut_lines == 1
    # A character is never split by the cut.
    assert asm.feed("1234567€€\n".encode(), now=0.3) == "1234567" + note


def test_an_endless_line_holds_no_more_than_the_limit() -> None:
    asm = LineAssembler(hold_s=0.5, max_line_bytes=1024)
    released = [asm.feed(b"\0" * 65536, now=i * 0.01) for i in range(100)]
    assert released[0] == "\0" * 1024 + LINE_CUT_NOTE.format(limit=1024)
    assert set(released[1:]) == {""}
    assert asm.pending_bytes == 0


@given(
    st.lists(st.sampled_from([b"a", b"bc", b"\n", "€".encode(), b"\xff", b"x" * 7]), max_size=60),
    st.lists(st.integers(1, 9), max_size=30),
    st.integers(1, 12),
)
def test_cut_lines_are_the_same_however_the_bytes_arrive(
    tokens: list[bytes], cuts: list[int], limit: int
) -> None:
    data = b"".join(tokens)
    asm, out, pos = LineAssembler(hold_s=0.5, max_line_bytes=limit), [], 0
    for cut in cuts:
        out.append(asm.feed(data[pos : pos + cut], now=0.0))
        pos += cut
        assert asm.pending_bytes <= limit
    out.append(asm.feed(data[pos:], now=0.0))
    assert asm.pending_bytes <= limit
    out.append(asm.flush())
    assert "".join(out) == _reference_cut(data, limit)


def test_skipped_output_counts_as_missed_for_an_older_since_seq() -> None:
    ring, seq = OutputRing(1000), SequenceCounter()
    ring.append(seq.next(), "a\n")
    seen = seq.value
    ring.append(seq.next(), "[note]\n")
    ring.note_skipped(seq.value, 500)
    assert ring.read(1000, since_seq=seen) == ("[note]\n", True)
    assert ring.read(1000, since_seq=seq.value) == ("", False)
    assert ring.read(1000)[1] is True


def test_chunks_without_newlines_are_bounded_in_number_too() -> None:
    # Progress dots, one released every half second: each is a chunk of its own.
    ring, seq = OutputRing(10_000, max_lines=50), SequenceCounter()
    for _ in range(5000):
        ring.append(seq.next(), ".")
    assert ring.chunk_count <= 51
    assert ring.read(10_000) == ("." * 50, True)
