"""The latency curve of docs/performance.md: p99s against the number of streaming threads.

``bench/latency.py`` measures the same load (20 deltas/s per thread, ``/queue`` and
``/abort`` meanwhile) at thread counts between its two main shapes. This section shows
where one process stops meeting the targets (p99 ingress → effect and p99 ``/abort`` →
interrupt ≤ 20 ms), as a table and a plot.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from bench.report_format import table

__all__ = ["latency_curve_plot", "latency_curve_section"]


def _points(curve: Any) -> list[tuple[int, dict]]:
    if not isinstance(curve, dict) or not isinstance(curve.get("points"), dict):
        return []
    return sorted((int(k), v) for k, v in curve["points"].items() if isinstance(v, dict))


def latency_curve_section(curve: Any) -> list[str]:
    points = _points(curve)
    if not points:
        return []
    target = curve.get("target_p99_ms", 20.0)
    within = curve.get("most_threads_within_target")
    rows = [
        [
            threads,
            threads * 20,
            p.get("deltas_per_s"),
            p.get("p99_ms"),
            p.get("abort_p99_ms"),
            p.get("cpu_us_per_delta"),
            p.get("cpu_share"),
            p.get("delta_actions_per_delta"),
        ]
        for threads, p in points
    ]
    if within:
        verdict = (
            f"One process met both targets (≤ {target:g} ms) at every count up to "
            f"**{within:,} threads** ({within * 20:,} deltas/s) in this run."
        )
    else:
        verdict = f"One process met both targets (≤ {target:g} ms) at none of these counts."
    return [
        "### Latency against the number of threads",
        "",
        "The same load at each thread count, one run of a few seconds each (the 100- and "
        "1,000-thread rows are the runs above): where one process stops keeping up. "
        + verdict
        + " Near the knee one run can fall either side of it: the CPU share tells how close "
        "the process was to using its one core.",
        "",
        table(
            [
                "threads",
                "deltas/s offered",
                "deltas/s taken",
                "p99 ingress→effect ms",
                "p99 /abort→interrupt ms",
                "CPU µs per delta",
                "CPU share",
                "actions per delta",
            ],
            rows,
        ),
        "",
    ]


def latency_curve_plot(curve: Any, plot_dir: Path, plt: Any) -> str | None:
    """``perf/latency-curve.png``: both p99s against threads, log scale, the target as a
    line; None when there is no curve."""
    points = _points(curve)
    if len(points) < 2:
        return None
    xs = [t for t, _ in points]

    def ys(key: str) -> list[float]:
        out = []
        for _, p in points:
            v = p.get(key)
            out.append(float("nan") if v is None or (isinstance(v, float) and math.isnan(v)) else v)
        return out

    fig, ax = plt.subplots(figsize=(6, 3.4))
    ax.plot(xs, ys("p99_ms"), "o-", label="p99 ingress → effect")
    ax.plot(xs, ys("abort_p99_ms"), "s-", label="p99 /abort → interrupt")
    ax.axhline(curve.get("target_p99_ms", 20.0), color="grey", linestyle="--", label="target")
    ax.set_yscale("log")
    ax.set_xlabel("threads streaming 20 deltas/s")
    ax.set_ylabel("ms")
    ax.set_title("Latency under load, one process")
    ax.legend()
    fig.tight_layout()
    fig.savefig(plot_dir / "latency-curve.png", dpi=110)
    plt.close(fig)
    return "perf/latency-curve.png"
