"""Process-wide tuning for a long-lived runtime with many threads: the garbage collector.

Why: every commit allocates many small objects (a new frozen ``ThreadState`` and its
parts, an action, effects, log rows), and almost none of them form reference cycles; they
are freed by reference counting the moment they are dropped. CPython's default thresholds
(700, 10, 10) still run a young collection every 700 net allocations, and each collection
that reaches an older generation walks every tracked object alive, which with thousands
of threads' states is most of the heap. Measured by the runtime engineer: with thousands of
threads the collector took about half of the time, and ``gc.set_threshold(50000, 50, 100)``
doubled the actions per second (the figures of this change are in docs/architecture.md,
"The live runtime", and in the report of the commit that added this module).

What it costs: cyclic garbage (rare here: tracebacks, trio's cancelled tasks) lives a
little longer, up to 50,000 young objects before a young collection. It does not turn the
collector off: a leak of cycles is still reclaimed.

``tune_gc()`` is called once at start-up by ``app.app.run_app`` and by the benchmarks'
``bench_runtime``. Set ``SPINDLE_GC=default`` to keep CPython's thresholds (e.g. to compare).
"""

from __future__ import annotations

import gc
import os

__all__ = ["RUNTIME_GC_THRESHOLDS", "tune_gc"]

# Young collections every 50,000 net allocations instead of 700; the middle generation
# every 50 of those, the old one every 100 middle ones (CPython also waits until a full
# collection would look at 25 % new long-lived objects).
RUNTIME_GC_THRESHOLDS = (50_000, 50, 100)


def tune_gc(thresholds: tuple[int, int, int] = RUNTIME_GC_THRESHOLDS) -> tuple[int, int, int]:
    """Set the collector's thresholds for the runtime; returns the previous ones (so a
    caller can put them back). Idempotent; ``SPINDLE_GC=default`` makes it a no-op."""
    previous = gc.get_threshold()
    if os.environ.get("SPINDLE_GC", "").strip().lower() == "default":
        return previous
    gc.set_threshold(*thresholds)
    return previous
