"""effects/process_tree.py: the one process-tree watcher (the MCP manager's and the agent
adapters'), with real processes."""

from __future__ import annotations

import psutil
import trio

from threadspindle.effects.process import alive, tree_pids
from threadspindle.effects.process_tree import MAX_DESCENDANTS, ProcessTree, same_process


def _cmdline(pid: int) -> str:
    try:
        return " ".join(psutil.Process(pid).cmdline())
    except psutil.Error:
        return ""


async def test_it_ends_what_a_launcher_left_behind() -> None:
    """The launcher exits first (as node does around the native codex binary): its child is
    no longer in any tree, and the watcher, which saw it, still ends it."""
    # A bare process (no guard: the guard would end the orphan itself, see
    # tests/effects/test_process.py), to test the watcher alone.
    launcher = await trio.lowlevel.open_process(
        ["sh", "-c", "sleep 30 & sleep 0.3"], start_new_session=True
    )
    tree = ProcessTree()  # no root of its own: the roots come by sample(pid)
    with trio.fail_after(5):  # until the background sleep shows up in the tree
        while "sleep 30" not in [_cmdline(p) for p in tree_pids(launcher.pid)]:
            await trio.sleep(0.01)
    tree.sample(launcher.pid)
    await launcher.wait()
    orphans = tree.alive_pids()
    assert [_cmdline(p) for p in orphans] == ["sleep 30"]
    gone, killed = await tree.terminate(grace=2.0)
    assert gone and not killed  # SIGTERM was enough
    assert tree.alive_pids() == [] and alive(orphans) == []


async def test_a_root_with_its_create_time_and_a_bounded_memory() -> None:
    proc = await trio.lowlevel.open_process(["sleep", "30"], start_new_session=True)
    started = psutil.Process(proc.pid).create_time()
    assert same_process(proc.pid, started) and not same_process(proc.pid, started - 100)
    tree = ProcessTree(proc.pid, started)
    assert tree.alive_pids() == [proc.pid]
    stranger = ProcessTree(proc.pid, started - 100)  # the pid, but another process's time
    assert stranger.alive_pids() == []  # never signalled
    tree.descendants = {10**9 + n: 0.0 for n in range(MAX_DESCENDANTS)}  # full, of no one
    tree.sample(1)  # init's whole tree: nothing more is remembered
    assert len(tree.descendants) == MAX_DESCENDANTS
    gone, _ = await tree.terminate(grace=2.0)
    assert gone
    with trio.fail_after(5):
        await proc.wait()
