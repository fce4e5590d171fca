"""effects/process_guard.py: a child's whole tree dies with the process that spawned it,
however that one dies, and the child's own exit status comes through the guard."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import psutil
import trio

from threadspindle.effects.process import ManagedProcess, guarded_argv, lifeline_fd, tree_pids

ROOT = Path(__file__).resolve().parents[2]

# A tree with a grandchild that daemonizes (double fork + setsid): it leaves the process
# group and, without a subreaper, would be re-parented to init.
TREE = textwrap.dedent("""
    import os, subprocess, sys, time
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    middle = os.fork()
    if middle == 0:
        os.setsid()
        if os.fork() == 0:
            time.sleep(600)
        os._exit(0)
    os.waitpid(middle, 0)
    time.sleep(0.2)
    print("ready", flush=True)
    time.sleep(600)
""")


def _live(pids: list[int]) -> list[int]:
    left = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                left.append(pid)
        except psutil.NoSuchProcess:
            pass
    return left


def _wait_gone(pids: list[int], timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    while _live(pids) and time.monotonic() < deadline:
        time.sleep(0.01)
    return _live(pids)


async def test_the_child_exit_code_and_its_signal_come_through_the_guard():
    proc = await ManagedProcess.spawn(["sh", "-c", "exit 7"], stdin=False)
    assert await proc.wait() == 7
    proc = await ManagedProcess.spawn(["sh", "-c", "kill -TERM $$"], stdin=False)
    assert await proc.wait() == -signal.SIGTERM


async def test_a_grandchild_that_daemonizes_stays_in_the_guards_tree(tmp_path):
    script = tmp_path / "tree.py"
    script.write_text(TREE)
    proc = await ManagedProcess.spawn([sys.executable, str(script)], stdin=False)
    async for line in proc.stdout_lines():
        assert line == "ready"
        break
    tree = tree_pids(proc.pid)
    # guard, script, its child, and the daemon (re-parented to the guard, its subreaper)
    assert len(tree) == 4, tree
    adopted = [p for p in tree if psutil.Process(p).ppid() == proc.pid]
    assert len(adopted) == 2  # the script and the daemon
    assert await proc.stop(grace=0.5)
    assert _live(tree) == []


# A process that keeps changing its pid: it leaves the group, ignores SIGTERM, and every
# 20 ms forks and lets its parent exit, so a list of pids taken before a SIGKILL misses the
# child forked meanwhile. Its command exits at once, leaving it to the guard's sweep.
HOPPER = textwrap.dedent("""
    import os, signal, sys, time
    if os.fork() == 0:
        os.setsid()
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)
        until = time.monotonic() + 30
        while time.monotonic() < until:
            if os.fork():
                os._exit(0)
            with open(sys.argv[1], "a") as beat:
                beat.write(f"{os.getpid()}\\n")
            time.sleep(0.02)
        os._exit(0)
    time.sleep(0.3)
""")


async def test_a_process_that_keeps_forking_away_is_stopped_by_the_sweep(tmp_path):
    beats = tmp_path / "beats.txt"
    script = tmp_path / "hopper.py"
    script.write_text(HOPPER)
    proc = await ManagedProcess.spawn([sys.executable, str(script), str(beats)], stdin=False)
    assert await proc.wait() == 0  # the guard returns once its sweep is over
    await trio.sleep(0.3)
    seen = beats.read_text().split()
    await trio.sleep(0.3)
    assert beats.read_text().split() == seen, "the hopper is still running"
    assert _live([int(pid) for pid in seen]) == []


SPINDLE_STAND_IN = textwrap.dedent("""
    import json, sys, trio
    from threadspindle.effects.process import ManagedProcess, tree_pids

    async def main():
        proc = await ManagedProcess.spawn([sys.executable, sys.argv[1]], stdin=False)
        async for line in proc.stdout_lines():
            break
        await trio.sleep(0.3)
        print(json.dumps(tree_pids(proc.pid)), flush=True)
        await trio.sleep(600)

    trio.run(main)
