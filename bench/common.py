"""Shared measuring tools: medians of repeated runs, RSS, and the runtime harness."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import psutil

__all__ = ["AGENT_PACE_S", "median_of", "percentile", "rss_bytes", "bench_runtime", "timed"]


def median_of(fn: Callable[[], float], repeats: int) -> tuple[float, list[float]]:
    """Run ``fn`` (which returns a measurement) ``repeats`` times; the median and all runs."""
    runs = [fn() for _ in range(repeats)]
    return statistics.median(runs), runs


def percentile(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = min(len(ordered) - 1, max(0, round(p / 100 * (len(ordered) - 1))))
    return ordered[k]


def rss_bytes() -> int:
    return psutil.Process().memory_info().rss


class timed:
    """``with timed() as t: ...``; then ``t.wall`` and ``t.cpu`` in seconds."""

    def __enter__(self) -> timed:
        self._w, self._c = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall = time.perf_counter() - self._w
        self.cpu = time.process_time() - self._c


@asynccontextmanager
async def bench_runtime(
    log_path: str | Path,
    *,
    world: Any = None,
    renderers: Any = None,
    tick_interval_s: float = 3600.0,
    snapshot_every: int = 1000,
):
    """A live ``Runtime`` with the recording renderer and the scripted fake agent."""
    from threadspindle.runtime.core.model import Policy
    from threadspindle.runtime.live.log import EventLog
    from threadspindle.runtime.live.registry import open_runtime
    from threadspindle.runtime.live.tuning import tune_gc
    from threadspindle.testkit.fake_agent import FakeAgentWorld
    from threadspindle.testkit.fake_chat import RenderWorld

    world = world or FakeAgentWorld()
    renderers = renderers or RenderWorld()
    tune_gc()  # as run_app does (SPINDLE_GC=default keeps CPython's thresholds)
    log = EventLog(log_path, snapshot_every=snapshot_every).open()
    try:
        async with open_runtime(
            log=log,
            renderer_factory=renderers.renderer,
            adapter_factory=world.factory,
            policy=Policy(allowed_roots=("/",), queue_limit=10_000),
            tick_interval_s=tick_interval_s,
        ) as rt:
            yield rt, world, renderers
    finally:
        log.close()


# How the benches' in-process fake agents are paced: one ``Timers`` task (the runtime's own,
# ``runtime/live/timers.py``) wakes every agent whose next delta is due within the same
# millisecond together. ``trio.sleep`` per delta costs a cancel scope and a ``Cancelled``
# each (~30 µs): at 20,000 deltas/s a fifth of the process, spent by the fake agents, not
# by Spindle; at this resolution the timer task wakes at most 1,000 times a second.
AGENT_PACE_S = 0.001
