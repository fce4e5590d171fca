"""stop_process over HTTP: SIGTERM then SIGKILL for a child that ignores SIGTERM, a whole tree
with grandchildren (one of which left the process group) gone for psutil, and force."""

from __future__ import annotations

import os
import time
from pathlib import Path

import psutil
import trio
from mcp_kit import TOKEN, Scripts, alive, call, make_config, open_client, wait_for_output

from threadspindle.effects.mcp_manager import ProcessManager, serve_process_manager

THREAD = {"X-Spindle-Thread": "thread-stop"}

STUBBORN = """
import signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("ignoring SIGTERM", flush=True)
while True:
    time.sleep(1)
"""

# Each line in one write: print() writes its words, separators and end one by one, and two
# processes of the tree printing at once interleaved them ("grandchild grandchild353\n 352").
SAY = "def say(who):\n    os.write(1, f'{who} {os.getpid()}\\n'.encode())\n"

# A parent with two children, each with a child of its own; the second grandchild calls
# setsid() (leaves the group, as daemons do) and ignores SIGTERM.
TREE = (
    """
import os, signal, subprocess, sys, time
"""
    + SAY
    + """
level = sys.argv[1] if len(sys.argv) > 1 else "root"
me = os.path.abspath(__file__)
if level == "root":
    kids = [subprocess.Popen([sys.executable, "-u", me, "child", str(i)]) for i in range(2)]
    say("root")
elif level == "child":
    kid = subprocess.Popen([sys.executable, "-u", me, "grandchild", sys.argv[2]])
    say("child")
else:
    if sys.argv[2] == "1":
        os.setsid()
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    say("grandchild")
while True:
    time.sleep(1)
"""
)

# The classic daemon: the middle process starts a grandchild in a new session, lingers a
# moment, and exits, so the grandchild is re-parented away from our tree.
DAEMON = (
    """
import os, signal, subprocess, sys, time
"""
    + SAY
    + """
me = os.path.abspath(__file__)
if len(sys.argv) == 1:
    subprocess.Popen([sys.executable, "-u", me, "middle"])
    say("root")
elif sys.argv[1] == "middle":
    subprocess.Popen([sys.executable, "-u", me, "daemon"], start_new_session=True)
    time.sleep(1.2)
    sys.exit(0)
else:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    say("daemon")
while True:
    time.sleep(1)
"""
)


async def test_stop_escalates_to_sigkill_for_a_child_ignoring_sigterm(
    manager: ProcessManager, scripts: Scripts
) -> None:
    async with open_client(manager.url, TOKEN, THREAD) as client:
        started = await call(client, "start_process", **scripts.start_args("stubborn", STUBBORN))
        await wait_for_output(client, "stubborn", "ignoring SIGTERM")
        t0 = time.monotonic()
        stopped = await call(client, "stop_process", name="stubborn")
        took = time.monotonic() - t0
        assert stopped["escalated"] is True
        assert stopped["tree_gone"] is True
        assert stopped["process"]["status"] == "stopped"
        assert stopped["process"]["exit_code"] == -9  # SIGKILL
        assert took >= 1.0  # the grace period (stop_grace_s=1.0) was honoured first
        assert not alive(started["pid"])


async def test_a_polite_process_ends_with_sigterm_alone(
    manager: ProcessManager, scripts: Scripts
) -> None:
    async with open_client(manager.url, TOKEN, THREAD) as client:
        src = "import time\nprint('up', flush=True)\nwhile True: time.sleep(1)"
        await call(client, "start_process", **scripts.start_args("polite", src))
        await wait_for_output(client, "polite", "up")
        stopped = await call(client, "stop_process", name="polite")
        assert stopped["escalated"] is False
        assert stopped["process"]["exit_code"] == -15  # SIGTERM
        # Stopping it again is harmless.
        again = await call(client, "stop_process", name="polite")
        assert again["tree_gone"] is True and again["process"]["status"] == "stopped"


