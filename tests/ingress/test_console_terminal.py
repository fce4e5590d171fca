"""``spindle run`` in a real terminal (a pseudo-terminal): the interactive prompt with its
status, streaming output above it, and a clean exit."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07|\x1b[=>]")


class Terminal:
    def __init__(self, argv: list[str], env: dict[str, str], cwd: Path) -> None:
        self.master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
        self.proc = subprocess.Popen(
            argv,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=env,
            cwd=cwd,
            start_new_session=True,
        )
        os.close(slave)
        self.screen = ""

    def read_until(self, needle: str, timeout: float = 30.0) -> str:
        deadline = time.monotonic() + timeout
        while needle not in ANSI.sub("", self.screen):
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{needle!r} never appeared; screen:\n{ANSI.sub('', self.screen)}"
                )
            try:
                chunk = os.read(self.master, 65536)
            except OSError:
                break
            self.screen += chunk.decode("utf-8", "replace")
        return ANSI.sub("", self.screen)

    def type(self, text: str) -> None:
        os.write(self.master, text.encode() + b"\r")


def test_the_terminal_prompt_shows_status_and_streams_answers(tmp_path: Path):
    work = tmp_path / "work"
    work.mkdir()
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "TERM": "xterm-256color",
        "PYTHONPATH": str(ROOT),
        "SPINDLE_DATA_DIR": str(tmp_path / "data"),
        "SPINDLE_CONFIG": str(tmp_path / "none.toml"),
    }
    term = Terminal([sys.executable, "-m", "threadspindle.app.cli", "run", "--no-mcp"], env, work)
    try:
        term.read_until("[main · echo · queue 0] >")
        term.type("one two three four five six seven eight")
        term.read_until("running")  # the prompt shows the active run
        term.type("/queue after that")
        term.read_until("queue 1]")  # ... and the queue length
        screen = term.read_until("» you: after that")
        assert "one two three four five six seven eight" in screen
        term.read_until("echo (demo agent)")
        term.type("/quit")
        assert term.proc.wait(timeout=30) == 0
    finally:
        if term.proc.poll() is None:
            term.proc.kill()
        os.close(term.master)
