"""``SeenMessages``: the WhatsApp message ids already handled, kept on disk for as long as a
delivery of them is still taken.

Meta signs a delivery's body, and nothing else: no time, no nonce. So a signed delivery
captured anywhere on its way (a reverse proxy's log, a tunnel) can be sent again, and is
taken as long as its messages are younger than ``max_message_age_s`` (24 h). In memory
alone, the ids handled were forgotten at a restart, and past ``deliveries_remembered``
messages; the core then dropped a replay only while the thread's 64 latest actions held
it, so an old prompt ran again. Here every id handled is also written to a small SQLite
file in the data directory, kept as long as a message of that age is taken, and looked
up when memory does not have it.

Written once the message's actions are durable (``add`` after ``handle``): a crash
between the two leaves the id unwritten, and Meta's redelivery is then dropped by the
core, whose recent actions hold it. A file that cannot be opened or written is logged
and the ids are kept in memory only (what Spindle did before): a replay is then taken
after a restart, as the warning says, but no message is refused for it.
"""

from __future__ import annotations

import logging
import sqlite3
from collections import OrderedDict
from pathlib import Path

__all__ = ["SeenMessages"]

_log = logging.getLogger("spindle.whatsapp")

PRUNE_EVERY = 1000  # ids added between two deletions of the expired ones


class SeenMessages:
    """A set of message ids: the latest ``remembered`` in memory, all those of the last
    ``keep_s`` seconds in the file at ``path`` (None: memory only)."""

    def __init__(self, path: Path | str | None, *, keep_s: float, remembered: int) -> None:
        self.keep_s = keep_s
        self.remembered = remembered
        self._memory: OrderedDict[str, None] = OrderedDict()
        self._added = 0
        self._conn: sqlite3.Connection | None = None
        self.path = Path(path) if path is not None else None
        if self.path is not None:
            self._conn = self._open(self.path)

    def _open(self, path: Path) -> sqlite3.Connection | None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(path, isolation_level=None, timeout=5.0)
            try:
                # Only this process's ids (and, on a full disk, not even those): the
                # file is small and rewritten; a power cut may lose its last commits,
                # which the core's recent actions cover.
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA synchronous=NORMAL")
                conn.execute(
                    "CREATE TABLE IF NOT EXISTS seen (wamid TEXT PRIMARY KEY, at REAL NOT NULL)"
                )
                conn.execute("SELECT COUNT(*) FROM seen WHERE wamid = ''").fetchone()
            except BaseException:
                conn.close()
                raise
            path.chmod(0o600)
        except (OSError, sqlite3.Error) as error:
            self._unusable(path, error)
            return None
        return conn

    def _unusable(self, path: Path | None, error: BaseException) -> None:
        _log.warning(
            "cannot keep the WhatsApp message ids handled in %s (%s): they are kept in "
            "memory only, so after a restart a signed delivery sent again (a replay) "
            "would run its prompt again; fix the file, or move it aside",
            path,
            error,
        )

    def __contains__(self, wamid: str) -> bool:
        if wamid in self._memory:
            return True
        if self._conn is None:
            return False
        try:
            row = self._conn.execute("SELECT 1 FROM seen WHERE wamid = ?", (wamid,)).fetchone()
        except sqlite3.Error as error:
            self._lost(error)
            return False
        return row is not None

    def add(self, wamid: str, at: float) -> None:
        """``wamid`` was handled at ``at`` (the clock ``keep_s`` is measured on)."""
        self._memory[wamid] = None
        while len(self._memory) > self.remembered:
            self._memory.popitem(last=False)
        if self._conn is None:
            return
        try:
            self._conn.execute("INSERT OR REPLACE INTO seen (wamid, at) VALUES (?, ?)", (wamid, at))
            self._added += 1
            if self._added % PRUNE_EVERY == 0:
                self._conn.execute("DELETE FROM seen WHERE at < ?", (at - self.keep_s,))
        except sqlite3.Error as error:
            self._lost(error)

    def _lost(self, error: sqlite3.Error) -> None:
        """The file failed in use (a full disk, a file replaced): memory only from now."""
        self._unusable(self.path, error)
        self.close()

    def __len__(self) -> int:
        """The ids kept in the file (in memory, when there is none)."""
        if self._conn is not None:
            try:
                return int(self._conn.execute("SELECT COUNT(*) FROM seen").fetchone()[0])
            except sqlite3.Error:
                pass
        return len(self._memory)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
