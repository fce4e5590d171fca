"""The latency section's own parts of docs/performance.md: what was measured and changed
before (``LATENCY_BEFORE_AFTER``, kept here so each ``make bench`` writes it again), and the
curve: p99s against the number of streaming threads.

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

__all__ = [
    "LATENCY_BEFORE_AFTER",
    "agents_apart_sentence",
    "latency_curve_plot",
    "latency_curve_section",
]

# Measured by hand by the sessions that worked on the section (each dated inside).
LATENCY_BEFORE_AFTER = """\
The tables above: `PYTHONPATH=. .venv/bin/python -m bench --only latency render_cost`, \
2026-11-25 13:24 UTC, load average 3.2-4.3 (CPU share 0.62 at 1,000 threads). The run \
before it (13:22 UTC, load average 3.1-4.4, CPU share 0.84): 100 threads ingress → effect \
p50 1.5 ms, p99 12.0 ms, `/abort` → interrupt p99 6.4 ms; 1,000 threads ingress → effect \
p50 329 ms, p99 616 ms, `/abort` → interrupt p50 58.6 ms, p99 116 ms, CPU per delta 48.6 µs, \
0.378 actions per delta. \
**The bench changed in issue 18 part 2**: its fake agents used to write a delta 50 ms after \
the previous one was taken, so a process that fell behind was offered less (4,256 deltas/s \
of the 20,000 in the earlier table, where p99 read 560 ms); they now write on schedule and a \
late read takes what piled up, as a pipe does, so every figure here is under the whole load \
and not comparable with the earlier tables.

**Before and after issue 18 part 2, same bench, same period** (2026-11-25 13:17-13:19 UTC, \
load average 2.7-3.8 on 2 cores shared with other jobs): `.venv/bin/python -m bench._section \
latency`, the runtime of main and of the branch taking turns, two rounds each. At 1,000 \
threads × 20 deltas/s: ingress → effect **p99 2,551, 2,802 → 456, 503 ms (0.18×)**, p50 \
1,720, 1,407 → 272, 330 ms; `/abort` → interrupt **p99 455, 232 → 118, 128 ms**, p50 176, \
199 → 48, 50 ms (0.26×); `/queue` reply p99 866, 752 → 363, 373 ms; **CPU per delta 85, 79 → \
55, 48 µs (0.62×)**; deltas taken per s 10,672, 10,128 → 17,179, 17,236 (of 20,000 \
offered); actions committed per delta 0.74, 0.67 → 0.46, 0.38 (CPU share 0.91, 0.80 → 0.94, \
0.83). At 100 threads (2,000 deltas/s, nothing piles up: 1.0 action per delta both): \
ingress → effect p99 28.6, 24.6 → 16.3, 18.4 ms; `/abort` → interrupt p99 2.9, 11.9 → 3.0, \
7.7 ms; CPU per delta 223, 218 → 191, 219 µs (mostly fixed costs: ticks, the pacer, spread \
over few deltas). A third round at 13:37 UTC, the machine busier (load average 5.6-6.3, CPU \
share 0.41 → 0.44), shows the merging regulate itself: at 1,000 threads ingress → effect \
p99 10,316 → 1,120 ms, `/abort` → interrupt p99 995 → 195 ms, CPU per delta 92.7 → 29.2 µs \
(0.31×), actions per delta 0.745 → 0.188; at 100 threads p99 192 → 68 ms.

What changed: the listener coalesces at the source (`runtime/live/listener.py`): the text \
and thinking deltas an adapter hands over in one scheduler round (what its reader read in \
one go) become one action when the round ends (`runtime/live/rounds.py`, one task for all \
threads), and while reads keep holding several events the round's first delta joins them \
(one action per read). Nothing waits on I/O or time; 16 KiB per action at most; the log \
records the merged action and replay rebuilds the same state (tests/runtime/\
test_delta_coalescing.py; the property harness applies merged bursts and checks they show \
what the deltas one by one show). Delta actions are built with trusted constructors \
(`Frozen.trusted` now keeps the declared field order, so such an action is logged byte for \
byte as a validated one).

