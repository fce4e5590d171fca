"""effects.process: stopping whole process trees, even when their root is already gone."""

from __future__ import annotations

import sys
import textwrap

import psutil
import trio

from effects.process import ManagedProcess, group_pids, kill_tree


async def test_stop_kills_a_child_that_ignores_sigterm_and_its_grandchild(tmp_path):
    script = tmp_path / "stubborn.py"
    script.write_text(
        textwrap.dedent("""
        import signal, subprocess, sys, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        print("ready", flush=True)
        time.sleep(600)
    """)
    )
    proc = await ManagedProcess.spawn([sys.executable, str(script)], stdin=False)
    async for line in proc.stdout_lines():
        assert line == "ready"
        break
    tree = [proc.pid] + [c.pid for c in psutil.Process(proc.pid).children(recursive=True)]
    assert len(tree) == 2
    assert await proc.stop(grace=0.5)
    assert not [p for p in tree if psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"]


async def test_the_group_is_stopped_when_its_launcher_already_exited(tmp_path):
    # A launcher (like node's .bin wrapper) starts the real program and exits first.
    script = tmp_path / "launcher.py"
    script.write_text(
        textwrap.dedent("""
        import subprocess, sys
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        print(child.pid, flush=True)
    """)
    )
    proc = await ManagedProcess.spawn([sys.executable, str(script)], stdin=False)
    child_pid = None
    async for line in proc.stdout_lines():
        child_pid = int(line)
        break
    await proc.wait()
    assert child_pid is not None and psutil.pid_exists(child_pid)
    assert child_pid in group_pids(proc.pid)
    assert await kill_tree(proc.pid, grace=1.0, pgid=proc.pid)
    with trio.move_on_after(5):
        while psutil.pid_exists(child_pid) and psutil.Process(child_pid).status() != "zombie":
            await trio.sleep(0.05)
    assert not psutil.pid_exists(child_pid) or psutil.Process(child_pid).status() == "zombie"