async def test_stop_leaves_no_process_of_the_tree(
    manager: ProcessManager, scripts: Scripts
) -> None:
    async with open_client(manager.url, TOKEN, THREAD) as client:
        started = await call(client, "start_process", **scripts.start_args("tree", TREE))
        with trio.fail_after(15):
            while True:
                out = await call(client, "get_output", name="tree")
                # Five whole lines (under load a line may be read before its end is written).
                lines = [line.split() for line in out["stdout"].splitlines()]
                if len(lines) == 5 and all(len(words) == 2 for words in lines):
                    break
                await trio.sleep(0.05)
        pids = [int(line.split()[1]) for line in out["stdout"].splitlines()]
        # started["pid"] is the guard's (it leads the group; signals to it are forwarded)
        assert len(pids) == 5 and psutil.Process(pids[0]).ppid() == started["pid"]
        escaped = [p for p in pids if os.getsid(p) != os.getsid(pids[0])]
        assert len(escaped) == 1  # one grandchild really left the session
        # Let the watcher see the tree at least once (it samples every half second).
        await trio.sleep(0.7)
        stopped = await call(client, "stop_process", name="tree")
        assert stopped["tree_gone"] is True
        assert stopped["escalated"] is True  # the escaped grandchild ignored SIGTERM
        left = [p for p in pids if alive(p)]
        assert left == []


async def test_force_kills_at_once(manager: ProcessManager, scripts: Scripts) -> None:
    async with open_client(manager.url, TOKEN, THREAD) as client:
        started = await call(client, "start_process", **scripts.start_args("stubborn", STUBBORN))
        await wait_for_output(client, "stubborn", "ignoring SIGTERM")
        t0 = time.monotonic()
        stopped = await call(client, "stop_process", name="stubborn", force=True)
        assert time.monotonic() - t0 < 1.0  # no grace period
        assert stopped["tree_gone"] is True
        assert stopped["process"]["exit_code"] == -9
        assert not alive(started["pid"])


async def test_disposing_a_thread_stops_only_its_processes(
    manager: ProcessManager, scripts: Scripts
) -> None:
    src = "import time\nprint('up', flush=True)\nwhile True: time.sleep(1)"
    async with open_client(manager.url, manager.token_for_thread("t-a")) as a:
        pa = await call(a, "start_process", **scripts.start_args("srv", src))
    async with open_client(manager.url, manager.token_for_thread("t-b")) as b:
        pb = await call(b, "start_process", **scripts.start_args("srv", src))
    assert [p.name for p in manager.processes_for_thread("t-a")] == ["srv"]
    results = await manager.stop_thread_processes("t-a")
    assert [r.process.status for r in results] == ["stopped"]
    assert not alive(pa["pid"])
    assert alive(pb["pid"])
    assert manager.processes_for_thread("t-b")[0].status == "running"


async def test_a_daemon_that_left_the_tree_is_still_stopped(
    nursery: trio.Nursery, tmp_path: Path, scripts: Scripts
) -> None:
    # Kept processes run without the guard (whose subreaper would keep the daemon in the
    # tree, see the next test): the remembered descendants find it all the same.
    config = make_config(tmp_path, keep_on_shutdown=True)
    manager = await nursery.start(serve_process_manager, config)
    async with open_client(manager.url, TOKEN, THREAD) as client:
        started = await call(client, "start_process", **scripts.start_args("daemon", DAEMON))
        out = await wait_for_output(client, "daemon", "daemon ")
        daemon = int(out["stdout"].split("daemon ")[1].split()[0])
        # Wait until its parent has exited: it is no descendant of ours any more.
        with trio.fail_after(10):
            while daemon in [c.pid for c in psutil.Process(started["pid"]).children(True)]:
                await trio.sleep(0.1)
        assert alive(daemon)
        stopped = await call(client, "stop_process", name="daemon")
        assert stopped["tree_gone"] is True
        assert not alive(daemon)
        assert not alive(started["pid"])


async def test_under_the_guard_a_daemon_never_leaves_the_tree(
    manager: ProcessManager, scripts: Scripts
) -> None:
    async with open_client(manager.url, TOKEN, THREAD) as client:
        started = await call(client, "start_process", **scripts.start_args("daemon", DAEMON))
        out = await wait_for_output(client, "daemon", "daemon ")
        daemon = int(out["stdout"].split("daemon ")[1].split()[0])
        await trio.sleep(1.5)  # its parent has exited: it was re-parented to the guard
        assert psutil.Process(daemon).ppid() == started["pid"]
        stopped = await call(client, "stop_process", name="daemon")
        assert stopped["tree_gone"] is True
        assert not alive(daemon)
