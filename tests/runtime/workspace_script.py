"""Builders of the workspace actions for the core tests (imported as ``workspace_script``)."""

from __future__ import annotations

from typing import Any

from threadspindle.runtime.core import actions as A
from threadspindle.testkit.thread_script import ThreadScript


class WorkspaceScript(ThreadScript):
    def ws(self, op: str, **kw: Any) -> A.WorkspaceCommand:
        return A.WorkspaceCommand(**self._base(), op=op, author_id="u1", **kw)

    def shell(self, command: str, author: str = "u1") -> A.ShellRequested:
        return A.ShellRequested(**self._base(), author_id=author, command=command)

    def checkpoint(self, run_id: str, workdir: str = "/work/app") -> A.CheckpointTaken:
        return A.CheckpointTaken(
            **self._base(),
            run_id=run_id,
            workdir=workdir,
            commit=f"c-{run_id}",
            ref=f"refs/spindle/t1/{run_id}",
        )

    def job_done(self, job_id: str, op: str, ok: bool = True, **kw: Any) -> A.WorkspaceJobFinished:
        kw.setdefault("text", f"{op} done")
        return A.WorkspaceJobFinished(**self._base(), job_id=job_id, op=op, ok=ok, **kw)

    def shell_out(self, shell_id: str, text: str, binary: int = 0) -> A.ShellOutput:
        return A.ShellOutput(**self._base(), shell_id=shell_id, text=text, binary_bytes=binary)

    def shell_end(
        self, shell_id: str, outcome: str = "exited", code: int | None = 0
    ) -> A.ShellFinished:
        return A.ShellFinished(
            **self._base(), shell_id=shell_id, outcome=outcome, exit_code=code, duration_s=0.5
        )
