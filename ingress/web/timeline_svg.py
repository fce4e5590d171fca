"""A ``Timeline`` drawn as inline SVG, server-side, plus the table of its runs.

Lanes from the top: runs as bars coloured by outcome, tool calls, permission and question
waits, and the queue's length as a step line; a time axis under them. Every element has a
``<title>`` (the browser shows it on hover) and every text is escaped. The drawn lanes sit
in a group clipped by ``#played``: the playback script (``static/timeline.js``) widens
that clip and moves the cursor, so a recorded thread unrolls as it happened. Without the
script the whole timeline shows.
"""

from __future__ import annotations

import math
import time
from html import escape

from threadspindle.ingress.web.timeline import Timeline

__all__ = ["OUTCOME_COLOURS", "format_duration", "runs_table", "timeline_svg"]

WIDTH = 1000
LEFT = 96  # room for the lane labels
RIGHT = 16
OUTCOME_COLOURS = {
    "completed": "#2e9e5b",
    "interrupted": "#d89a1c",
    "aborted": "#c8423b",
    "failed": "#8e2aa8",
    "running": "#3b7dd8",
}
WAIT_COLOURS = {"permission": "#e0701e", "question": "#7a5cc7"}

RUN_Y, RUN_H = 28, 26
TOOL_Y, TOOL_H = 68, 14
WAIT_Y, WAIT_H = 96, 14
QUEUE_Y, QUEUE_H = 128, 56
AXIS_Y = QUEUE_Y + QUEUE_H + 10
HEIGHT = AXIS_Y + 40


MAX_SHOWN_S = 100 * 365.25 * 86400  # a longer span (or NaN) is no duration a log can hold


def format_duration(seconds: float) -> str:
    if not -MAX_SHOWN_S < seconds < MAX_SHOWN_S:  # (NaN too) an uploaded log's odd times
        return "?"
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(round(seconds)), 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def _tick_step(span: float) -> float:
    """A round step giving 4-10 ticks over ``span`` seconds."""
    for step in (
        0.1,
        0.2,
        0.5,
        1,
        2,
        5,
        10,
        15,
        30,
        60,
        120,
        300,
        600,
        900,
        1800,
        3600,
        7200,
        21600,
        43200,
        86400,
    ):
        if span / step <= 10:
            return float(step)
    return 86400.0 * math.ceil(span / 86400 / 10)


