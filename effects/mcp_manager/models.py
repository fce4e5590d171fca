"""The typed surface of the process manager: its configuration, what it persists, and what
its tools return. Tool inputs are the tools' own typed parameters (see ``server.py``).

Everything here is a pydantic model, so the MCP SDK derives JSON schemas for the tool
outputs and the state file round-trips through ``model_dump_json``/``model_validate_json``.
"""

from __future__ import annotations

import enum
import ipaddress
from pathlib import Path

import platformdirs
from pydantic import BaseModel, ConfigDict, Field, field_validator

from threadspindle.effects.sandbox import Sandbox

__all__ = [
    "DEFAULT_PORT",
    "OutputResult",
    "ProcessInfo",
    "ProcessList",
    "ProcessManagerConfig",
    "ProcessRecord",
    "ProcessStatus",
    "StateFile",
    "StopResult",
]

DEFAULT_PORT = 0  # any free port: two Spindles (or anything on a fixed port) never collide
LIVE = frozenset({"starting", "running", "stopping"})


class ProcessStatus(enum.StrEnum):
    """Where a managed process is in its life.

    ``lost`` is the one status beyond the issue's five: a process recorded as running when
    Spindle stopped that was no longer there (same pid and start time) when it came back."""

    starting = "starting"
    running = "running"
    stopping = "stopping"
    stopped = "stopped"  # ended on request, or exited with code 0
    failed = "failed"  # exited by itself with a non-zero code (or by a signal)
    lost = "lost"

    @property
    def live(self) -> bool:
        return self.value in LIVE


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class ProcessManagerConfig(BaseModel):
    """How the manager runs; built by ``spindle run``/``spindle mcp`` from the config file."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    host: str = "127.0.0.1"
    port: int = Field(default=DEFAULT_PORT, ge=0, le=65535)  # 0: any free port
    path: str = "/mcp"
    # The operator token. None: read ``<data_dir>/mcp-token``, creating it on first use, so
    # thread tokens (derived from it) stay valid across a restart (``spindle mcp``);
    # ``spindle run`` makes one in memory instead, so no agent can find it in a file.
    token: str | None = None
    data_dir: Path = Field(default_factory=lambda: platformdirs.user_data_path("spindle"))
    allowed_roots: tuple[Path, ...] = Field(default_factory=lambda: (Path.home(),))
    ring_buffer_chars: int = Field(default=200_000, gt=0)  # per stream, per process
    ring_buffer_lines: int | None = Field(default=5000, gt=0)  # per stream, per process
    # On disk per stream: the file being written and the one before, each at most half of
    # this (output_writer.py rotates them while the process writes).
    max_log_bytes: int = Field(default=8 * 1024 * 1024, ge=1024)
    # A line longer than this is cut (and marked) on its way into the ring.
    max_line_bytes: int = Field(default=64 * 1024, gt=0)
    # Read per stream per poll at most; a larger backlog is skipped to its newest part.
    max_read_bytes: int = Field(default=256 * 1024, gt=0)
    max_processes_per_thread: int = Field(default=8, gt=0)  # live ones (starting/running/stopping)
    max_records_per_thread: int = Field(default=32, gt=0)  # finished ones are forgotten past this
    stop_grace_s: float = Field(default=5.0, ge=0)  # SIGTERM -> SIGKILL
    keep_on_shutdown: bool = False  # False: processes die with Spindle (under the guard)
    sandbox: Sandbox | None = None  # run processes in bubblewrap, seeing the thread's workdir
    poll_interval_s: float = Field(default=0.05, gt=0)  # how often output files are read
    # MCP sessions (session_quota.py): a thread's share of them, its least recently used
    # idle one ended to make room for a new one; one without a request in flight this long
    # is closed (the SDK's rule, given the same figure).
    max_sessions_per_thread: int = Field(default=16, gt=0)
    session_idle_s: float = Field(default=1800.0, gt=0)
    # Connections held open at once (every agent can reach the server): a new one past this
    # is closed at once (``effects/connection_cap.py``), so a flood of them costs this
    # server its service while it lasts, never the process its descriptors. An agent's
    # client holds one to three.
    max_connections: int = Field(default=4096, gt=0)

    @field_validator("host")
    @classmethod
    def _loopback_only(cls, host: str) -> str:
        if not _is_loopback(host):
            raise ValueError(f"the process manager listens on loopback only, not {host!r}")
        return host


class ProcessRecord(BaseModel):
    """One managed process as persisted in the state file (mutable: the supervisor owns it)."""

    model_config = ConfigDict(extra="ignore")

    thread_id: str
    name: str
    command: str
    args: list[str] = []
    cwd: str
    env: dict[str, str] = {}  # only what the caller added to Spindle's environment
    status: ProcessStatus = ProcessStatus.starting
    pid: int | None = None
    create_time: float | None = None  # psutil create_time: pid + this identify the process
    exit_code: int | None = None  # negative: killed by that signal
    started_at: float | None = None  # wall-clock seconds
    stopped_at: float | None = None
    restarts: int = 0
    error: str | None = None
    # Output files: ``<path>.<generation>.log`` (output_writer.py); a path per start.
    stdout_path: str = ""
    stderr_path: str = ""
    stdout_generation: int = 0  # the file being read, which the offset and marks are in
    stderr_generation: int = 0
    stdout_offset: int = 0  # bytes of that file already in the ring
    stderr_offset: int = 0
    stdout_marks: list[tuple[int, int]] = []  # (seq, end offset) of the newest chunks
    stderr_marks: list[tuple[int, int]] = []
    last_seq: int = 0
    seq_ceiling: int = 0  # numbers up to this may have been handed out


class StateFile(BaseModel):
    model_config = ConfigDict(extra="ignore")

    version: int = 1
    processes: list[ProcessRecord] = []


class ProcessInfo(BaseModel):
    """What the tools report about one process."""

    name: str
    thread_id: str
    status: ProcessStatus
    command: str
    args: list[str]
    cwd: str
    pid: int | None
    exit_code: int | None
    started_at: float | None
    stopped_at: float | None
    restarts: int
    adopted: bool = Field(description="found again after a restart of Spindle")
    error: str | None = None
    already_running: bool = Field(
        False, description="start_process found it running and left it alone"
    )

    def summary(self, now: float) -> str:
        """One line for ``/status``: ``web: running, pid 4242, up 3m12s``."""
        if self.status.live and self.started_at is not None:
            state = f"{self.status.value}, pid {self.pid}, up {_duration(now - self.started_at)}"
        elif self.status is ProcessStatus.lost:
            state = "lost (gone when Spindle restarted)"
        else:
            code = "" if self.exit_code is None else f" (exit {self.exit_code})"
            ago = "" if self.stopped_at is None else f", {_duration(now - self.stopped_at)} ago"
            state = f"{self.status.value}{code}{ago}"
        return f"{self.name}: {state}"


def _duration(seconds: float) -> str:
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


class StopResult(BaseModel):
    process: ProcessInfo
    tree_gone: bool = Field(description="psutil confirmed that no process of its tree is left")
    escalated: bool = Field(description="SIGKILL was needed")


class ProcessList(BaseModel):
    processes: list[ProcessInfo]


class OutputResult(BaseModel):
    name: str
    status: ProcessStatus
    pid: int | None
    exit_code: int | None
    stdout: str
    stderr: str
    last_seq: int = Field(description="pass as since_seq to read only newer output")
    truncated: bool = Field(description="some of the requested output is not included")