""")


def test_the_whole_tree_is_gone_within_a_second_of_a_sigkill_of_its_spawner(tmp_path):
    """The lifeline: the spawner (a stand-in for Spindle, using the same spawn) is SIGKILLed;
    every process of the tree, the daemonized grandchild too, is gone within 1 s."""
    script = tmp_path / "tree.py"
    script.write_text(TREE)
    stand_in = subprocess.Popen(
        [sys.executable, "-c", SPINDLE_STAND_IN, str(script)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        assert stand_in.stdout is not None
        tree = json.loads(stand_in.stdout.readline())
        assert len(_live(tree)) == 4
        stand_in.kill()
        stand_in.wait()
        killed_at = time.monotonic()
        left = _wait_gone(tree, 1.0)
        assert left == [], f"still alive {time.monotonic() - killed_at:.2f} s after the kill"
    finally:
        stand_in.kill()
        for pid in _live(tree if "tree" in locals() else []):
            os.kill(pid, signal.SIGKILL)


def test_the_guard_does_not_depend_on_the_thread_that_forked_it():
    """The parent-death signal fires when the *thread* that forked ends (trio forks in worker
    threads that end after 10 s idle): the guard's lifeline does not, so the child lives on."""
    spawned: list[subprocess.Popen[bytes]] = []

    def spawn() -> None:
        spawned.append(
            subprocess.Popen(
                guarded_argv(["sleep", "30"]),
                pass_fds=(lifeline_fd(),),
                start_new_session=True,
            )
        )

    worker = threading.Thread(target=spawn)
    worker.start()
    worker.join()
    [guard] = spawned
    try:
        time.sleep(0.5)
        assert guard.poll() is None
        tree = tree_pids(guard.pid)
        assert len(_live(tree)) == 2  # the guard and sleep
    finally:
        os.killpg(guard.pid, signal.SIGKILL)
        guard.wait()


async def test_a_killed_guard_takes_its_child_along():
    """If the guard itself is SIGKILLed (the OOM killer), its child gets the parent-death
    signal the guard set for it."""
    proc = await ManagedProcess.spawn(["sleep", "30"], stdin=False)
    await trio.sleep(0.2)
    [child] = tree_pids(proc.pid)[1:]
    os.kill(proc.pid, signal.SIGKILL)
    await proc.wait()
    assert _wait_gone([child], 1.0) == []


COUNTER = textwrap.dedent("""
    import signal, sys, time
    got = []
    signal.signal(signal.SIGINT, lambda *_: got.append("INT"))
    signal.signal(signal.SIGUSR1, lambda *_: got.append("USR1"))
    print("ready", flush=True)
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:
        time.sleep(0.05)
    print(" ".join(got), flush=True)
""")


async def test_a_signal_to_the_guard_reaches_the_command_exactly_once(tmp_path):
    """Spindle interrupts with SIGINT to the group; an agent may `kill` the pid it was told:
    either way the command gets the signal once (a second SIGINT makes CLIs quit)."""
    script = tmp_path / "counter.py"
    script.write_text(COUNTER)
    proc = await ManagedProcess.spawn([sys.executable, str(script)], stdin=False)
    lines = proc.stdout_lines().__aiter__()
    assert await lines.__anext__() == "ready"
    proc.signal(signal.SIGINT)  # to the guard's process group
    await trio.sleep(0.2)
    os.kill(proc.pid, signal.SIGUSR1)  # to the guard's pid alone
    assert await lines.__anext__() == "INT USR1"
    assert await proc.wait() == 0


async def test_a_command_killed_by_sigkill_is_reported_as_killed():
    proc = await ManagedProcess.spawn(["sh", "-c", "kill -KILL $$"], stdin=False)
    assert await proc.wait() == -signal.SIGKILL


# A command that starts a child of its own (in the command's process group) and waits.
STARTS_A_CHILD = ["sh", "-c", "sleep 300 & echo started; wait"]


def _sleeper(guard: int) -> int:
    """The command's child, once it runs ``sleep`` (``started`` may come before its exec)."""
    deadline = time.monotonic() + 5
    while True:
        found = [p for p in tree_pids(guard) if _name(p) == "sleep"]
        if found or time.monotonic() > deadline:
            [pid] = found
            return pid
        time.sleep(0.01)


def _name(pid: int) -> str:
    try:
        return str(psutil.Process(pid).name())
    except psutil.Error:
        return ""


async def test_what_a_killed_guards_command_started_is_stopped_when_the_guard_goes():
    """The guard alone is SIGKILLed (the OOM killer, an agent's `kill -9`): the command dies
    with it (parent-death signal), but the command's own child had no guard left to sweep
    it. The guard named the command's group at spawn; waiting for the guard stops the rest
    of that group."""
    proc = await ManagedProcess.spawn(STARTS_A_CHILD, stdin=False)
    lines = proc.stdout_lines().__aiter__()
    assert await lines.__anext__() == "started"
    sleeper = _sleeper(proc.pid)
    assert proc.command_pid is not None and os.getpgid(sleeper) == proc.command_pid
    os.kill(proc.pid, signal.SIGKILL)
    with trio.fail_after(5):
        assert await proc.wait() == -signal.SIGKILL
    assert _live([sleeper]) == []  # stopped by then, not left to run on
