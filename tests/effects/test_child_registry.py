"""effects/child_registry.py: what a previous Spindle recorded and is still running is
stopped at start-up, tree and group; a recycled pid is never signalled."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import psutil
import trio

from threadspindle.effects.child_registry import ChildRegistry, stop_recorded_children
from threadspindle.effects.process import ManagedProcess, record_children, tree_pids

DETACHED = (
    "import subprocess, sys, time, signal\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"  # it must take a SIGKILL
    "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
    "print(c.pid, flush=True)\n"
    "time.sleep(600)\n"
)


def _live(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _name(pid: int) -> str:
    try:
        return str(psutil.Process(pid).name())
    except psutil.Error:
        return ""


def test_a_recorded_survivor_and_its_child_are_stopped(tmp_path):
    path = tmp_path / "agent-processes.json"
    # Started detached, with no guard: nothing but start-up can stop it.
    survivor = subprocess.Popen(
        [sys.executable, "-c", DETACHED], stdout=subprocess.PIPE, start_new_session=True
    )
    assert survivor.stdout is not None
    grandchild = int(survivor.stdout.readline())
    ChildRegistry(path).add(survivor.pid, "claude")
    assert json.loads(path.read_text())["children"][0]["pid"] == survivor.pid
    assert oct(path.stat().st_mode & 0o777) == "0o600"

    stopped = stop_recorded_children(path, grace=0.3)
    survivor.wait(timeout=5)
    assert [(s.pid, s.label, s.gone) for s in stopped] == [(survivor.pid, "claude", True)]
    assert grandchild in stopped[0].pids
    assert not _live(survivor.pid) and not _live(grandchild)
    assert not path.exists()


def test_a_recycled_pid_is_left_alone(tmp_path):
    path = tmp_path / "agent-processes.json"
    bystander = subprocess.Popen(["sleep", "30"])
    try:
        started = psutil.Process(bystander.pid).create_time()
        record = {"pid": bystander.pid, "create_time": started - 100.0, "label": "old"}
        path.write_text(json.dumps({"children": [record]}))
        assert stop_recorded_children(path) == []
        time.sleep(0.1)
        assert bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()


def test_the_group_of_a_dead_leader_is_stopped(tmp_path):
    """The guard itself was killed: its group members are what is left of it."""
    path = tmp_path / "agent-processes.json"
    leader = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess, sys; "
            "c = subprocess.Popen(['sleep', '600']); print(c.pid, flush=True); "
            "sys.stdin.read()",  # alive until recorded (a zombie has no create time)
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    assert leader.stdout is not None and leader.stdin is not None
    member = int(leader.stdout.readline())
    registry = ChildRegistry(path)
    registry.add(leader.pid, "codex")
    leader.stdin.close()
    leader.wait()
    assert _live(member) and os.getpgid(member) == leader.pid
    stopped = stop_recorded_children(path, grace=0.3)
    assert [s.pids for s in stopped] == [(member,)]
    deadline = time.monotonic() + 2
    while _live(member) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not _live(member)


def test_an_unreadable_file_is_ignored(tmp_path):
    path = tmp_path / "agent-processes.json"
    path.write_text("{not json")
    assert stop_recorded_children(path) == []
    assert not path.exists()


async def test_what_a_killed_guard_left_is_stopped_at_the_next_start(tmp_path):
    """The guard alone was SIGKILLed and Spindle died before it saw the guard go: the
    command's own child lives on in the command's group, which the record names."""
    path = tmp_path / "agent-processes.json"
    record_children(ChildRegistry(path))
    try:
        proc = await ManagedProcess.spawn(["sh", "-c", "sleep 300 & echo started; wait"])
        lines = proc.stdout_lines().__aiter__()
        assert await lines.__anext__() == "started"
        deadline = time.monotonic() + 5  # "started" may come before the child's exec
        while not (found := [p for p in tree_pids(proc.pid) if _name(p) == "sleep"]):
            assert time.monotonic() < deadline
            await trio.sleep(0.01)
        [sleeper] = found
        [record] = json.loads(path.read_text())["children"]
        assert record["pid"] == proc.pid and record["group"] == os.getpgid(sleeper)
        os.kill(proc.pid, signal.SIGKILL)  # and nothing waits for it: Spindle is gone too
        deadline = time.monotonic() + 5
        while psutil.Process(proc.pid).status() != psutil.STATUS_ZOMBIE:
            assert time.monotonic() < deadline
            await trio.sleep(0.02)
        assert _live(sleeper)
    finally:
        record_children(None)
    stopped = stop_recorded_children(path, grace=0.3)
    assert [(s.pid, s.gone) for s in stopped] == [(proc.pid, True)]
    assert sleeper in stopped[0].pids and not _live(sleeper)
    await proc.wait()
