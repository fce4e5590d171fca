"""Gemini CLI's model-call retries, as retryable ``AgentError``s the thread can show.

The CLI says "Attempt N failed ... Retrying with backoff..." before each retry of a failed
model call. With ``-p`` (the per-turn mode) that line goes to stderr. In ACP mode it goes
nowhere visible: the CLI's console is silenced and ACP has no retry update. It does go to
the CLI's debug log when ``GEMINI_DEBUG_LOG_FILE`` names one, so the adapter hands each
ACP process a private log file and ``DebugLogWatch`` follows it.

Bounded: the watch reads at most ``READ_CHUNK`` bytes per poll and empties the file once it
has read past ``TRUNCATE_AT`` (the CLI appends, so it writes on at the new end); the file is
removed when the process ends.

The file lies in the thread's settings home, which the (sandboxed) agent can write: it is
read and emptied only through the descriptor made with it, never by its path, so an agent
that puts a symlink to the database there gets nothing read and nothing truncated.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path

import trio

from threadspindle.runtime.core.agent_events import AgentError

__all__ = ["DEBUG_LOG_ENV", "DebugLogWatch", "retry_event"]

DEBUG_LOG_ENV = "GEMINI_DEBUG_LOG_FILE"
# Only the lines announcing a retry: "Attempt 3 failed: ... Max attempts reached" is the end.
RETRY_LINE = re.compile(r"Attempt (\d+) failed.*Retrying")
MESSAGE_CHARS = 300
POLL_S = 0.25
READ_CHUNK = 64 * 1024
TRUNCATE_AT = 1024 * 1024
MAX_LINE = 16 * 1024  # a longer line is cut: only its start can hold the notice


def retry_event(line: str, max_retries: int) -> AgentError | None:
    """The retry a CLI log line announces ("Attempt 1 failed": retry 1 follows), or None."""
    found = RETRY_LINE.search(line)
    if found is None:
        return None
    message = line.strip()
    if message.startswith("[") and "] [" in message:  # the debug log's "[time] [WARN] "
        message = message.split("] ", 2)[-1]
    return AgentError(
        message=message[:MESSAGE_CHARS],
        retryable=True,
        attempt=int(found.group(1)),
        max_retries=max_retries,
    )


class DebugLogWatch:
    """A private debug log file for one CLI process, and a task that follows it."""

    def __init__(self, directory: str) -> None:
        Path(directory).mkdir(parents=True, exist_ok=True)
        self._fd, self.path = tempfile.mkstemp(
            prefix="spindle-debug-", suffix=".log", dir=directory
        )
        self._offset = 0
        self._partial = b""

    async def follow(self, on_line: Callable[[str], Awaitable[None]]) -> None:
        """Call ``on_line`` with each line the CLI appends, until cancelled."""
        while True:
            for line in self._read_new():
                await on_line(line)
            await trio.sleep(POLL_S)

    def _read_new(self) -> list[str]:
        try:
            size = os.fstat(self._fd).st_size
            if size < self._offset:  # emptied: start over
                self._offset, self._partial = 0, b""
            data = os.pread(self._fd, READ_CHUNK, self._offset)
        except OSError:
            return []
        self._offset += len(data)
        *lines, self._partial = (self._partial + data).split(b"\n")
        self._partial = self._partial[-MAX_LINE:]
        if self._offset >= TRUNCATE_AT and self._offset >= size and not self._partial:
            try:
                os.ftruncate(self._fd, 0)
                self._offset = 0
            except OSError:
                pass
        return [line[:MAX_LINE].decode("utf-8", "replace") for line in lines]

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self._fd)
        with contextlib.suppress(OSError):
            os.unlink(self.path)  # a link put there is removed, not its target
