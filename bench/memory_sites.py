"""Where an idle thread actor's memory goes: tracemalloc over N idle actors, top sites.

``python -m bench.memory_sites N [FRAMES]`` runs in a process of its own (tracemalloc slows
everything and its own bookkeeping would blur ``bench/memory.py``'s RSS figures): it opens a
runtime as the memory section does, takes a snapshot, creates N idle threads (one
``/status`` each), takes another, and prints the allocation sites that grew, as bytes per
thread, on its last stdout line as JSON. ``bench/memory.py`` runs it and
``docs/performance.md`` shows the breakdown next to the RSS figures.

tracemalloc counts what Python allocates (objects, frames, dicts); RSS also holds the
allocator's slack, so the sum here is below the RSS per thread.
"""

from __future__ import annotations

import gc
import json
import os
import sys
import tempfile
import tracemalloc
from pathlib import Path

import trio

__all__ = ["measure_sites", "site_rows"]

ROOT = Path(__file__).resolve().parents[1]


def _short(filename: str) -> str:
    """A path relative to the repository, the interpreter's lib or site-packages."""
    for marker in ("site-packages/", "lib/python3."):
        if marker in filename:
            tail = filename.split(marker, 1)[1]
            return tail.split("/", 1)[1] if marker.startswith("lib/") else tail
    try:
        return str(Path(filename).resolve().relative_to(ROOT))
    except ValueError:
        return filename


async def measure_sites(n: int, frames: int = 1, top: int = 15) -> dict:
    from bench.common import bench_runtime
    from threadspindle.testkit.fake_agent import FakeAgentWorld, Step
    from threadspindle.testkit.thread_script import ThreadScript

    world = FakeAgentWorld(script=lambda text: [Step("sleep", seconds=1e9)])
    with tempfile.TemporaryDirectory() as tmp:
        async with bench_runtime(os.path.join(tmp, "sites.db"), world=world) as (rt, _, _):
            await rt.post(ThreadScript("warmup").status())
            await rt.wait_quiet()
            gc.collect()
            tracemalloc.start(frames)
            before = tracemalloc.take_snapshot()
            for i in range(n):
                await rt.post(ThreadScript(f"t{i}").status())
                if i % 500 == 0:
                    await rt.wait_quiet()
            await rt.wait_quiet()
            await trio.sleep(0.2)
            await rt.wait_quiet()
            gc.collect()
            after = tracemalloc.take_snapshot()
            tracemalloc.stop()
    ignore = [tracemalloc.Filter(False, tracemalloc.__file__)]
    before, after = before.filter_traces(ignore), after.filter_traces(ignore)
    by_line = after.compare_to(before, "lineno" if frames == 1 else "traceback")
    by_file = after.compare_to(before, "filename")
    total = sum(s.size_diff for s in by_line)
    sites = []
    for stat in sorted(by_line, key=lambda s: -s.size_diff)[:top]:
        frame_list = [f"{_short(f.filename)}:{f.lineno}" for f in stat.traceback]
        sites.append(
            {
                "site": frame_list[0] if frames == 1 else " < ".join(frame_list),
                "bytes_per_thread": round(stat.size_diff / n),
                "blocks_per_thread": round(stat.count_diff / n, 2),
            }
        )
    files = [
        {"file": _short(s.traceback[0].filename), "bytes_per_thread": round(s.size_diff / n)}
        for s in sorted(by_file, key=lambda s: -s.size_diff)[:top]
    ]
    return {
        "threads": n,
        "traced_bytes_per_thread": round(total / n),
        "sites": sites,
        "files": files,
    }


def site_rows(result: dict) -> list[list[object]]:
    """Report rows: site, bytes per thread, blocks per thread."""
    return [[s["site"], s["bytes_per_thread"], s["blocks_per_thread"]] for s in result["sites"]]


if __name__ == "__main__":
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
    nframes = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    print(json.dumps(trio.run(measure_sites, count, nframes)))
