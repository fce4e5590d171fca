"""Turn ``results.json`` into ``docs/performance.md`` and its plots."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.memory_report import PARSERS_BEFORE_AFTER, memory_section
from bench.report_agents import agents_section
from bench.report_chat_budget import chat_budget_section
from bench.report_format import fmt as _fmt
from bench.report_format import get as _get
from bench.report_format import table as _table
from bench.report_latency import (
    LATENCY_BEFORE_AFTER,
    agents_apart_sentence,
    latency_curve_plot,
    latency_curve_section,
)
from bench.report_reading import parsers_section, pipe_reads_section, wake_floor_section

__all__ = ["write_report"]


# The host the page's figures were measured on, and how its speed moves, written by hand
# after a full run (the figures it cites are in bench/results.json or the commits named)
# and shown only under that run: a later run gets a note of its own, or none.
HOST_NOTE_RUN = "2026-11-27 14:46 UTC"
HOST_NOTE = """\
**The host (2026-11-27, 11:30 UTC on).** This is the fourth full run that day on an AMD \
EPYC host (Linux 6.18.44-fc-v669; the runs of 11:30, 11:46 and 12:50 UTC before it), \
which runs this code about 2× faster than the Intel Xeon host of the runs of 2026-11-26 \
09:51 UTC to 2026-11-27 02:46 UTC (`transition` 43,807 calls/s there at 02:46 UTC). \
The four runs agree on the issue's verdicts: the slowest parser 228,475, 228,974, \
245,400 and 217,363 lines/s (claude stream-json each time; 148k-182k on the Xeon host); \
at Discord's limits the worst thread's lag 4.63, 4.70, 4.65 and 4.72 s, 0 429s, reply \
p99 0.025, 0.093, 0.024 and 0.042 s, every final text exact; the idle actor 12.5-12.7 \
KB; at 1,000 threads p99 ingress → effect 168, 163, 85.1 and 115 ms, `/abort` → \
interrupt p99 96.2, 71.4, 45 and 47.4 ms in process (326, 351, 275 and 304; 148, 121, \
105 and 114 ms with the agents apart): short each time, the knee at 300, 300, 500 and \
600 threads. New in this run, "What a wake-up costs": a trio task woken every 50 ms and \
doing nothing costs 14.7 µs of CPU a wake-up on the timer wheel (27.7 µs with \
`trio.sleep_until`), 0.29 of the 50 µs a delta may cost for one core to take 20,000 a \
second: in the in-process shape the fake agents' wake-ups alone take that share before \
Spindle does anything; with the agents apart, reading a pipe costs 41 µs of CPU a line \
at one line per wake-up ("Reading an agent's pipe"). The JetStream rows moved against \
the run of 12:50 UTC (100 threads' actions 3,906 → 2,575/s; a claim and rebuild 0.037 → \
0.419 s) with nothing on that path changed (only a retry at set-up): the section run \
again at 14:57 UTC gave 0.043 s, and then on the code of 12:50 UTC (15:00) and on this \
code (15:04), 3,032 and 3,120 actions/s (`python -m bench --only jetstream --out DIR`): \
the host's speed, not the code."""


# The two runs of the render linearity (the table shows the last one's).
RENDER_LINEARITY_RUNS = """\
Two runs on the shared machine, 2026-11-25: 13:22 UTC 9.65 (rounds 9.65, 10.79, 8.92), \
13:24 UTC 10.43 (rounds 9.91, 10.68, 10.43); the function calls grow 9.997× in both. The \
renderer's calls grow exactly with the answer and no function's time grows faster than its \
calls in the profile: the CPU ratio is 10 within the machine's noise, and that noise decides \
the verdict in the Targets table either way. (Before issue 18 part 2 one pair was measured \
once: 10.4.) Two more on a quiet machine, 2026-11-25 17:37 and 17:41 UTC: 9.81 (rounds 9.81, \
10.0, 9.64) and 10.05 (rounds 10.17, 10.05, 9.87). Under callgrind, instructions executed \
grow 9.997× (4.736 → 47.35 billion), last-level cache misses do not grow at all (1.51 \
million for ten small renders, 1.34 for the large one), and the collector off changes \
nothing (9.96 against 9.91): a linear renderer whose ratio is 10 to within the machine's \
noise, so the verdict flips from run to run."""


# Measured by hand, not by the section: the same section run against main's runtime/live
# and this one, alternately, in one period (docs/performance.md says how).
def _targets(r: dict) -> list[list[Any]]:
    rows = []

    def check(name: str, target: str, value: Any, ok: bool | None) -> None:
        verdict = "—" if ok is None else ("met" if ok else "short")
        rows.append([name, target, value, verdict])

    one = _get(r, "core", "actor", "1_threads_sqlite", "actions_per_s")
    check(
        "actions/s through one actor, durable log",
        "≥ 20,000",
        one,
        None if one is None else one >= 20_000,
    )
    p99 = _get(r, "latency", "1000_threads", "ingress_to_effect", "p99_ms")
    check(
        "p99 ingress→effect, 1,000 threads × 20 deltas/s",
        "≤ 20 ms",
        p99,
        None if p99 is None else p99 <= 20,
    )
    abort = _get(r, "latency", "1000_threads", "abort_to_interrupt", "p99_ms")
    check(
        "p99 /abort→interrupt, 1,000 threads × 20 deltas/s",
        "≤ 20 ms",
        abort,
        None if abort is None else abort <= 20,
    )
    within = _get(r, "latency", "curve", "most_threads_within_target")
    check(
        "threads one process keeps within both 20 ms targets",
        "1,000",
        within,
        None if within is None else within >= 1000,
    )
    idle = _get(r, "memory", "idle", "per_thread_kb")
    check("RSS per idle thread actor", "≤ 20 KB", idle, None if idle is None else idle <= 20)
    parsers = _get(r, "parsers")
    if isinstance(parsers, dict) and "error" not in parsers:
        worst = min(
            (v.get("lines_per_s", 0) for v in parsers.values() if isinstance(v, dict)), default=None
        )
        check(
            "agent lines/s per parser (slowest)",
            "≥ 200,000",
            worst,
            None if worst is None else worst >= 200_000,
        )
    ratio = _get(r, "render_cost", "linearity", "cpu_ratio")
    size = _get(r, "render_cost", "linearity", "size_ratio")
    check(
        f"rendering CPU, {size}× larger answer",
        f"≤ {size}×",
        ratio,
        None if ratio is None else ratio <= (size or 10),
    )
    calls = _get(r, "render_cost", "long_answer", "calls_ratio_spindle_vs_seed")
    check(
        "chat API calls vs the seed's coordinator",
        "≤ 1.0×",
        calls,
        None if calls is None else calls <= 1.0,
    )
    budget = _get(r, "chat_budget", "200_threads")
    if isinstance(budget, dict):
        check(
            "429 responses, 200 threads × 20 deltas/s at Discord's limits",
            "0",
            budget.get("responses_429"),
            budget.get("responses_429") == 0,
        )
        p99 = budget.get("reply_p99_s")
        check("command reply p99, same load (s)", "≤ 1 s", p99, p99 is not None and p99 <= 1.0)
        lag = budget.get("worst_thread_lag_s")
        check(
            "visible text behind its agent, worst thread (s)",
            "≤ 5 s",
            lag,
            lag is not None and lag <= 5.0,
        )
        wrong = budget.get("final_texts_wrong")
        check("answers whose final text is wrong", "0", wrong, wrong == 0)
    rebuild = _get(r, "durability", "rebuild_1000000", "with_snapshots_s")
    check(
        "rebuild a 1M-action log with snapshots",
        "< 3 s",
        rebuild,
        None if rebuild is None else rebuild < 3,
    )
    return rows


def _plots(r: dict, plot_dir: Path) -> list[str]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    plot_dir.mkdir(parents=True, exist_ok=True)
    made = []
    lin = _get(r, "render_cost", "linearity")
    if isinstance(lin, dict):
        points = sorted(
            (v["bytes"], v["cpu_s"]) for v in lin.values() if isinstance(v, dict) and "bytes" in v
        )
        if len(points) >= 2:
            fig, ax = plt.subplots(figsize=(5, 3.2))
            xs = [p[0] / 1e6 for p in points]
            ax.plot(xs, [p[1] for p in points], "o-", label="measured")
            ax.plot([0, xs[-1]], [0, points[-1][1]], "--", color="grey", label="linear")
            ax.set_xlabel("answer size (MB)")
            ax.set_ylabel("renderer CPU (s)")
            ax.set_title("Rendering cost vs answer size")
            ax.legend()
            fig.tight_layout()
            fig.savefig(plot_dir / "render-linearity.png", dpi=110)
            plt.close(fig)
            made.append("perf/render-linearity.png")
    actor = _get(r, "core", "actor")
    if isinstance(actor, dict):
        labels = list(actor)
        fig, ax = plt.subplots(figsize=(6, 3.2))
        ax.barh(labels, [actor[k]["actions_per_s"] for k in labels])
        ax.set_xlabel("actions/s")
        ax.set_title("Throughput through live actors")
        fig.tight_layout()
        fig.savefig(plot_dir / "actor-throughput.png", dpi=110)
        plt.close(fig)
        made.append("perf/actor-throughput.png")
    latency_curve = latency_curve_plot(_get(r, "latency", "curve"), plot_dir, plt)
    if latency_curve is not None:
        made.append(latency_curve)
    return made


def _jetstream_section(js: Any) -> list[str]:
    """The JetStream log against SQLite (bench/jetstream.py; docs/scale-out.md)."""
    if not isinstance(js, dict) or "sqlite" not in js:
        return []
    rows = []
    for name in ("sqlite", "jetstream_r1", "jetstream_r3"):
        one, many = js[name]["fenced_append"], js[name]["actions_per_s"]
        rows.append(
            [
                name,
                one["per_s"],
                one["p50_ms"],
                one["p99_ms"],
                many["threads"],
                many["per_s"],
                many["p99_ms"],
            ]
        )
    parts = [
        "## JetStream log vs SQLite",
        "",
        _table(
            ["log", "appends/s (1 thread)", "p50 ms", "p99 ms", "threads", "actions/s", "p99 ms"],
            rows,
        ),
        "",
    ]
    for t in js.get("takeover", []):
        parts.append(
            f"Takeover of {t['threads']} thread(s) after their holder died (lease TTL "
            f"{t['lease_ttl_s']} s): {t['takeover_s']} s to claim, {t['rebuild_s']} s to rebuild."
        )
    pipe = js.get("pipeline", [])
    if pipe:
        parts += [
            "",
            _table(
                [
                    "runner processes",
                    "threads",
                    "prompt -> first output p50 ms",
                    "p99 ms",
                    "effects/s",
                ],
                [
                    [
                        p["runners"],
                        p["threads"],
                        p["first_output_p50_ms"],
                        p["first_output_p99_ms"],
                        p["effects_per_s"],
                    ]
                    for p in pipe
                ],
            ),
        ]
    load = js.get("load", [])
    if load:
        parts += [
            "",
            _table(
                [
                    "runner processes",
                    "threads streaming 20 deltas/s",
                    "deltas reached chat",
                    "delta -> chat p50 ms",
                    "p99 ms",
                    "effects/s",
                ],
                [
                    [
                        x["runners"],
                        x["threads"],
                        f"{x['deltas_reached_chat']:,} of {x['deltas_expected']:,}",
                        x["delta_to_chat_p50_ms"],
                        x["delta_to_chat_p99_ms"],
                        x["effects_per_s"],
                    ]
                    for x in load
                ],
            ),
        ]
    rb = js.get("rebuild", {})
    if rb:
        parts += [
            "",
            f"A thread of {rb['actions']:,} actions: claimed and rebuilt with its snapshot in "
            f"{rb['claim_and_rebuild_with_snapshot_s']} s ({rb['tail_folded']} folded); its "
            f"whole subject read in {rb['read_whole_subject_s']} s "
            f"({rb['read_actions_per_s']:,} actions/s).",
        ]
    return parts + [""]


def _span(values: list) -> list:
    """The least and the most of ``values`` (empty: nothing)."""
    return [min(values), max(values)] if values else []


def _reruns(reruns: list[dict]) -> list[str]:
    """The sections measured again after the full run, newest last (their figures replace
    that run's)."""
    if not reruns:
        return []
    said = "; ".join(
        f"{', '.join(run['sections'])} at {run['date']} (`{run['command']}`)" for run in reruns
    )
    return [f"Sections run again since, whose figures replace that run's: {said}.", ""]


def write_report(results: dict, path: Path, plot_dir: Path) -> None:
    r = results
    m = r.get("machine", {})
    parts = [
        "# Performance",
        "",
        "Measured by `make bench` (`.venv/bin/python -m bench`); every number is in "
        "`bench/results.json`. Medians of several runs where a section repeats; ratios are "
        "measured in the same run. Machines are shared and noisy: compare ratios, not absolutes.",
        "",
        f"Machine: Python {m.get('python')}, {m.get('os')}, {m.get('cpu')}, "
        f"{m.get('cores')} cores, "
        f"{m.get('date')}. Command: `{r.get('command')}`.",
        "",
        *_reruns(r.get("reruns") or []),
        *([HOST_NOTE, ""] if m.get("date") == HOST_NOTE_RUN else []),
        "## Targets",
        "",
        _table(["what", "target", "measured", "verdict"], _targets(r)),
        "",
    ]
    core = r.get("core", {})
    if "transition" in core:
        parts += [
            "## Core",
            "",
            f"`transition`: **{_fmt(core['transition']['calls_per_s'])} calls/s** "
            f"on a realistic mix of {_fmt(core['transition']['actions'])} actions.",
            "",
        ]
        rows = [
            [k.replace("_", " "), v["threads"], v["actions"], v["actions_per_s"]]
            for k, v in core.get("actor", {}).items()
        ]
        parts += [_table(["actors and log", "threads", "actions", "actions/s"], rows), ""]
    lat = r.get("latency", {})
    if lat and "error" not in lat:
        rows = []
        for k, v in lat.items():
            for what in ("ingress_to_effect", "queue_reply", "abort_to_interrupt", "abort_reply"):
                if what not in v:
                    continue
                s = v.get(what, {})
                rows.append(
                    [
                        k.replace("_", " "),
                        what.replace("_", " "),
                        s.get("n"),
                        s.get("p50_ms"),
                        s.get("p99_ms"),
                        s.get("max_ms"),
                    ]
                )
        parts += [
            "## Latency under load",
            "",
            "Each thread's agent writes 20 deltas/s on its own schedule (a random phase), "
            "whether or not Spindle keeps up: what it wrote while nobody read waits in its "
            "pipe and the next read takes all of it, each delta timed from when it was "
            "written; users send `/queue` meanwhile, and a tenth of the threads get an "
            "`/abort` during the load.",
            "",
            _table(["load", "path", "samples", "p50 ms", "p99 ms", "max ms"], rows),
            "",
            "Actions committed per delta received (the deltas an agent's reader handed over "
            "together are one action, `runtime/live/listener.py`, and so are deltas waiting "
            "together in a thread's mailbox, `runtime/live/actor.py`): "
            + ", ".join(
                f"{k.replace('_', ' ')} {v.get('delta_actions_per_delta', '—')} "
                f"({v.get('deltas', '—'):,} deltas)"
                if isinstance(v.get("deltas"), int)
                else f"{k.replace('_', ' ')} —"
                for k, v in lat.items()
                if k != "curve"
            )
            + ".",
            "",
        ]
        load_rows = [
            [
                k.replace("_", " "),
                round(v["threads"] * v.get("delta_rate_per_thread", 20)),
                v.get("deltas_per_s"),
                v.get("cpu_us_per_delta"),
                v.get("cpu_share"),
                ", ".join(str(x) for x in v.get("load_average", [])) or None,
            ]
            for k, v in lat.items()
            if "cpu_us_per_delta" in v
        ]
        if load_rows:
            parts += [
                "What the process kept up with: *deltas/s offered* is 20 per thread; *taken* "
                "is the deltas over the time from the start of the load until the last was "
                "applied (below the offer: the process fell behind and drained after the "
                "load); *CPU µs per delta* is the process's CPU time from the start of the load "
                "until every delta was applied, divided by the deltas: what a delta costs, "
                "whatever share of the machine the other jobs left (*CPU share*: CPU seconds "
                "per wall second during the load; 1.0 is one whole core).",
                "",
                _table(
                    [
                        "load",
                        "deltas/s offered",
                        "deltas/s taken",
                        "CPU µs per delta",
                        "CPU share",
                        "load average",
                    ],
                    load_rows,
                ),
                "",
                *agents_apart_sentence(lat),
                LATENCY_BEFORE_AFTER,
                "",
            ]
        parts += latency_curve_section(lat.get("curve"))
    parts += chat_budget_section(r.get("chat_budget", {}))
    parts += memory_section(r.get("memory", {}))
    parts += _jetstream_section(r.get("jetstream", {}))
    parts += parsers_section(r.get("parsers", {}))
    parts += [PARSERS_BEFORE_AFTER, ""] if r.get("parsers") else []
    parts += pipe_reads_section(r.get("pipe_reads", {}))
    parts += wake_floor_section(r.get("wake_floor", {}))
    rc = r.get("render_cost", {})
    if "long_answer" in rc:
        la = rc["long_answer"]
        rows = [
            [name, la[name]["sends"], la[name]["edits"], la[name]["calls"], la[name]["cpu_s"]]
            for name in ("spindle", "seed_coordinator", "post_per_part")
        ]
        parts += [
            "## Rendering and chat-API cost",
            "",
            f"The same answer ({_fmt(la['deltas'])} deltas, {_fmt(la['chars'])} characters, "
            "code blocks, "
            f"{la['tool_calls']} tool calls, 50 deltas/s) through each strategy:",
            "",
            _table(["strategy", "sends", "edits", "API calls", "CPU s"], rows),
            "",
        ]
        lin = rc.get("linearity", {})
        rows = [
            [
                k,
                v["deltas"],
                v["calls"],
                v["cpu_s"],
                "–".join(str(c) for c in _span(v.get("cpu_s_runs", []))),
            ]
            for k, v in lin.items()
            if isinstance(v, dict) and "deltas" in v
        ]
        parts += [
            _table(["answer", "deltas", "API calls", "CPU s (median)", "CPU s, least–most"], rows),
            "",
            f"CPU ratio {lin.get('cpu_ratio')} for a {lin.get('size_ratio')}× larger answer: "
            "the median over rounds that each render the small answer "
            f"{lin.get('size_ratio')} times and the large one once, taking turns (rounds: "
            f"{', '.join(str(x) for x in lin.get('cpu_ratio_rounds', []))}; one measurement "
            "of a second on the shared machine moves by 10-20%). Python function calls of one "
            f"render each, free of that noise: {lin.get('python_calls_ratio')}× "
            "(cProfile's count).",
            "",
            RENDER_LINEARITY_RUNS,
            "",
        ]
    dur = r.get("durability", {})
    if dur and "error" not in dur:
        parts += [
            "## Durability and replay",
            "",
            f"Replay: **{_fmt(dur.get('replay_actions_per_s'))} actions/s**.",
            "",
        ]
        rows = [
            [
                v["actions"],
                v["file_mb"],
                v["with_snapshots_s"],
                v["folded_with_snapshots"],
                v["without_snapshots_s"],
                v["folded_without_snapshots"],
            ]
            for k, v in dur.items()
            if k.startswith("rebuild_")
        ]
        parts += [
            _table(
                [
                    "log actions",
                    "file MB",
                    "rebuild with snapshots (s)",
                    "folded",
                    "without snapshots (s)",
                    "folded",
                ],
                rows,
            ),
            "",
        ]
    parts += agents_section(r.get("agents", {}))
    errors = {k: v["error"] for k, v in r.items() if isinstance(v, dict) and "error" in v}
    if errors:
        parts += (
            ["## Sections that failed", ""] + [f"- `{k}`: {v}" for k, v in errors.items()] + [""]
        )
    for image in _plots(r, plot_dir):
        parts += [f"![{image}]({image})", ""]
    parts += ["Section run times (s): " + json.dumps(r.get("section_seconds", {})), ""]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(parts))
