"""Pipes widened for a known burst (``effects/pipe_size.py``), and why: a Node child that
exits with more queued than its stdout pipe took loses the rest."""

from __future__ import annotations

import os
import shutil

import pytest
import trio

from threadspindle.effects import pipe_size as pipe_size_module
from threadspindle.effects.pipe_size import MAX_PIPE_BYTES, give_back, pipe_size, widen_pipe
from threadspindle.effects.process import ManagedProcess
from threadspindle.testkit.late_reader import lines_after_exit

# Says a 300 KB line and a last one in one go, then exits: what ``gemini -p`` does with a
# long prompt's echo when the model answers at once.
BURST = (
    "process.stdout.write('x'.repeat(300000) + '\\n');"
    "process.stdout.write('END\\n');"
    "process.exit(0);"
)


def test_a_pipe_grows_to_what_is_asked_and_never_shrinks() -> None:
    read, write = os.pipe()
    try:
        default = pipe_size(read)
        assert default >= 4096  # 64 KiB unless the user's pipes are over their budget
        assert widen_pipe(read, 1000) == 0 and pipe_size(read) == default  # never narrower
        lent = widen_pipe(write, 300_000)  # either end: the size is the pipe's
        assert pipe_size(read) >= 300_000 and lent == pipe_size(read) - default
        give_back(lent)
    finally:
        os.close(read)
        os.close(write)


def test_more_than_the_cap_is_not_granted_and_a_file_is_no_pipe() -> None:
    read, write = os.pipe()
    try:
        give_back(widen_pipe(read, 10 * MAX_PIPE_BYTES))
        assert pipe_size(read) <= MAX_PIPE_BYTES
    finally:
        os.close(read)
        os.close(write)
    fd = os.open(os.devnull, os.O_WRONLY)
    try:
        assert pipe_size(fd) == 0 and widen_pipe(fd, 1 << 20) == 0
    finally:
        os.close(fd)


async def _lines_read_after_exit(stdout_bytes: int | None) -> list[str]:
    node = shutil.which("node")
    assert node is not None, "node is installed with the agent CLIs (make agents)"
    proc = await ManagedProcess.spawn([node, "-e", BURST], stdin=False, stdout_bytes=stdout_bytes)
    with trio.fail_after(30):
        return [line async for line in lines_after_exit(proc)]  # nothing read before the exit


async def test_a_node_child_that_exits_keeps_its_burst_only_in_a_wide_enough_pipe() -> None:
    before = pipe_size_module.lent()
    lines = await _lines_read_after_exit(1 << 20)
    assert lines == ["x" * 300_000, "END"]
    assert pipe_size_module.lent() == before  # the room came back at the exit
    # The default pipe: Node queued what did not fit and dropped it at exit.
    lines = await _lines_read_after_exit(None)
    assert "END" not in lines and sum(len(line) for line in lines) < 300_000


def test_an_unprivileged_spindle_lends_at_most_its_allotment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Past its share of the user's pipe budget a pipe keeps its default size: the kernel
    would otherwise make every later pipe of the user 8 KiB. Room comes back once given."""
    monkeypatch.setattr(pipe_size_module, "_allotment", 512 * 1024)
    monkeypatch.setattr(pipe_size_module, "_lent", 0)
    pipes = [os.pipe() for _ in range(3)]
    try:
        lent = [widen_pipe(read, 1 << 20) for read, _ in pipes]
        assert lent == [448 * 1024, 64 * 1024, 0]
        assert [pipe_size(read) for read, _ in pipes] == [512 * 1024, 128 * 1024, 65536]
        assert pipe_size_module.lent() == 512 * 1024
        give_back(lent[0])
        assert widen_pipe(pipes[2][0], 1 << 20) == 448 * 1024
    finally:
        for read, write in pipes:
            os.close(read)
            os.close(write)