def timeline_svg(timeline: Timeline) -> str:
    span = max(timeline.duration, 1.0)
    inner = WIDTH - LEFT - RIGHT

    def x(at: float) -> float:
        return LEFT + (at - timeline.start) / span * inner

    def w(start: float, end: float) -> float:
        return max(x(end) - x(start), 2.0)

    def rel(at: float) -> str:
        return f"{at - timeline.start:.3f}"

    out: list[str] = [
        f'<svg class="timeline" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} '
        f'{HEIGHT}" width="100%" role="img" data-start="{timeline.start:.3f}" '
        f'data-span="{span:.3f}" data-left="{LEFT}" data-inner="{inner}">',
        f"<title>Timeline of {escape(timeline.thread_id)}</title>",
        f'<defs><clipPath id="played"><rect id="played-rect" x="0" y="0" width="{WIDTH}" '
        f'height="{HEIGHT}"/></clipPath></defs>',
    ]
    for label, y in (
        ("runs", RUN_Y + RUN_H / 2),
        ("tools", TOOL_Y + TOOL_H / 2),
        ("waits", WAIT_Y + WAIT_H / 2),
        ("queue", QUEUE_Y + QUEUE_H / 2),
    ):
        out.append(f'<text class="lane" x="8" y="{y + 4:.1f}">{label}</text>')
    out.append(f'<line class="grid" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{AXIS_Y}" y2="{AXIS_Y}"/>')
    step = _tick_step(span)
    tick = 0.0
    while tick <= span + 1e-9:
        tx = LEFT + tick / span * inner
        out.append(
            f'<line class="grid" x1="{tx:.1f}" x2="{tx:.1f}" y1="{RUN_Y - 6}" y2="{AXIS_Y + 4}"/>'
        )
        out.append(
            f'<text class="tick" x="{tx:.1f}" y="{AXIS_Y + 18}">'
            f"{escape(format_duration(tick) if tick else '0')}</text>"
        )
        tick += step
    out.append('<g clip-path="url(#played)">')
    for n, run in enumerate(timeline.runs, 1):
        colour = OUTCOME_COLOURS.get(run.outcome, "#888")
        tip = (
            f"run {n} ({run.run_id}): {run.outcome}, {format_duration(run.end - run.start)}"
            f"\n{run.prompt}"
        )
        out.append(
            f'<rect class="run {escape(run.outcome)}" data-t="{rel(run.start)}" '
            f'x="{x(run.start):.1f}" y="{RUN_Y}" width="{w(run.start, run.end):.1f}" '
            f'height="{RUN_H}" rx="3" fill="{colour}"><title>{escape(tip)}</title></rect>'
        )
        if w(run.start, run.end) > 28:
            out.append(
                f'<text class="runlabel" x="{x(run.start) + 4:.1f}" '
                f'y="{RUN_Y + RUN_H / 2 + 4:.1f}">{n}</text>'
            )
    for tool in timeline.tools:
        state = "error" if tool.error else ("done" if tool.finished else "unfinished")
        tip = f"{tool.name}: {state}, {format_duration(tool.end - tool.start)}"
        out.append(
            f'<rect class="tool {state}" data-t="{rel(tool.start)}" x="{x(tool.start):.1f}" '
            f'y="{TOOL_Y}" width="{w(tool.start, tool.end):.1f}" height="{TOOL_H}" rx="2">'
            f"<title>{escape(tip)}</title></rect>"
        )
    for wait in timeline.waits:
        colour = WAIT_COLOURS.get(wait.kind, "#888")
        how = "answered" if wait.answered else "not answered"
        tip = f"{wait.kind} ({how}) {format_duration(wait.end - wait.start)}\n{wait.text}"
        out.append(
            f'<rect class="wait {escape(wait.kind)}" data-t="{rel(wait.start)}" '
            f'x="{x(wait.start):.1f}" y="{WAIT_Y}" width="{w(wait.start, wait.end):.1f}" '
            f'height="{WAIT_H}" rx="2" fill="{colour}"><title>{escape(tip)}</title></rect>'
        )
    peak = max((p.length for p in timeline.queue), default=0)
    scale = QUEUE_H / max(peak, 1)
    points: list[str] = []
    length = 0
    for point in timeline.queue:
        px = x(point.at)
        points.append(f"{px:.1f},{QUEUE_Y + QUEUE_H - length * scale:.1f}")
        length = point.length
        points.append(f"{px:.1f},{QUEUE_Y + QUEUE_H - length * scale:.1f}")
    points.append(f"{x(timeline.end):.1f},{QUEUE_Y + QUEUE_H - length * scale:.1f}")
    out.append(
        f'<polyline class="queue" points="{" ".join(points)}"><title>queue length '
        f"(peak {peak})</title></polyline>"
    )
    out.append("</g>")
    out.append(
        f'<text class="tick" x="{LEFT - 6}" y="{QUEUE_Y + 8}" text-anchor="end">{peak}</text>'
    )
    out.append(
        f'<line id="cursor" class="cursor" x1="{WIDTH - RIGHT}" x2="{WIDTH - RIGHT}" '
        f'y1="{RUN_Y - 8}" y2="{AXIS_Y}"/>'
    )
    legend_x = LEFT
    for name, colour in (*OUTCOME_COLOURS.items(), *WAIT_COLOURS.items()):
        out.append(
            f'<rect x="{legend_x}" y="{HEIGHT - 14}" width="10" height="10" '
            f'fill="{colour}"/><text class="legend" x="{legend_x + 14}" '
            f'y="{HEIGHT - 5}">{escape(name)}</text>'
        )
        legend_x += 14 + 8 * len(name) + 16
    out.append("</svg>")
    return "\n".join(out)


def runs_table(timeline: Timeline) -> str:
    """Every run as a table row: number, start, duration, outcome, tools, prompt."""
    rows = []
    for n, run in enumerate(timeline.runs, 1):
        tools = sum(1 for t in timeline.tools if t.run_id == run.run_id)
        waits = sum(1 for w in timeline.waits if w.run_id == run.run_id)
        rows.append(
            f'<tr class="{escape(run.outcome)}"><td>{n}</td>'
            f"<td>+{escape(format_duration(run.start - timeline.start))}</td>"
            f"<td>{escape(format_duration(run.end - run.start))}</td>"
            f'<td><span class="outcome {escape(run.outcome)}">{escape(run.outcome)}</span></td>'
            f"<td>{tools}</td><td>{waits}</td><td>{escape(run.prompt)}</td></tr>"
        )
    if not rows:
        rows.append('<tr><td colspan="7">No run yet.</td></tr>')
    try:
        started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(timeline.start))
    except (OverflowError, OSError, ValueError):  # an uploaded log's time no clock shows
        started = "?"
    return (
        f'<p class="meta">{timeline.actions} actions from {escape(started)} over '
        f"{escape(format_duration(timeline.duration))}"
        + (f" · {escape(timeline.agent)}" if timeline.agent else "")
        + (f" in <code>{escape(timeline.workdir)}</code>" if timeline.workdir else "")
        + "</p>"
        '<table class="runs"><thead><tr><th>#</th><th>start</th><th>duration</th>'
        "<th>outcome</th><th>tools</th><th>waits</th><th>prompt</th></tr></thead><tbody>"
        + "".join(rows)
        + "</tbody></table>"
    )
