"""Agents die with ``spindle run`` (issue 11.1): a SIGKILLed Spindle takes the genuine Claude
Code CLI's whole tree along within a second, and a restarted Spindle stops whatever the
previous run left running before it resumes anything."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parents[2]
CLAUDE = ROOT / ".agents" / "node_modules" / ".bin" / "claude"


@pytest.fixture
def place(tmp_path: Path) -> dict[str, Path]:
    work = tmp_path / "work"
    work.mkdir()
    home = tmp_path / "home"
    home.mkdir()
    return {
        "work": work,
        "home": home,
        "data": tmp_path / "data",
        "config": tmp_path / "config.toml",
    }


def start_spindle(place: dict[str, Path], *args: str, log: Path) -> subprocess.Popen[str]:
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(place["home"]),
        "SPINDLE_DATA_DIR": str(place["data"]),
        "SPINDLE_CONFIG": str(place["config"]),
        "PYTHONPATH": str(ROOT),
    }
    return subprocess.Popen(
        [sys.executable, "-m", "threadspindle.app.cli", "run", "--no-mcp", *args],
        stdin=subprocess.PIPE,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        text=True,
        cwd=place["work"],
        env=env,
    )


def say(proc: subprocess.Popen[str], line: str) -> None:
    assert proc.stdin is not None
    proc.stdin.write(line + "\n")
    proc.stdin.flush()


def wait_for(predicate, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def live(pids: list[int]) -> list[int]:
    left = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                left.append(pid)
        except psutil.NoSuchProcess:
            pass
    return left


def descendants(pid: int) -> list[int]:
    return [c.pid for c in psutil.Process(pid).children(recursive=True)]


def session_text(home: Path) -> str:
    return "".join(p.read_text() for p in (home / ".claude" / "projects").rglob("*.jsonl"))


def test_a_sigkilled_spindle_takes_the_genuine_claude_tree_along(place, tmp_path):
    """Mid-turn (the model still streaming), `kill -9` of `spindle run`: every process of
    the agent's tree is gone within 1 s, and the session file never gets the answer the old
    CLI was receiving, neither before nor after a restart resumed the session."""
    from threadspindle.testkit.fake_model.anthropic import FakeAnthropic

    assert CLAUDE.exists(), "run `make agents` first"
    fake = FakeAnthropic(slow_chunks=25, slow_delay=0.2)  # a 5 s answer
    fake.start()
    spindle = restarted = None
    tree: list[int] = []
    try:
        place["config"].write_text(
            f"""
[agents.claude]
binary = "{CLAUDE}"
home = "{place["home"]}"
env = {{ ANTHROPIC_BASE_URL = "{fake.base_url}", ANTHROPIC_API_KEY = "sk-ant-fake-key" }}
"""
        )
        spindle = start_spindle(place, "--agent", "claude", log=tmp_path / "first.log")
        say(spindle, "SLOWTEST please")
        wait_for(
            lambda: any("SLOWTEST" in str(r.body) for r in fake.messages_requests()),
            120,
            "the CLI's request to the model",
        )
        time.sleep(1.0)  # a few chunks streamed; the CLI is mid-turn
        tree = descendants(spindle.pid)
        assert any(str(CLAUDE) in " ".join(psutil.Process(p).cmdline()) for p in live(tree))
        assert "chunk24" not in session_text(place["home"])

        spindle.send_signal(signal.SIGKILL)
        spindle.wait()
        killed_at = time.monotonic()
        wait_for(lambda: not live(tree), 1.0, "the agent tree to die with Spindle")
        assert time.monotonic() - killed_at <= 1.0

        # Long enough for the old CLI to have received and written the whole answer.
        time.sleep(6.0)
        assert "chunk24" not in session_text(place["home"])

        restarted = start_spindle(place, "--agent", "claude", log=tmp_path / "second.log")
        say(restarted, "hello again")
        say(restarted, "/wait")
        say(restarted, "/quit")
        assert restarted.wait(timeout=120) == 0, (tmp_path / "second.log").read_text()
        log = (tmp_path / "second.log").read_text()
        assert "Hello from fake model." in log  # the restarted run resumed and answered
        assert "chunk24" not in session_text(place["home"])
        assert not live(tree)
    finally:
        for proc in (spindle, restarted):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
        for pid in live(tree):
            os.kill(pid, signal.SIGKILL)
        fake.stop()


TICKER = """
import os, sys, time
marks = os.environ["MARKS"]
prompt = sys.stdin.read().strip()
def mark(text):
    with open(marks, "a") as f:
        f.write(f"{text} {os.getpid()}\\n")
mark("start-" + prompt)
while prompt == "forever":
    mark("tick")
    time.sleep(0.02)
print("done", prompt)
"""


def test_start_up_stops_what_the_previous_run_left_running_before_resuming(place, tmp_path):
    """A recorded agent tree that survived the kill (its guard stopped, so it cannot act)
    is stopped by the next `spindle run` before that run dispatches the queued prompt: no
    mark of the old process follows the new one's first."""
    script = tmp_path / "ticker.py"
    script.write_text(TICKER)
    marks = tmp_path / "marks.txt"
    place["config"].write_text(
        f"""
[agents.command]
binary = "{sys.executable} {script}"
env = {{ MARKS = "{marks}" }}
"""
    )
    first = start_spindle(place, "--agent", "command", log=tmp_path / "first.log")
    second = None
    try:
        say(first, "forever")
        wait_for(lambda: marks.exists() and "start-forever" in marks.read_text(), 60, "start")
        say(first, "/queue second")
        time.sleep(0.5)  # the queue command is committed
        [old] = [ln.split()[1] for ln in marks.read_text().splitlines() if ln.startswith("start")]
        parent = psutil.Process(int(old)).parent()
        guard = parent if parent and "process_guard" in " ".join(parent.cmdline()) else None
        if guard is not None:
            guard.suspend()  # the guard cannot act on Spindle's death now: the tree survives
        first.send_signal(signal.SIGKILL)
        first.wait()
        time.sleep(1.5)
        assert live([int(old)]), "the stand-in survivor must outlive the first Spindle"

        second = start_spindle(place, "--agent", "command", log=tmp_path / "second.log")
        say(second, "/wait")
        say(second, "/quit")
        assert second.wait(timeout=60) == 0, (tmp_path / "second.log").read_text()
        text = (tmp_path / "second.log").read_text()
        assert "Stopped 1 agent process tree(s) left running by the previous run" in text
        lines = marks.read_text().splitlines()
        new_start = next(i for i, ln in enumerate(lines) if ln.startswith("start-second"))
        assert not [ln for ln in lines[new_start:] if ln == f"tick {old}"]
        assert not live([int(old)] + ([guard.pid] if guard else []))
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
        for pid in live(
            [
                int(ln.split()[1])
                for ln in (marks.read_text().splitlines() if marks.exists() else [])
            ]
        ):
            os.kill(pid, signal.SIGKILL)
