"""``LineReader``: lines from a child's pipe (read once it is readable) or any stream."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest
import trio
import trio.testing

from threadspindle.effects.process import LineReader


def _pipe() -> tuple[trio.lowlevel.FdStream, trio.lowlevel.FdStream]:
    read_end, write_end = os.pipe()
    return trio.lowlevel.FdStream(read_end), trio.lowlevel.FdStream(write_end)


async def _lines(reader: LineReader) -> list[str]:
    return [line async for line in reader]


async def test_the_lines_of_a_pipe_come_whole_across_reads() -> None:
    receive, send = _pipe()
    async with receive, trio.open_nursery() as nursery:

        async def write() -> None:
            async with send:
                for piece in (b"a\nbb", b"b\r\nccc\n", b"d"):
                    await send.send_all(piece)
                    await trio.sleep(0.01)

        nursery.start_soon(write)
        assert await _lines(LineReader(receive)) == ["a", "bbb", "ccc", "d"]


async def test_a_pipe_closed_while_its_reader_waits_ends_the_lines() -> None:
    receive, send = _pipe()
    async with send, trio.open_nursery() as nursery:
        got: list[list[str]] = []

        async def read() -> None:
            got.append(await _lines(LineReader(receive)))

        nursery.start_soon(read)
        await send.send_all(b"one\n")
        await trio.testing.wait_all_tasks_blocked()
        await receive.aclose()  # (an adapter's stop closes the pipe under its reader)
    assert got == [["one"]]
    # And a reader of a pipe closed before it starts has no line either.
    assert await _lines(LineReader(receive)) == []


async def test_a_line_at_a_time_is_one_read_with_no_empty_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # An agent says a line, then thinks: a reader that read first (trio's receive_some)
    # found the pipe empty after every line (an exception, a task step and a syscall each)
    # before it waited.
    empty = 0
    real_read = os.read

    def counting_read(fd: int, n: int) -> bytes:
        nonlocal empty
        try:
            return real_read(fd, n)
        except BlockingIOError:
            empty += 1
            raise

    receive, send = _pipe()
    monkeypatch.setattr(os, "read", counting_read)
    async with receive, trio.open_nursery() as nursery:

        async def write() -> None:
            async with send:
                for n in range(20):
                    await send.send_all(b"line %d\n" % n)
                    await trio.sleep(0.005)

        nursery.start_soon(write)
        lines = await _lines(LineReader(receive))
    assert lines == [f"line {n}" for n in range(20)]
    assert empty == 0


async def test_a_flood_does_not_starve_the_other_tasks() -> None:
    # Waiting before each read is the reader's checkpoint: with data always there, every
    # other task still runs between two reads.
    receive, send = _pipe()
    line = b"x" * 1000 + b"\n"
    others = 0
    async with receive, trio.open_nursery() as nursery:

        async def write() -> None:
            async with send:
                for _ in range(2000):  # 2 MB: many pipe-fulls
                    await send.send_all(line)

        async def other() -> None:
            nonlocal others
            while True:
                others += 1
                await trio.sleep(0)

        nursery.start_soon(write)
        nursery.start_soon(other)
        reader = LineReader(receive)
        reads = 0
        async for _ in reader:
            reads += 1
        nursery.cancel_scope.cancel()
    assert reads == 2000
    assert others >= 20  # (2 MB arrive in at least 32 reads of 64 KiB)


async def test_any_other_stream_is_read_as_it_reads() -> None:
    send, receive = trio.testing.memory_stream_one_way_pair()
    async with trio.open_nursery() as nursery:

        async def write() -> None:
            for piece in (b"x\ny", b"y\n", b"z"):
                await send.send_all(piece)
                await trio.sleep(0.01)
            await send.aclose()

        nursery.start_soon(write)
        assert await _lines(LineReader(receive)) == ["x", "yy", "z"]


async def test_a_line_longer_than_the_limit_is_cut() -> None:
    receive, send = _pipe()
    async with receive, trio.open_nursery() as nursery:

        async def write() -> None:
            async with send:
                await send.send_all(b"y" * 300)  # no end of line in sight
                await trio.sleep(0.02)
                await send.send_all(b"\nok\n")

        nursery.start_soon(write)
        reader = LineReader(receive, max_line=100)
        lines = await _lines(reader)
    assert lines == ["y" * 100, "ok"] and reader.oversized == 1


async def test_the_rest_of_a_cut_line_is_dropped_not_read_as_lines_of_its_own() -> None:
    # The rest comes in several reads, one ending in what would pass for a command: read
    # as a line, a console would have run it (and an agent's parser taken it for an event).
    receive, send = _pipe()
    async with receive, trio.open_nursery() as nursery:

        async def write() -> None:
            async with send:
                for piece in (b"a" * 150, b"b" * 150, b"b" * 50 + b"/thread new x", b"\nnext\n"):
                    await send.send_all(piece)
                    await trio.sleep(0.02)
                await send.send_all(b"c" * 150)  # cut, and the stream ends inside its rest
                await trio.sleep(0.02)
                await send.send_all(b"c" * 50)

        nursery.start_soon(write)
        reader = LineReader(receive, max_line=100)
        lines = await _lines(reader)
    assert lines == ["a" * 100, "next", "c" * 100] and reader.oversized == 2


async def test_a_file_is_read_to_its_end(tmp_path: Path) -> None:
    # Input from a file (`spindle run < script`): epoll refuses a regular file, so it is
    # read as trio reads it, not waited on.
    script = tmp_path / "script"
    script.write_bytes(b"first\nsecond\n" * 3 + b"last")
    async with trio.lowlevel.FdStream(os.open(script, os.O_RDONLY)) as stream:
        assert await _lines(LineReader(stream)) == ["first", "second"] * 3 + ["last"]


async def test_a_socket_is_waited_on_like_a_pipe() -> None:
    ours, theirs = socket.socketpair()
    async with trio.lowlevel.FdStream(ours.detach()) as stream, trio.open_nursery() as nursery:

        async def write() -> None:
            with theirs:
                for piece in (b"a\nb", b"b\n"):
                    theirs.send(piece)
                    await trio.sleep(0.01)

        nursery.start_soon(write)
        assert await _lines(LineReader(stream)) == ["a", "bb"]
