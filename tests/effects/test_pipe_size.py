"""Pipes widened for a known burst (``effects/pipe_size.py``), and why: a Node child that
exits with more queued than its stdout pipe took loses the rest."""

from __future__ import annotations

import os
import shutil

import trio

from threadspindle.effects.pipe_size import MAX_PIPE_BYTES, pipe_size, widen_pipe
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
        assert widen_pipe(read, 1000) == default  # never narrower
        assert widen_pipe(write, 300_000) >= 300_000  # either end: it is the pipe's
        assert pipe_size(read) >= 300_000
    finally:
        os.close(read)
        os.close(write)


def test_more_than_the_cap_is_not_granted_and_a_file_is_no_pipe() -> None:
    read, write = os.pipe()
    try:
        assert widen_pipe(read, 10 * MAX_PIPE_BYTES) <= MAX_PIPE_BYTES
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
    lines = await _lines_read_after_exit(1 << 20)
    assert lines == ["x" * 300_000, "END"]
    # The default pipe: Node queued what did not fit and dropped it at exit.
    lines = await _lines_read_after_exit(None)
    assert "END" not in lines and sum(len(line) for line in lines) < 300_000
