"""Where an idle thread actor's memory goes: tracemalloc over N idle actors, top sites.

``python -m bench.memory_sites N`` runs in a process of its own (tracemalloc slows
everything and its own bookkeeping would blur ``bench/memory.py``'s RSS figures): it opens a
runtime as the memory section does, takes a snapshot, creates N idle threads (one
``/status`` each), takes another, and prints what grew, as bytes per thread, on its last
stdout line as JSON. Each allocation is charged to the innermost line of Spindle's own code
that led to it (the line to change), with the innermost line overall (how the memory was
taken: a trio channel, a pydantic model) beside it. ``bench/memory.py`` runs it and
``bench/memory_report.py`` renders it in ``docs/performance.md``.

tracemalloc counts what Python allocates (objects, frames, dicts); RSS also holds the
allocator's slack, so the sum here is below the RSS per thread.
"""

from __future__ import annotations

import collections
import gc
import json
import linecache
import os
import subprocess
import sys
import tempfile
import tracemalloc
from pathlib import Path

import trio

__all__ = ["measure_sites", "run_child"]

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


PROJECT = ("runtime/", "effects/", "agents/", "ingress/", "app/", "testkit/")


def _site_of(traceback: tracemalloc.Traceback) -> tuple[str, str]:
    """(the innermost project line, the innermost line) of an allocation: the project line
    is what to change, the other how the memory was taken (a trio or pydantic internal)."""
    frames = [f"{_short(f.filename)}:{f.lineno}" for f in reversed(traceback)]
    project = next((f for f in frames if f.startswith(PROJECT)), "(elsewhere)")
    return project, frames[0]


def _source(site: str) -> str:
    path, _, lineno = site.rpartition(":")
    if not lineno.isdigit():
        return ""
    return linecache.getline(str(ROOT / path), int(lineno)).strip()


async def measure_sites(n: int, frames: int = 12, top: int = 12) -> dict:
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
    diffs = after.filter_traces(ignore).compare_to(before.filter_traces(ignore), "traceback")
    by_site: dict[str, list[int]] = {}
    via: dict[str, collections.Counter[str]] = {}
    for stat in diffs:
        project, inner = _site_of(stat.traceback)
        entry = by_site.setdefault(project, [0, 0])
        entry[0] += stat.size_diff
        entry[1] += stat.count_diff
        via.setdefault(project, collections.Counter())[inner] += stat.size_diff
    total = sum(size for size, _ in by_site.values())
    ranked = sorted(by_site.items(), key=lambda item: -item[1][0])
    sites = []
    for site, (size, count) in ranked[:top]:
        inner = via[site].most_common(1)[0][0]
        sites.append(
            {
                "site": site,
                "code": _source(site),
                "via": "" if inner == site else inner,
                "bytes_per_thread": round(size / n),
                "blocks_per_thread": round(count / n, 2),
            }
        )
    rest = sum(size for _, (size, _) in ranked[top:])
    return {
        "threads": n,
        "frames": frames,
        "traced_bytes_per_thread": round(total / n),
        "sites": sites,
        "rest_bytes_per_thread": round(rest / n),
    }


def run_child(n: int) -> dict:
    """``measure_sites(n)`` in a process of its own (``bench/memory.py`` calls this)."""
    out = subprocess.run(
        [sys.executable, "-m", "bench.memory_sites", str(n)],
        capture_output=True,
        text=True,
        timeout=1800,
        check=True,
        cwd=ROOT,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


if __name__ == "__main__":
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
    print(json.dumps(trio.run(measure_sites, count)))
