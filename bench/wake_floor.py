"""What waking a task costs here, before it does anything: the floor under the latency
section's in-process shape.

The latency section's in-process agents are trio tasks, each woken every 50 ms to say a
delta (``bench/latency.py``, paced by ``runtime.live.timers.Timers`` as the runtime's
tickers are). 1,000 of them are 20,000 wake-ups a second in the process whose CPU a delta
is measured by. Here the same tasks do nothing when woken: *CPU µs per wake-up* is this
process's CPU over the wake-ups, paced by the timer wheel, and by ``trio.sleep_until`` for
comparison; the median of the rounds. A delta may cost at most 50 µs for one core to take
20,000 a second: the ``of a delta's budget`` column says what share of that a wake-up
alone takes.

Run alone: ``PYTHONPATH=. .venv/bin/python -m bench.wake_floor [--quick]``.
"""

from __future__ import annotations

import json
import random
import statistics
import sys
import time
from typing import Any

import trio

from bench.common import AGENT_PACE_S
from threadspindle.runtime.live.timers import Timers

__all__ = ["run"]

INTERVAL_S = 0.05  # as the latency section's agents
FULL = (1000, 3.0)  # tasks, seconds
QUICK = (50, 0.3)
ROUNDS = 3
DELTA_BUDGET_US = 1e6 / (FULL[0] / INTERVAL_S)  # one core, 20,000 deltas a second


async def _wakes(tasks: int, seconds: float, wheel: bool) -> float:
    """CPU µs per wake-up of ``tasks`` tasks woken every ``INTERVAL_S``, doing nothing."""
    pacer = Timers(resolution_s=AGENT_PACE_S)
    rng = random.Random(2)
    woken = 0
    async with trio.open_nursery() as nursery:
        await nursery.start(pacer.run)
        start = trio.current_time() + 0.2
        stop = start + seconds

        async def task(phase: float) -> None:
            nonlocal woken
            due = start + phase * INTERVAL_S
            while due < stop:
                woken += 1
                due += INTERVAL_S
                await (pacer.sleep_until(due) if wheel else trio.sleep_until(due))

        for _ in range(tasks):
            nursery.start_soon(task, rng.random())
        await trio.sleep_until(start)
        counted, cpu = woken, time.process_time()
        await trio.sleep_until(stop)
        spent, wakes = time.process_time() - cpu, woken - counted
        nursery.cancel_scope.cancel()
    return spent / max(1, wakes) * 1e6


def run(quick: bool = False) -> dict[str, Any]:
    tasks, seconds = QUICK if quick else FULL
    rounds = 1 if quick else ROUNDS
    cpu: dict[str, list[float]] = {"timer_wheel": [], "sleep_until": []}
    for _ in range(rounds):  # taking turns: the host's speed moves from minute to minute
        cpu["timer_wheel"].append(trio.run(_wakes, tasks, seconds, True))
        cpu["sleep_until"].append(trio.run(_wakes, tasks, seconds, False))
    out: dict[str, Any] = {"tasks": tasks, "seconds": seconds, "rounds": rounds}
    for name, values in cpu.items():
        median = statistics.median(values)
        out[name] = {
            "cpu_us_per_wake": round(median, 1),
            "share_of_delta_budget": round(median / DELTA_BUDGET_US, 2),
            "rounds": [round(v, 1) for v in values],
        }
    return out


def main() -> None:
    print(json.dumps(run("--quick" in sys.argv), indent=2))


if __name__ == "__main__":
    main()
