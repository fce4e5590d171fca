"""The report's sections on reading agents' output (``bench/report.py`` assembles the page):
the parsers (``bench/parsers.py``), reading a pipe (``bench/pipe_reads.py``) and what a
task's wake-up costs (``bench/wake_floor.py``)."""

from __future__ import annotations

from typing import Any

from bench.report_format import fmt as _fmt
from bench.report_format import table as _table

__all__ = ["parsers_section", "pipe_reads_section", "wake_floor_section"]


def wake_floor_section(floor: Any) -> list[str]:
    """The "wake_floor" section (bench/wake_floor.py): CPU per wake-up of an idle task."""
    if not isinstance(floor, dict) or "timer_wheel" not in floor:
        return []
    rows = [
        [how, floor[key]["cpu_us_per_wake"], floor[key]["share_of_delta_budget"]]
        for how, key in (
            ("the timer wheel (`Timers`, as the agents and tickers)", "timer_wheel"),
            ("`trio.sleep_until`", "sleep_until"),
        )
    ]
    return [
        "## What a wake-up costs",
        "",
        f"{_fmt(floor['tasks'])} trio tasks, each woken every 50 ms for "
        f"{floor['seconds']:g} s and doing nothing then: the latency section's in-process "
        "agents without their deltas (1,000 of them are 20,000 wake-ups a second). *CPU µs "
        "per wake-up*: this process's CPU over the wake-ups, the median of "
        f"{floor['rounds']} rounds taking turns. *Of a delta's budget*: the share of the "
        "50 µs a delta may cost for one core to take 20,000 a second. So in the in-process "
        "shape this much of each delta's cost is the fake agent's wake-up, before Spindle "
        "does anything; a real agent wakes in a process of its own. Command: "
        "`PYTHONPATH=. .venv/bin/python -m bench.wake_floor` (a section of `make bench`).",
        "",
        _table(["paced by", "CPU µs per wake-up", "of a delta's budget"], rows),
        "",
    ]


def pipe_reads_section(reads: Any) -> list[str]:
    """The "pipe_reads" section (bench/pipe_reads.py): CPU per line read, two readers."""
    if not isinstance(reads, dict) or "1_per_write" not in reads:
        return []
    rows = [
        [
            per_write,
            reads[f"{per_write}_per_write"]["line_reader"],
            reads[f"{per_write}_per_write"]["receive_some"],
            reads[f"{per_write}_per_write"]["ratio"],
        ]
        for per_write in (1, 10)
    ]
    return [
        "## Reading an agent's pipe",
        "",
        f"A child process writes Claude Code `stream_event` lines into a pipe at "
        f"{_fmt(reads['lines_per_s'])} lines/s, one line or ten per write; this process "
        f"reads {_fmt(reads['lines'])} of them with `LineReader` (`effects/process.py`, how "
        "every adapter reads a CLI's output: it waits for the pipe, then reads) and with "
        "trio's `FdStream.receive_some`, how it read until 2026-11-27 (a checkpoint, a read, "
        "and a wait only after a read that found the pipe empty: two task steps, two reads "
        "and an exception for every line of an agent that says a line at a time), taking "
        f"turns, {reads['rounds']} rounds each (medians). *CPU µs per line*: this process's "
        "CPU over the lines, before any parsing. What a wake-up costs shows in the two rows "
        "(the same lines, a tenth of the wake-ups). Command: "
        "`PYTHONPATH=. .venv/bin/python -m bench.pipe_reads` (a section of `make bench`).",
        "",
        _table(["lines per write", "LineReader: CPU µs per line", "receive_some", "ratio"], rows),
        "",
    ]


