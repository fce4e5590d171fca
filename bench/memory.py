"""Memory: RSS per idle thread actor and per active one.

Each measurement runs in a fresh child process (``python -m bench.memory MODE N``) so the
numbers are not blurred by what earlier sections allocated. The child opens a runtime,
measures RSS, creates N threads and measures again:

- idle: each thread gets one ``/status`` (an actor, a reactor and a ticker, no agent);
- active: each thread has a conversation with the in-process scripted agent (a live
  listener) and a run in progress.

Then ``bench/memory_sites.py`` breaks the idle threads' memory down by allocation site.
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import tempfile

import trio

from bench.common import bench_runtime, rss_bytes
from bench.memory_sites import run_child
from threadspindle.testkit.fake_agent import FakeAgentWorld, Step
from threadspindle.testkit.thread_script import ThreadScript

__all__ = ["run"]


async def _measure(mode: str, n: int, db: str) -> dict:
    world = FakeAgentWorld(script=lambda text: [Step("sleep", seconds=1e9)])
    async with bench_runtime(db, world=world) as (rt, _, _):
        await rt.post(ThreadScript("warmup").status())
        await rt.wait_quiet()
        gc.collect()
        before = rss_bytes()
        for i in range(n):
            s = ThreadScript(f"t{i}")
            if mode == "idle":
                await rt.post(s.status())
            else:
                await rt.post(s.start("fake", "/tmp", "/tmp"))
                await rt.post(s.user("work"))
            if i % 500 == 0:
                await rt.wait_quiet()
        await rt.wait_quiet()
        await trio.sleep(0.2)  # fake agents take 50 ms to "start"
        await rt.wait_quiet()
        gc.collect()
        after = rss_bytes()
        actors = len(rt.actors())
    return {
        "threads": n,
        "actors": actors,
        "rss_before_mb": round(before / 1e6, 1),
        "rss_after_mb": round(after / 1e6, 1),
        "per_thread_kb": round((after - before) / max(1, n) / 1024, 1),
    }


def _child(mode: str, n: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        print(json.dumps(trio.run(_measure, mode, n, os.path.join(tmp, "mem.db"))))


def run(quick: bool) -> dict:
    result = {}
    for mode, n in (("idle", 200 if quick else 10_000), ("active", 50 if quick else 1_000)):
        out = subprocess.run(
            [sys.executable, "-m", "bench.memory", mode, str(n)],
            capture_output=True,
            text=True,
            timeout=900,
            check=True,
        )
        result[mode] = json.loads(out.stdout.strip().splitlines()[-1])
    # Where the idle threads' memory goes (tracemalloc, a process of its own).
    result["idle_sites"] = run_child(200 if quick else 10_000)
    return result


if __name__ == "__main__":
    _child(sys.argv[1], int(sys.argv[2]))
