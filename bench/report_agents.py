"""The agents section of docs/performance.md: each genuine CLI's turn latency and
throughput against its targets (bench/agents.py's results)."""

from __future__ import annotations

from typing import Any

from bench.report_format import fmt as _fmt
from bench.report_format import table as _table

__all__ = ["agent_targets", "agents_section"]


def agents_section(agents: Any) -> list[str]:
    """The "agents" section (bench/agents.py): the genuine CLIs, long-lived vs per turn."""
    if not isinstance(agents, dict) or not agents or "error" in agents:
        return []
    rows, failed = [], []
    for name, v in agents.items():
        if not isinstance(v, dict):
            continue
        if "failed" in v:
            failed.append(f"- `{name}`: {v['failed']}")
            continue
        rows.append(
            [
                name,
                v.get("long_lived_first_event_ms"),
                v.get("per_turn_first_event_ms"),
                v.get("ratio"),
                v.get("interrupt_to_end_ms"),
                v.get("spindle_overhead_ms"),
                v.get("cli_turn_start_ms"),
                v.get("abort_to_turn_end_ms"),
            ]
        )
    detail = [
        [
            name,
            v.get("long_lived_start_s"),
            v.get("long_lived_prompt_call_ms"),
            v.get("long_lived_to_model_request_ms"),
            v.get("long_lived_first_text_ms"),
            v.get("per_turn_first_text_ms"),
            v.get("long_lived_turn_end_ms"),
            v.get("per_turn_turn_end_ms"),
            v.get("per_turn_interrupt_to_end_ms"),
            v.get("spindle_in_ms"),
            v.get("spindle_out_ms"),
            v.get("abort_to_interrupt_call_ms"),
            f"{v.get('turns_measured')}/{v.get('per_turn_turns_measured')}/"
            f"{len(v.get('interrupt_to_end_all_ms') or [])}/"
            f"{len(v.get('per_turn_interrupt_to_end_all_ms') or [])}/{v.get('aborts_measured')}",
            v.get("load_average"),
        ]
        for name, v in agents.items()
        if isinstance(v, dict) and "failed" not in v
    ]
    parts = [
        "## Agents: long-lived vs one process per turn",
        "",
        "The genuine CLIs (`.agents`) through their Spindle adapters against the loopback fake "
        "model servers (`testkit/fake_model`). Medians, in ms. *Warm turn*: `prompt()` → the "
        "turn's first event, turns 2..N of one long-lived process. *Spawn per turn*: the same "
        "with a fresh process per turn (`per_turn`). *Ratio*: spawn per turn / warm (the "
        "headline). *Interrupt*: `interrupt()` after the first text delta (for a mode that "
        "sends text only whole, 0.3 s after the first event) → the turn's end event. "
        "*Spindle overhead*: the part of the warm turn start spent in Spindle — "
        "`prompt()` → the prompt handed to the OS (stdin write returned; for `opencode serve` "
        "the `prompt_async` request issued) plus the parse of the first event-bearing line → "
        "its emit; *CLI turn start* is the rest (the CLI's own warm turn start, pipe wake-up "
        "included). */abort via runtime*: `AbortRequested` posted to a live `Runtime` (durable "
        "log, core, reactor, listener, real adapter) mid-stream → the commit that ends the run. "
        "*Warm → model request arrives*: `prompt()` → the CLI's first request of the turn read "
        "by the fake model server (how much of the warm turn start the CLI spends before it "
        "asks the model). *Warm prompt() call*: how long `prompt()` itself takes (it returns "
        "after the stdin write for Claude and Gemini, after `turn/start`'s answer for Codex, "
        "after the `prompt_async` HTTP answer for opencode).",
        "",
        _table(
            [
                "CLI",
                "warm turn → first event",
                "spawn per turn → first event",
                "ratio",
                "interrupt → turn end",
                "Spindle overhead",
                "CLI turn start",
                "/abort via runtime → turn end",
            ],
            rows,
        ),
        "",
        _table(
            [
                "CLI",
                "long-lived process ready (s)",
                "warm prompt() call",
                "warm → model request arrives",
                "warm → first text",
                "per turn → first text",
                "warm → turn end",
                "per turn → turn end",
                "per turn: interrupt → turn end",
                "overhead: in",
                "overhead: out",
                "/abort → adapter interrupt()",
                "samples: turns / per-turn turns / interrupts / per-turn interrupts / aborts",
                "load average",
            ],
            detail,
        ),
        "",
    ]
    parts += agent_targets(agents)
    if failed:
        parts += ["CLIs that could not be measured:", "", *failed, ""]
    return parts


def agent_targets(agents: dict) -> list[str]:
    """Issue 8's long-lived-mode targets, per CLI: the value and whether it is met."""

    def cell(value: Any, ceiling: float, unit: str = "ms") -> str:
        if not isinstance(value, int | float):
            return "—"
        return f"{_fmt(value)} {unit} ({'met' if value <= ceiling else 'short'})"

    rows = []
    for name, v in agents.items():
        if not isinstance(v, dict) or "failed" in v:
            continue
        spawn = v.get("per_turn_first_event_ms")
        spawn_cell = "—"
        if isinstance(spawn, int | float):
            where = "in" if 400 <= spawn <= 2500 else ("above" if spawn > 2500 else "below")
            spawn_cell = f"{spawn / 1000:.2f} s ({where})"
        rows.append(
            [
                name,
                cell(v.get("long_lived_first_event_ms"), 62),
                cell(v.get("interrupt_to_end_ms"), 25),
                spawn_cell,
                cell(v.get("spindle_overhead_ms"), 5),
                cell(v.get("abort_to_turn_end_ms"), 50),
                f"{_fmt(v.get('line_to_emit_us_p50'))} / {_fmt(v.get('line_to_emit_us_p99'))}",
            ]
        )
    if not rows:
        return []
    return [
        "Against issue 8's long-lived targets (a warm turn starts in 8–62 ms, an interrupted "
        "turn ends in 4–25 ms, spawning takes 0.4–2.5 s to the first event, Spindle adds at "
        "most 5 ms to the CLI's warm turn start, `/abort` ends the turn within 50 ms). The "
        "first-event and interrupt figures are mostly the CLI's own time; the last column is "
        "what Spindle spends on every streamed line (parser start → its first event emitted, "
        "µs, median / p99 over all lines of the warm turns):",
        "",
        _table(
            [
                "CLI",
                "warm → first event ≤ 62 ms",
                "interrupt → end ≤ 25 ms",
                "spawn → first event (0.4–2.5 s)",
                "Spindle overhead ≤ 5 ms",
                "/abort → end ≤ 50 ms",
                "per line: parse → emit µs",
            ],
            rows,
        ),
        "",
    ]