**The target (p99 ≤ 20 ms, `/abort` p99 ≤ 20 ms at 1,000 threads × 20 deltas/s) is not \
met on this machine**: p99 456-876 ms and 108-128 ms in these runs. Why: a thread's deltas come \
50 ms apart, so merging only starts once the process is more than 50 ms behind; to stay \
under 20 ms every delta must be its own action, and here a delta costs ~20 µs plus ~75 µs \
per action (a fit over the 1,000-thread runs: 38-55 µs per delta at 0.24-0.46 actions per \
delta), ~95 µs unmerged, i.e. ~2 cores for 20,000/s, while one trio process uses at most \
one (it got 0.6-0.9 of one in these runs). So the process settles where reads hold 2-4 \
deltas (0.24-0.46 actions per delta) and scheduler rounds last hundreds of ms; the p99 \
is the length of a few such rounds, and `/abort` waits \
for one (its interrupt goes out from the agent lane, a task woken for the next round). \
Where a round's time goes (cProfile, 1,000 threads, load only): the core's transitions \
19%, the fake agents 17% (what a parser costs in production), trio's scheduling 12%, the \
listener 11%, pydantic 7%, the actor 7%, the log 6%; SQLite writes ~1,000 rows per round \
in 35-50 ms (the table is clustered by thread, so a round's rows touch ~1,000 pages), \
blocking the loop meanwhile (a worker-thread flush, `flush_in_thread`, was 2× worse here: \
it gives up `flush_now` and batches later). Meeting 20 ms needs the per-action path (commit, \
log row, lane wake, render) under ~40 µs, or the threads spread over several processes \
(docs/scale-out.md).

**Then the per-action path (h-latency)**, same section, main's code (ed04083, its own \
checkout) and the branch's taking turns, two rounds each, three sittings (2026-11-25 \
16:31-16:37 UTC, load average 1.5-5): at 1,000 threads ingress → effect p99 792, 879 → 401, \
254 ms; 719, 497 → 332, 423 ms; 652, 733 → 465, 328 ms; `/abort` → interrupt p99 210, 275 → \
72, 88; 98, 116 → 71, 179; 154, 186 → 126, 84 ms; `/queue` reply p99 583, 585 → 200, 192 ms \
(first sitting); deltas taken per s 15.5-17.6k → 17.3-18.3k of 20,000. CPU per action on \
the runtime's path alone (1,000 threads, one delta action per thread per round, no fake \
agents): 79.2, 80.3, 74.7, 73.0, 73.7, 72.4 → 51.5, 51.6, 48.3, 49.1, 47.0, 45.0 µs \
(0.65×); a fit over every 1,000-thread run: 12 µs per delta + 85 µs per action → 15 + 51. \
What changed: new logs keep actions in a rowid table in commit order with a unique \
(thread_id, seq) index (a flush of rows from ~300 threads wrote ~300 leaf pages of the \
clustered table: 45 → 7 µs per row in a log micro-bench; old logs keep their layout); WAL \
checkpoints run in a worker thread on a second connection while the flusher runs, not \
inside a commit on the trio thread; a text or thinking delta continuing the open part takes \
a fast path in the core (`continue_delta`, 11.4 → 6-7 µs; the property harness checks it \
gives the general path's result byte for byte); cheaper per-action hooks, inbox, lane and \
effect dispatch; the log is flushed at the end of each round of merged deltas. The bench's \
renderer now keeps a float per measurement instead of every effect object (kept effects \
made the collector stall the loop 40-90 ms two or three times a run). What is left at \
1,000 threads: ~65 µs per unmerged delta against ~46 µs needed to keep up without merging, \
and `/abort` waits for the rest of the current scheduler round (0-100 ms) before the agent \
lane runs the interrupt.

