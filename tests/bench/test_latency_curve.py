"""The latency curve (bench/latency.py ``curve``, bench.report_latency.py): which
thread count it calls the last within the targets, and what the page shows of it."""

from __future__ import annotations

import math
from pathlib import Path

from bench.latency import TARGET_P99_MS, curve
from bench.report_latency import latency_curve_plot, latency_curve_section


def _point(p99: float, abort: float) -> dict:
    return {
        "p99_ms": p99,
        "abort_p99_ms": abort,
        "cpu_us_per_delta": 90.0,
        "cpu_share": 0.8,
        "delta_actions_per_delta": 1.0,
        "deltas_per_s": 1000,
    }


def test_the_last_count_within_is_the_one_before_the_first_miss() -> None:
    points = {
        300: _point(9.0, 3.0),
        400: _point(12.0, 25.0),  # /abort misses: the knee is here
        500: _point(11.0, 4.0),  # back within by chance: does not count
        1000: _point(200.0, 60.0),
    }
    result = curve(points)
    assert result["most_threads_within_target"] == 300
    assert list(result["points"]) == ["300", "400", "500", "1000"]
    assert result["target_p99_ms"] == TARGET_P99_MS


def test_a_run_without_aborts_is_judged_on_its_deltas_alone() -> None:
    assert curve({100: _point(5.0, math.nan)})["most_threads_within_target"] == 100
    assert curve({100: _point(TARGET_P99_MS + 0.01, 1.0)})["most_threads_within_target"] == 0


def test_the_section_states_the_verdict_and_every_point(tmp_path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    result = curve({300: _point(9.0, 3.0), 600: _point(52.0, 6.0)})
    text = "\n".join(latency_curve_section(result))
    assert "up to **300 threads** (6,000 deltas/s)" in text
    assert "| 600 | 12,000 |" in text
    image = latency_curve_plot(result, tmp_path, plt)
    assert image == "perf/latency-curve.png"
    assert (tmp_path / "latency-curve.png").stat().st_size > 1000
    assert latency_curve_section({}) == []
