"""The bounded output rings and the line assembler, without processes or HTTP."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from effects.mcp_manager.ring_buffer import LineAssembler, OutputRing, SequenceCounter


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
