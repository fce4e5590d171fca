"""Many streaming agents in one process of their own, each writing to its own pipe.

The latency bench's second shape (``bench/latency.py``, "agents out of process"): in
production every agent is a process apart, and Spindle's process pays only for reading its
pipe (a scheduler wake, a read, the line split, the real parser). This process plays 1,000
such agents on the machine's other core, so Spindle's process is measured doing its own
work alone. Each agent writes what Claude Code writes for a streamed answer: one
``stream_event`` line per text delta (the captured format, ``shared/fixtures``), every
``interval`` seconds from its own phase on, each delta's text carrying the monotonic time
it was due (``@<seconds> ``; ``time.perf_counter`` is CLOCK_MONOTONIC on Linux, the same
clock in both processes), then a ``result`` line when the load ends.

A pipe that is full is not waited on: what could not be written is kept for that agent
and written first at its next turn (a pipe writer that blocks; here one agent's full pipe
must not hold up the others). Written on stdout at the end: the deltas written, the writes
that found a pipe full, and the most seconds any delta was written after it was due.

Started by ``bench.latency`` with the pipes' write ends inherited (``pass_fds``) and one
JSON line on stdin: ``fds``, ``go_at``, ``stop_at`` (perf_counter seconds), ``interval``,
``phases`` (one per agent, in [0, 1)), ``session_id``.
"""

from __future__ import annotations

import heapq
import json
import os
import sys
import time

_LINE = (
    '{{"type":"stream_event","event":{{"type":"content_block_delta","index":0,'
    '"delta":{{"type":"text_delta","text":"@{due:.6f} "}}}},"session_id":"{session}",'
    '"parent_tool_use_id":null,"uuid":"00000000-0000-4000-8000-{n:012d}"}}\n'
)
_RESULT = (
    '{{"type":"result","subtype":"success","is_error":false,"duration_ms":1,"num_turns":1,'
    '"result":"","session_id":"{session}","total_cost_usd":0,'
    '"usage":{{"input_tokens":1,"output_tokens":1}}}}\n'
)
TICK_S = 0.001


def main() -> int:
    config = json.loads(sys.stdin.readline())
    fds: list[int] = config["fds"]
    interval: float = config["interval"]
    go_at: float = config["go_at"]
    stop_at: float = config["stop_at"]
    session: str = config["session_id"]
    for fd in fds:
        os.set_blocking(fd, False)
    due = [(go_at + phase * interval, i) for i, phase in enumerate(config["phases"])]
    heapq.heapify(due)
    backlog: dict[int, bytes] = {}
    written = full = n = 0
    late = 0.0
    while time.perf_counter() < go_at:
        time.sleep(TICK_S)
    while due and due[0][0] < stop_at:
        now = time.perf_counter()
        while due and due[0][0] <= now and due[0][0] < stop_at:
            at, i = heapq.heappop(due)
            n += 1
            data = backlog.pop(i, b"") + _LINE.format(due=at, session=session, n=n).encode()
            late = max(late, now - at)
            try:
                sent = os.write(fds[i], data)
            except BlockingIOError:
                sent = 0
            except OSError:  # its reader closed the pipe (an aborted turn): that agent stops
                fds[i] = -1
                continue
            if sent < len(data):
                full += 1
                backlog[i] = data[sent:]
            written += 1
            heapq.heappush(due, (at + interval, i))
        time.sleep(TICK_S)
    # The end of every turn: the rest of a backlog, then the result line (blocking now:
    # the reader is still there, and the load is over).
    for i, fd in enumerate(fds):
        if fd < 0:
            continue
        os.set_blocking(fd, True)
        try:
            os.write(fd, backlog.pop(i, b"") + _RESULT.format(session=session).encode())
        except (BrokenPipeError, OSError):
            pass  # that thread's reader is gone (an aborted turn stops reading)
        os.close(fd)
    print(json.dumps({"written": written, "pipe_full": full, "max_late_s": round(late, 4)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
