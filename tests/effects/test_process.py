"""effects.process: stopping whole process trees, even when their root is already gone."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import psutil
import trio

from threadspindle.effects.process import ManagedProcess, group_pids, kill_tree


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
    assert len(tree) == 3  # the guard, the script, its child
    assert await proc.stop(grace=0.5)
    assert not [p for p in tree if psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"]


LAUNCHER = """
import subprocess, sys
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
print(child.pid, flush=True)
"""


def _gone(pid: int) -> bool:
    return not psutil.pid_exists(pid) or psutil.Process(pid).status() == "zombie"


async def test_what_a_command_leaves_behind_is_ended_before_its_exit_is_reported(tmp_path):
    # A launcher (like node's .bin wrapper) starts the real program and exits first: the
    # guard ends the orphan before it exits itself, so nothing outlives the agent.
    script = tmp_path / "launcher.py"
    script.write_text(LAUNCHER)
    proc = await ManagedProcess.spawn([sys.executable, str(script)], stdin=False)
    child_pid = None
    async for line in proc.stdout_lines():
        child_pid = int(line)
        break
    assert await proc.wait() == 0
    assert child_pid is not None and _gone(child_pid)


async def test_the_group_is_stopped_when_its_launcher_already_exited(tmp_path):
    # Without a guard (MCP processes kept across restarts): the group scan finds the orphan.
    script = tmp_path / "launcher.py"
    script.write_text(LAUNCHER)
    proc = await trio.lowlevel.open_process(
        [sys.executable, str(script)], stdout=subprocess.PIPE, start_new_session=True
    )
    assert proc.stdout is not None
    child_pid = int((await proc.stdout.receive_some(100)).decode())
    await proc.wait()
    assert psutil.pid_exists(child_pid)
    assert child_pid in group_pids(proc.pid)
    assert await kill_tree(proc.pid, grace=1.0, pgid=proc.pid)
    with trio.move_on_after(5):
        while psutil.pid_exists(child_pid) and psutil.Process(child_pid).status() != "zombie":
            await trio.sleep(0.05)
    assert not psutil.pid_exists(child_pid) or psutil.Process(child_pid).status() == "zombie"


async def test_feed_stdin_writes_a_prompt_whole_and_closes_it():
    """A prompt larger than a pipe's buffer reaches the process whole and then its end; a
    lone surrogate (text decoded with escapes) is written as '?' instead of raising in
    the feeding task; a process that does not read its stdin is no error."""
    prompt = "a\ud800b " + "x" * 300_000
    proc = await ManagedProcess.spawn(["wc", "-c"], stdin=True)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(proc.feed_stdin, prompt)
        counted = [line async for line in proc.stdout_lines()]
    assert counted == [str(len(prompt.encode("utf-8", "replace")))]
    assert await proc.wait() == 0
    deaf = await ManagedProcess.spawn(["true"], stdin=True)
    await deaf.wait()
    with trio.fail_after(10):
        await deaf.feed_stdin("y" * 300_000)  # its stdin is gone: no exception