def parsers_section(parsers: Any) -> list[str]:
    """The "parsers" section (bench/parsers.py): one row per parser, fastest first."""
    if not isinstance(parsers, dict) or not parsers or "error" in parsers:
        return []
    rows = []
    rows_of = [(k, v) for k, v in parsers.items() if isinstance(v, dict)]
    for name, v in sorted(rows_of, key=lambda kv: -(kv[1].get("lines_per_s") or 0)):
        rate = v.get("lines_per_s")
        verdict = "—" if rate is None else ("met" if rate >= 200_000 else "short")
        rows.append(
            [
                name,
                v.get("lines"),
                rate,
                v.get("lines_per_cpu_s"),
                v.get("us_per_line"),
                v.get("decoder_share"),
                v.get("bytes_per_line"),
                v.get("mb_per_s"),
                v.get("events"),
                v.get("skipped"),
                v.get("malformed"),
                verdict,
            ]
        )
    rounds = max((v.get("rounds") or 0 for _, v in rows_of), default=0)
    load = next((v.get("load_average") for _, v in rows_of if v.get("load_average")), None)
    return [
        "## Parsers",
        "",
        "Each adapter's parser fed the genuine CLI output recorded in "
        "`tests/agents/fixtures/` as its adapter feeds it (a fresh parser per recorded "
        "process, `begin_turn` where a prompt was sent, `opencode serve` payloads decoded and "
        f"routed by session), replayed over and over: {rounds} rounds per parser, the parsers "
        "taking turns round by round (a burst of load from other jobs is spread over all); "
        "median round, one core. "
        "*lines/s* is wall clock (the verdict uses it); *lines per CPU-s* divides by this "
        "process's CPU time instead, which the other jobs on a shared machine do not inflate"
        + (f" (load average {load} when the section started)" if load else "")
        + ". Skipped: well-formed lines with no common meaning; malformed: not JSON or the "
        "wrong shape. *decoder share*: the CPU time the parsers' JSON decoder (orjson, "
        "`agents/base/fields.py: decode_json`) alone takes on the same lines, as a share of "
        "the parser's (the floor under any parser).",
        "",
        _table(
            [
                "parser",
                "lines",
                "lines/s",
                "lines per CPU-s",
                "µs/line",
                "decoder share",
                "bytes/line",
                "MB/s",
                "events",
                "skipped",
                "malformed",
                "≥ 200,000/s",
            ],
            rows,
        ),
        "",
        *_long_answers(rows_of),
        *_profiles(rows_of),
    ]


def _long_answers(rows_of: list[tuple[str, dict]]) -> list[str]:
    """One long streamed turn per streaming parser: is its cost linear in the answer?"""
    rows = []
    for name, v in rows_of:
        la = v.get("long_answer")
        if not isinstance(la, dict) or "error" in la:
            continue
        growth, linear = la.get("growth"), la.get("linear_growth")
        verdict = "—"
        if isinstance(growth, int | float) and isinstance(linear, int | float):
            verdict = "linear" if growth <= 1.5 * linear else "super-linear"
        small, large = la["deltas"]
        kb_small, kb_large = la["answer_kb"]
        rows.append(
            [
                name,
                f"{small:,} / {large:,}",
                f"{kb_small:,} / {kb_large:,}",
                f"{la['cpu_s'][0]} / {la['cpu_s'][1]}",
                f"{la['us_per_delta'][0]} / {la['us_per_delta'][1]}",
                f"{growth}× (linear: {linear}×)",
                verdict,
            ]
        )
    if not rows:
        return []
    return [
        "One long streamed answer in one turn (a recorded text-delta line, its text made 50 "
        "bytes, repeated after the recorded lines leading up to it; one fresh parser):",
        "",
        _table(
            ["parser", "deltas", "answer KB", "CPU s", "µs per delta", "growth", "verdict"], rows
        ),
        "",
    ]


def _profiles(rows_of: list[tuple[str, dict]]) -> list[str]:
    """Where the time goes in each parser below the target (cProfile, own time)."""
    out = []
    for name, v in rows_of:
        prof = v.get("profile")
        if not prof:
            continue
        top = ", ".join(f"`{p['function']}` {p['share'] * 100:.0f}%" for p in prof)
        out.append(f"- **{name}**: {top}")
    if not out:
        return []
    return [
        "Where the time goes in the parsers below 200,000 lines/s (own time, cProfile):",
        "",
        *out,
        "",
    ]