**Where one process stops (2026-11-26).** The curve (as below) put the knee at 500 threads \
(10,000 deltas/s) in both runs of 06:16 and 06:50 UTC that day. Below it every delta is \
its own action (a thread's deltas come 50 ms apart: nothing to merge without making one \
wait), and one costs ~90 µs of the process's one core (88-103 µs in the 400-500-thread \
runs): 1,000 threads would need ~1.8 cores. Where a delta's time went at 500 threads (a \
trio instrument timing every task step during the load, µs per delta): the agent's step \
38 (the fake agent, the listener and the commit: transition ~7, log row ~4, hand-over to \
the reactor ~3), the chat lane 16.5 (two steps: its wake-up and the renderer's yield), \
the log's flushes 18 (SQLite ~12 of it: the unique (thread_id, seq) index writes a leaf \
page per thread per transaction, 12-20 µs a row at 1,000 threads against 2.5-5.7 µs \
without the index in a micro-benchmark), trio's scheduling ~12, the bench's pacer and \
users ~8. Tried and not kept: the flush from a worker thread as one `INSERT … SELECT FROM \
json_each(?)` (the GIL released for the whole statement): CPU per delta 87 → 99 µs, p50 \
3 → 12 ms, handing the GIL back cost more than the writes; a batching window of 2-5 ms \
for the flushes: the same CPU per delta (the rows cost, not the transactions). Kept: \
`StreamRenderer.apply` takes a free lock without a scheduler round and wakes its \
background task only when something falls due sooner, so an append to a streaming \
message costs no task step (1.8 before) and 15 µs instead of 26-38 (this bench's \
renderer yields where the real one does, so not for an append). Meeting 1,000 threads in \
one process needs a path under ~40 µs a delta: no index page written per row on the trio \
thread, no task step of the chat lane's own per delta, a cheaper commit; or the threads \
spread over several runner processes (docs/scale-out.md).

**Those changes tried (2026-11-26, later), and why they are not enough.** Each was made as a \
throwaway patch and measured with a trio instrument over the load at 300 and 500 threads, two \
runs each (busy µs of the trio thread per delta; the runs of one setting differ by up to 10%). \
*No index on the hot path* (the table without its (thread_id, seq) index): a flush's transaction \
140-146 → 73-77 µs at 300 threads and 209-211 → 78-79 µs at 500, but the trio thread's time per \
delta 137-149 → 128-138 and 102-103 → 96-97 µs. *No chat-lane step for an append* (applied in the \
flush's durability callback when the lane is idle; this bench's renderer only): task steps per \
delta 2.5 → 1.5 and 2.1 → 1.3, time per delta 137-149 → 116-124 and 102-103 → 94-100 µs. *A \
long-lived writer thread* (each batch written in one transaction there, the trio thread woken \
when it is durable): no gain on the trio thread, and with the GIL handed back and forth the \
process used 1.17 cores at 500 threads; with Python's default switch interval the flushes waited \
for the GIL and p99 at 700 threads rose to 544 ms. So the two first together save ~15%, not the \
half needed. Of the ~100 µs a delta costs at 500 threads, ~20 are this bench's own (its agents, \
pacer and users) and ~80 Spindle's: one core at 20,000 deltas/s leaves 50 µs for both, so \
Spindle's path must cost ~25-30 µs a delta, about a third of today's. That is a different hot \
path (a delta that is not a general action through the actor, the log's row serializer and the \
reactor's lanes), not tuning of this one. The index patch is not kept; the chat-lane one is, made \
for real (`Reactor._apply_now` with `StreamRenderer.apply_nowait`: an append to a message already \
posted, while the lane holds and applies nothing): three alternating pairs at 300 threads gave \
CPU per delta 118-131 against 138-155 µs and p50 1.8-1.9 against 2.0-2.3 ms; at 400 and 500 \
threads the pairs differed within the noise; at Discord's limits (200 threads, two pairs) the \
worst thread's lag was 5.29 and 4.90 s against 5.83 and 5.25 s without it.

**Where 1,000 threads' time goes (2026-11-26, 11:30 UTC).** A sampling profile (`py-spy record -r \
100` for 10 s over the 1,000-thread load, py-spy installed apart, not a dependency) shows the \
trio thread busy all the time, split as: the bench's agents and pacer ~20%; the transition 18.5% \
(the delta's fast path 16.5%: its checks 7.4, its three copies 6.0, building the effect and the \
result 3.0); the log's row 6.9% (the action's JSON 4.8); the flush 22.4% (SQLite 12.2, the \
durability callbacks into the reactor and the renderer 10.0); the listener's own merge ~10%; the \
actor's end of batch 6.3%; trio's scheduling the rest. Counted in the flush: ~200 flushes a \
second of 87 rows each, 7.0 µs a row written and 6.1 µs a row of callbacks (at 500 threads 650 a \
second of 15 rows, 12.2 µs a row written). No part is a third of the whole: the cost is spread \
over every layer a delta crosses. Python 3.13.0 instead of 3.11.7 changes nothing (`transition` \
100k against 93-98k calls/s; the 1,000-thread load saturated either way, p99 139-234 against \
131-226 ms, two runs each).

**With the agents in a process apart (2026-11-26, 23:20 UTC).** Do the in-process agents \
flatter or burden Spindle? The same load with every agent's deltas going nowhere (the \
listener dropping each text delta: the agents, the pacer, the users and the runtime's fixed \
costs alone) cost 30.8 µs of the process's CPU per delta at 1,000 threads, against ~56 µs \
with Spindle taking them: Spindle's own share is ~26 µs a delta at that operating point, \
but a real agent costs its reader too. So the bench now also runs the 1,000-thread shape with \
the agents apart (`bench/agent_farm.py`: one process writes every thread's Claude Code \
`stream_event` lines into its pipe, 20 a second each; each thread's reader takes them through \
`LineReader` and `ClaudeStreamParser` as the Claude adapter does). Two alternating pairs, \
3 s each: Spindle's process 57.5, 57.0 µs per delta with the agents apart against 56.7, 56.5 \
in process (the farm itself used 0.16-0.17 of the other core and never found a pipe full): \
reading a pipe costs what the fake agents cost, so the figures above are not the harness's. \
The pipes made the tails longer, not shorter: ingress → effect p99 235, 381 against 190, \
268 ms, `/abort` → interrupt p50 101, 111 against 21, 28 ms (p99 129, 136 against 95, 107), \
actions per delta 0.54, 0.46 against 0.80, 0.65. These pairs ran on the slower Intel Xeon \
host of the page's latest run (`transition` 43-83k calls/s against 106k on the AMD EPYC host \
of the runs above; the 400-thread load took 134 µs a delta with this code and with the code \
of the 09:51 run alike, two alternating pairs), so they compare with each other, not with \
the earlier figures."""


def agents_apart_sentence(lat: dict) -> list[str]:
    """What the shape with the agents in a process apart measured against the same shape
    with them in process (``bench/latency.py``), from this run's results."""
    lines = []
    for key, apart in lat.items():
        if not key.endswith("_agents_apart") or not isinstance(apart, dict):
            continue
        same = lat.get(key.removesuffix("_agents_apart"), {})
        farm = apart.get("agent_farm", {})
        lines.append(
            f"*{key.replace('_', ' ')}*: the agents in a process of their own "
            "(`bench/agent_farm.py`), read through pipes and Claude's parser as in "
            f"production. Spindle's process: {apart.get('cpu_us_per_delta')} µs per delta "
            f"(in process: {same.get('cpu_us_per_delta', '—')}), p99 ingress → effect "
            f"{apart.get('ingress_to_effect', {}).get('p99_ms')} ms (in process: "
            f"{same.get('ingress_to_effect', {}).get('p99_ms', '—')}). The agents' process "
            f"wrote {farm.get('written', '—'):,} deltas with {farm.get('cpu_share', '—')} of a "
            f"core; writes that found a pipe full: {farm.get('pipe_full', '—')}."
            if isinstance(farm.get("written"), int)
            else f"*{key.replace('_', ' ')}*: the agents' process reported nothing."
        )
        lines.append("")
    return lines


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
