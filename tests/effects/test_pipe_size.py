"""Pipes widened for a known burst (``effects/pipe_size.py``), and why: a Node child that
exits with more queued than its stdout pipe took loses the rest."""

from __future__ import annotations

import json
import logging
import math
import os
import resource
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


class _Said(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.said: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.said.append(record.getMessage())


def test_a_pipe_the_users_budget_shrank_is_reported_with_the_fix() -> None:
    """The real kernel: a user (``nobody``, or the unprivileged user running the tests)
    whose pipes hold ``pipe-user-pages-soft`` gets small pipes from then on, which no
    ``F_SETPIPE_SZ`` widens; ``note_pipe`` says so once, naming the fix, and is quiet for a
    default pipe. In a forked child, so the pipes held are gone with it."""
    report_read, report_write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 1
        try:
            hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
            limit = 20_000 if hard == resource.RLIM_INFINITY else min(20_000, hard)
            resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))
            if os.geteuid() == 0:
                os.setgid(65534)
                os.setuid(65534)  # nobody: the budget binds an unprivileged user only
            pipe_size_module._warned_at = -math.inf
            handler = _Said()
            said = handler.said
            logging.getLogger(pipe_size_module.__name__).addHandler(handler)
            first = os.pipe()
            quiet = not pipe_size_module.note_pipe(first[0], "agent") and not said
            held = [first]
            while pipe_size(held[-1][0]) >= pipe_size_module.DEFAULT_PIPE_BYTES:
                if len(held) > 8000:
                    break  # (no budget on this host: reported as such below)
                held.append(os.pipe())
            small = held[-1][0]
            widened = widen_pipe(small, 1 << 20)
            noted = pipe_size_module.note_pipe(small, "agent")
            again = pipe_size_module.note_pipe(os.pipe()[0], "agent")
            report = {
                "quiet": quiet,
                "pipes": len(held),
                "small": pipe_size(small),
                "widened": widened,
                "noted": noted,
                "again": again,
                "said": said,
            }
            os.write(report_write, json.dumps(report).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(report_write)
    with os.fdopen(report_read, "rb") as reader:
        report = json.loads(reader.read() or b"{}")
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, report
    assert report["quiet"], report  # a default pipe: nothing said
    assert report["small"] < pipe_size_module.DEFAULT_PIPE_BYTES, report
    assert report["widened"] == 0, report  # the kernel refuses to widen it
    assert report["noted"] and report["again"], report
    assert len(report["said"]) == 1, report  # once, however many small pipes follow
    assert "fs.pipe-user-pages-soft" in report["said"][0], report
    assert "agent got a pipe of" in report["said"][0], report
