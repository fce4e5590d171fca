"""``ingress.web.timeline`` and its drawing: what the golden logs say happened, read off
the same fold the runtime uses, and the SVG that shows it."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

from threadspindle.ingress.web.timeline import build_timeline, timeline_of_file
from threadspindle.ingress.web.timeline_svg import format_duration, runs_table, timeline_svg
from threadspindle.runtime.core import actions as A
from threadspindle.runtime.core import agent_events as E

GOLDEN = Path(__file__).parents[2] / "runtime" / "golden"


def test_interrupt_abort_and_the_queue() -> None:
    t = timeline_of_file(GOLDEN / "interrupt_queue.jsonl")
    assert [(r.run_id, r.outcome) for r in t.runs] == [
        ("r1", "interrupted"),
        ("r2", "aborted"),
        ("r3", "completed"),
    ]
    assert [p.length for p in t.queue] == [0, 1, 2, 1, 0]
    assert all(r.end >= r.start for r in t.runs) and t.start <= t.runs[0].start
    assert t.agent is not None and t.actions == 29


def test_a_failed_run_a_permission_wait_and_a_tool() -> None:
    t = timeline_of_file(GOLDEN / "permission_crash.jsonl")
    assert [r.outcome for r in t.runs] == ["completed", "failed", "completed"]
    (wait,) = t.waits
    assert wait.kind == "permission" and wait.answered and wait.end > wait.start
    tools = timeline_of_file(GOLDEN / "text_tool.jsonl").tools
    assert len(tools) == 1 and tools[0].finished


def _act(n: int, at: float, **fields: object) -> dict[str, object]:
    return {"thread_id": "web:1", "action_id": f"a{n}", "at": at, **fields}


def test_a_run_still_going_ends_now_and_tools_of_other_runs_are_ignored() -> None:
    actions = [
        A.PolicySet(**_act(1, 10.0), policy={"allowed_roots": ["/"]}),
        A.ConversationStarted(
            **_act(2, 10.0), agent="echo", requested_workdir="/", resolved_workdir="/"
        ),
        A.UserMessage(**_act(3, 11.0), author_id="u", author_name="u", text="<go>", interrupt=True),
        A.AgentConnected(**_act(4, 11.5)),
        A.AgentEventReceived(
            **_act(5, 12.0),
            run_id="r1",
            event=E.ToolStarted(tool_id="t", name="Bash", display_name="Bash"),
        ),
        A.AgentEventReceived(
            **_act(6, 12.5),
            run_id="stale",
            event=E.ToolStarted(tool_id="u", name="Old", display_name="Old"),
        ),
    ]
    t = build_timeline(actions, now=20.0)
    assert [(r.outcome, r.start, r.end) for r in t.runs] == [("running", 11.0, 20.0)]
    assert [(x.name, x.finished, x.end) for x in t.tools] == [("Bash", False, 20.0)]
    svg = timeline_svg(t)
    assert "&lt;go&gt;" in svg and "<go>" not in svg  # the prompt is escaped
    assert svg.count('class="run running"') == 1 and svg.count('class="tool unfinished"') == 1
    assert "<td>&lt;go&gt;</td>" in runs_table(t)


def test_the_svg_has_a_bar_per_run_and_the_lanes(tmp_path: Path) -> None:
    t = timeline_of_file(GOLDEN / "interrupt_queue.jsonl")
    svg = timeline_svg(t)
    assert svg.startswith("<svg") and svg.endswith("</svg>")
    for outcome in ("interrupted", "aborted", "completed"):
        assert svg.count(f'class="run {outcome}"') == 1
    assert 'class="queue"' in svg and 'id="played-rect"' in svg
    assert len(json.dumps(svg)) < 20_000


def test_spindle_web_timeline_writes_a_standalone_page(tmp_path: Path) -> None:
    out = tmp_path / "t.html"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "threadspindle.app.cli",
            "web-timeline",
            str(GOLDEN / "permission_crash.jsonl"),
            "-o",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={
            "SPINDLE_CONFIG": str(tmp_path / "none.toml"),
            "HOME": str(tmp_path),
            "PATH": "/usr/bin:/bin",
        },
    )
    assert done.returncode == 0, done.stderr
    assert "3 run(s)" in done.stderr
    page = out.read_text()
    assert page.count('class="run ') == 3 and "<style>" in page and "<script>" in page
    assert 'src="' not in page and 'href="/static' not in page  # nothing to fetch
    bad = tmp_path / "bad.jsonl"
    bad.write_text("not json\n")
    done = subprocess.run(
        [sys.executable, "-m", "threadspindle.app.cli", "web-timeline", str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
        env={
            "SPINDLE_CONFIG": str(tmp_path / "none.toml"),
            "HOME": str(tmp_path),
            "PATH": "/usr/bin:/bin",
        },
    )
    assert done.returncode == 1 and "not JSON" in done.stderr


def test_a_duration_no_log_holds_is_shown_as_unknown() -> None:
    # (A corrupt log's times: never a traceback where a page shows a duration.)
    assert [format_duration(s) for s in (0.25, 90.0, 7200.0)] == [
        "250 ms",
        "1 min 30 s",
        "2 h 00 min",
    ]
    assert {format_duration(s) for s in (math.inf, -math.inf, math.nan, 1e308)} == {"?"}
