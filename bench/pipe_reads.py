"""Reading an agent's pipe: the CPU a line costs Spindle's process before any parsing.

A child process (the agent) writes Claude Code ``stream_event`` lines into a pipe at a
steady 5,000 lines/s, either one line per write (an agent that says a delta at a time, the
common case) or ten per write (500 writes/s: the same lines, a tenth of the wake-ups).
This process reads them with ``LineReader`` (``effects/process.py``) as every adapter reads
a CLI's stdout, and with the way it read before 2026-11-27, trio's
``FdStream.receive_some`` (a checkpoint, a read, and only after a read that finds the pipe
empty a wait), taking turns in one run. *CPU µs per line*: this process's CPU time over the
lines read (the writer runs on the other core); the median of the rounds.

Run alone: ``PYTHONPATH=. .venv/bin/python -m bench.pipe_reads [--quick]``.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

import trio

from threadspindle.effects.process import READ_CHUNK, LineReader

__all__ = ["run"]

LINES_PER_S = 5_000
FULL_LINES = 20_000
QUICK_LINES = 1_000
ROUNDS = 3
LINE = (
    '{"type":"stream_event","event":{"type":"content_block_delta","index":0,'
    '"delta":{"type":"text_delta","text":"one more word "}},"session_id":'
    '"00000000-0000-4000-8000-000000000000","parent_tool_use_id":null}\n'
)

# The writer: ``lines`` lines, ``per_write`` at a time, on a steady schedule (spinning, so
# its sleeps' granularity does not bunch the writes).
_WRITER = """
import os, sys, time
fd, lines, per_write = (int(a) for a in sys.argv[1:4])
interval = float(sys.argv[4])
data = sys.stdin.buffer.read() * per_write
due = time.perf_counter()
for _ in range(lines // per_write):
    os.write(fd, data)
    due += interval
    while time.perf_counter() < due:
        pass
"""


class _ReadFirst(LineReader):
    """``LineReader`` as it read until 2026-11-27: trio's own ``receive_some``."""

    async def _receive(self) -> bytes | bytearray:
        return await self._stream.receive_some(READ_CHUNK)


async def _one(reader_class: type[LineReader], lines: int, per_write: int) -> float:
    """CPU µs per line for one reader over one writer's pipe."""
    read_end, write_end = os.pipe()
    interval = per_write / LINES_PER_S
    writer = subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(write_end), str(lines), str(per_write), str(interval)],
        stdin=subprocess.PIPE,
        pass_fds=(write_end,),
    )
    os.close(write_end)
    assert writer.stdin is not None
    writer.stdin.write(LINE.encode())
    writer.stdin.close()
    got = 0
    async with trio.lowlevel.FdStream(read_end) as stream:
        started = time.process_time()
        async for _ in reader_class(stream):
            got += 1
        spent = time.process_time() - started
    writer.wait()
    if got != lines:
        raise RuntimeError(f"read {got} lines of {lines}")
    return spent / got * 1e6


def run(quick: bool = False) -> dict[str, Any]:
    lines = QUICK_LINES if quick else FULL_LINES
    rounds = 1 if quick else ROUNDS
    out: dict[str, Any] = {"lines": lines, "lines_per_s": LINES_PER_S, "rounds": rounds}
    for per_write in (1, 10):
        cpu: dict[str, list[float]] = {"line_reader": [], "receive_some": []}
        for _ in range(rounds):  # taking turns: the host's speed moves from minute to minute
            cpu["line_reader"].append(trio.run(_one, LineReader, lines, per_write))
            cpu["receive_some"].append(trio.run(_one, _ReadFirst, lines, per_write))
        row = {name: round(statistics.median(v), 1) for name, v in cpu.items()}
        row["ratio"] = round(row["line_reader"] / row["receive_some"], 2)
        row["rounds_line_reader"] = [round(v, 1) for v in cpu["line_reader"]]
        row["rounds_receive_some"] = [round(v, 1) for v in cpu["receive_some"]]
        out[f"{per_write}_per_write"] = row
    return out


def main() -> None:
    print(json.dumps(run("--quick" in sys.argv), indent=2))


if __name__ == "__main__":
    main()
