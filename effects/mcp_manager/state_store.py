"""The process list on disk, so it survives a restart of Spindle, and finding orphans again.

One small JSON file (``<data_dir>/mcp-processes.json``) written atomically (temporary file,
fsync, rename): a crash leaves either the old list or the new one, never half of each. A
process recorded as live is the same process after a restart only when its pid is alive
*and* its psutil ``create_time`` matches the recorded one: a recycled pid is not adopted
(and never signalled).
"""

from __future__ import annotations

import os
from pathlib import Path

from threadspindle.effects.process_tree import same_process

from .models import ProcessRecord, StateFile

__all__ = ["StateStore", "same_process"]


class StateStore:
    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / "mcp-processes.json"
        self.writes = 0

    def load(self) -> list[ProcessRecord]:
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return []
        try:
            return StateFile.model_validate_json(text).processes
        except ValueError:
            # A damaged file must not stop Spindle; keep it aside for a human to look at.
            os.replace(self.path, self.path.with_suffix(".damaged"))
            return []

    def save(self, records: list[ProcessRecord]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        data = StateFile(processes=records).model_dump_json(indent=1)
        # 0600: records hold the environment values agents passed (API keys, passwords).
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        self.writes += 1
