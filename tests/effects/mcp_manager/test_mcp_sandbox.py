"""The process manager with the agent sandbox on: a thread's processes stay in its workdir
(else a sandboxed agent could have the manager run, outside, what it may not run itself)."""

from __future__ import annotations

from pathlib import Path

import trio
from mcp_kit import call, call_error, make_config, open_client

from threadspindle.effects.mcp_manager import serve_process_manager
from threadspindle.effects.sandbox import Sandbox

ROOT = Path(__file__).resolve().parents[3]
BWRAP = ROOT / ".tools" / "bubblewrap" / "usr" / "bin" / "bwrap"


async def test_a_sandboxed_thread_process_stays_in_its_workdir(tmp_path, nursery):
    assert BWRAP.exists(), "run `make test` (it unpacks Debian's bubblewrap in .tools/)"
    roots, mine, other = (
        tmp_path / "roots",
        tmp_path / "roots" / "mine",
        tmp_path / "roots" / "other",
    )
    for path in (mine, other):
        path.mkdir(parents=True)
    (other / "secret.txt").write_text("other thread's file")
    sandbox = Sandbox(binary=str(BWRAP), hidden=(str(tmp_path / "data"),), roots=(str(roots),))
    config = make_config(tmp_path, allowed_roots=(roots,), sandbox=sandbox)
    manager = await nursery.start(serve_process_manager, config)
    thread = "thread-sandboxed"
    manager.bind_thread(thread, str(mine))
    async with open_client(manager.url, manager.token_for_thread(thread)) as client:
        text = await call_error(client, "start_process", name="peek", command="cat", cwd=str(other))
        assert "outside this thread's workdir" in text
        # In its own workdir it runs, sandboxed: the other workdir is not there.
        await call(
            client, "start_process", name="look", command="ls", args=[str(other)], cwd=str(mine)
        )
        for _ in range(200):
            out = await call(client, "get_output", name="look")
            if out["status"] != "running" and out["status"] != "starting":
                break
            await trio.sleep(0.05)
    assert "secret.txt" not in out["stdout"] and out["exit_code"] != 0
