"""The process list survives a restart of the manager: a process still running is adopted
again (same pid and create time) with its output, one that died meanwhile is reported lost,
and a stopped manager stops its processes unless told to keep them."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import psutil
import trio
from mcp_kit import (
    TOKEN,
    Scripts,
    alive,
    call,
    launch_manager,
    make_config,
    open_client,
    wait_for_output,
)

from threadspindle.effects.mcp_manager import serve_process_manager

THREAD = {"X-Spindle-Thread": "thread-persist"}

COUNTER = """
import time
n = 0
while True:
    n += 1
    print(f"line {n}", flush=True)
    time.sleep(0.05)
"""


async def _run_manager_once(tmp_path: Path, scripts: Scripts, name: str, **config) -> dict:
    """Start a manager with keep_on_shutdown, start one process, stop the manager."""
    async with trio.open_nursery() as nursery:
        manager = await nursery.start(
            serve_process_manager, make_config(tmp_path, keep_on_shutdown=True, **config)
        )
        async with open_client(manager.url, TOKEN, THREAD) as client:
            started = await call(client, "start_process", **scripts.start_args(name, COUNTER))
            out = await wait_for_output(client, name, "line 3")
        nursery.cancel_scope.cancel()
    assert alive(started["pid"])  # kept running through the shutdown
    return {"started": started, "output": out}


def _reap(pid: int) -> None:
    # These processes are children of the test process: collect the zombie.
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


async def test_a_running_process_is_adopted_after_a_restart(
    nursery: trio.Nursery, tmp_path: Path, scripts: Scripts
) -> None:
    before = await _run_manager_once(tmp_path, scripts, "counter")
    pid = before["started"]["pid"]
    await trio.sleep(0.3)  # output written while no manager is running

    manager = await nursery.start(serve_process_manager, make_config(tmp_path))
    assert manager.supervisor.statistics().adopted == 1
    async with open_client(manager.url, TOKEN, THREAD) as client:
        listed = (await call(client, "list_processes"))["processes"]
        assert len(listed) == 1
        proc = listed[0]
        assert proc["pid"] == pid and proc["status"] == "running" and proc["adopted"] is True

        # The output from before the restart is still there, and nothing is missing after it.
        out = await call(client, "get_output", name="counter", tail=100_000)
        assert out["stdout"].startswith("line 1\nline 2\nline 3\n")
        numbers = [int(line.split()[1]) for line in out["stdout"].splitlines()]
        assert numbers == list(range(1, len(numbers) + 1))
        # A caller holding the old last_seq reads only output it has not seen.
        newer = await call(
            client, "get_output", name="counter", since_seq=before["output"]["last_seq"]
        )
        assert "line 1\n" not in newer["stdout"]

        stopped = await call(client, "stop_process", name="counter")
        assert stopped["tree_gone"] is True and stopped["process"]["status"] == "stopped"
    _reap(pid)
    assert not alive(pid)


async def test_a_process_that_died_meanwhile_is_reported_lost(
    nursery: trio.Nursery, tmp_path: Path, scripts: Scripts
) -> None:
    before = await _run_manager_once(tmp_path, scripts, "doomed")
    pid = before["started"]["pid"]
    os.kill(pid, signal.SIGKILL)
    with trio.fail_after(5):
        while alive(pid):
            await trio.sleep(0.02)
    _reap(pid)

    manager = await nursery.start(serve_process_manager, make_config(tmp_path))
    async with open_client(manager.url, TOKEN, THREAD) as client:
        proc = (await call(client, "list_processes"))["processes"][0]
        assert proc["status"] == "lost" and proc["adopted"] is False
        assert "gone when Spindle restarted" in proc["error"]
        out = await call(client, "get_output", name="doomed")
        assert "line 1\n" in out["stdout"]  # what it wrote is still readable
        # And it can be started again under the same name.
        again = await call(client, "restart_process", name="doomed")
        assert again["status"] == "running" and again["pid"] != pid


async def test_a_recycled_pid_is_not_adopted(
    nursery: trio.Nursery, tmp_path: Path, scripts: Scripts
) -> None:
    before = await _run_manager_once(tmp_path, scripts, "imposter")
    pid = before["started"]["pid"]
    # Same pid, another start time: what a recycled pid looks like.
    state = tmp_path / "data" / "mcp-processes.json"
    data = json.loads(state.read_text())
    data["processes"][0]["create_time"] -= 1000.0
    state.write_text(json.dumps(data))
    try:
        manager = await nursery.start(serve_process_manager, make_config(tmp_path))
        proc = manager.processes_for_thread("thread-persist")[0]
        assert proc.status == "lost"
        assert alive(pid)  # and it was not signalled
    finally:
        os.kill(pid, signal.SIGKILL)
        _reap(pid)


async def test_shutdown_stops_processes_unless_kept(tmp_path: Path, scripts: Scripts) -> None:
    async with trio.open_nursery() as nursery:
        manager = await nursery.start(serve_process_manager, make_config(tmp_path))
        async with open_client(manager.url, TOKEN, THREAD) as client:
            started = await call(client, "start_process", **scripts.start_args("c", COUNTER))
        nursery.cancel_scope.cancel()
    assert not alive(started["pid"])
    state = (tmp_path / "data" / "mcp-processes.json").read_text()
    assert '"status": "stopped"' in state


async def test_spindle_mcp_killed_and_started_again_adopts_its_kept_orphan(
    tmp_path: Path, scripts: Scripts
) -> None:
    """The real thing: ``python -m threadspindle.effects.mcp_manager`` (= ``spindle mcp``) with
    ``--keep-on-shutdown`` is SIGKILLed; its process lives on (own session, no guard), and
    the next one finds it, reads it, stops it."""
    first, url = await launch_manager(tmp_path, "--keep-on-shutdown")
    try:
        async with open_client(url, TOKEN, THREAD) as client:
            started = await call(client, "start_process", **scripts.start_args("orphan", COUNTER))
            await wait_for_output(client, "orphan", "line 2")
    finally:
        first.kill()
        await first.wait()
    pid = started["pid"]
    await trio.sleep(0.3)
    assert alive(pid)
    assert psutil.Process(pid).ppid() != first.pid

    second, url = await launch_manager(tmp_path)
    try:
        async with open_client(url, TOKEN, THREAD) as client:
            # Kept processes are adopted; this manager stops them when it stops.
            proc = (await call(client, "list_processes"))["processes"][0]
            assert proc["pid"] == pid and proc["adopted"] is True and proc["status"] == "running"
            out = await call(client, "get_output", name="orphan", tail=100_000)
            numbers = [int(line.split()[1]) for line in out["stdout"].splitlines()]
            assert numbers[:3] == [1, 2, 3] and numbers == list(range(1, len(numbers) + 1))
        # SIGTERM: a clean shutdown, which stops the managed processes.
        second.send_signal(signal.SIGTERM)
        with trio.fail_after(15):
            code = await second.wait()
        assert code == 0
    finally:
        if second.returncode is None:
            second.kill()
            await second.wait()
    with trio.fail_after(5):
        while alive(pid):
            await trio.sleep(0.02)


async def test_a_process_not_kept_dies_with_a_sigkilled_manager(
    tmp_path: Path, scripts: Scripts
) -> None:
    """Without ``keep_on_shutdown`` a managed process runs under the guard: when ``spindle
    mcp`` is SIGKILLed its whole tree is gone within a second, and the next manager
    reports it lost instead of adopting it."""
    proc, url = await launch_manager(tmp_path)
    try:
        async with open_client(url, TOKEN, THREAD) as client:
            started = await call(client, "start_process", **scripts.start_args("mortal", COUNTER))
            await wait_for_output(client, "mortal", "line 2")
        tree = [started["pid"]] + [
            c.pid for c in psutil.Process(started["pid"]).children(recursive=True)
        ]
        assert len(tree) >= 2  # the guard and the script
    finally:
        proc.kill()
        await proc.wait()
    with trio.fail_after(1.0):
        while any(alive(pid) for pid in tree):
            await trio.sleep(0.02)
    async with trio.open_nursery() as nursery:
        manager = await nursery.start(serve_process_manager, make_config(tmp_path))
        async with open_client(manager.url, TOKEN, THREAD) as client:
            [info] = (await call(client, "list_processes"))["processes"]
            assert info["status"] == "lost" and info["adopted"] is False
        nursery.cancel_scope.cancel()
