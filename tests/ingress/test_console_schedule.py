"""``/schedule`` and ``/verbosity`` on the console: through a real ``spindle run`` fed by a
pipe (the replies, durability across a restart), and in process with the fake agent under
trio's mock clock (a schedule firing, a verbosity level hiding tool output)."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import trio
from test_console import lines, spindle

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "runtime"))
from runtime_harness import running, until  # noqa: E402

from threadspindle.ingress.console import ConsoleChat  # noqa: E402


def test_schedules_are_listed_cancelled_and_survive_a_restart(place):
    out = spindle(
        place,
        "run",
        "--no-mcp",
        "--agent",
        "echo",
        stdin=lines(
            "/schedule in 2h check the CI",
            "/schedule */30 * * * * every half hour",
            "/schedule list",
            "/schedule cancel s1",
            "/schedule cancel s9",
            "/schedule sometime do it",
            "/verbosity tools",
            "/verbosity loud",
            "/quit",
        ),
    )
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "⏰ Scheduled s1: in 2h · next at" in text and "check the CI" in text
    assert "⏰ Scheduled s2 (repeats): */30 * * * *" in text
    assert "Schedules (2):" in text and "cron `*/30 * * * *`" in text
    assert "Cancelled schedule s1." in text
    assert "No schedule s9 in this thread" in text
    assert "usage: /schedule <when> <prompt>. When is a delay" in text
    assert "Verbosity: tools" in text
    assert "'loud': usage: /verbosity text|tools|all" in text
    again = spindle(
        place, "run", "--no-mcp", "--agent", "echo", stdin=lines("/schedule list", "/quit")
    )
    assert again.returncode == 0, again.stderr
    assert "Schedules (1):" in again.stdout and "s2" in again.stdout
    assert "every half hour" in again.stdout and "check the CI" not in again.stdout


async def test_a_console_schedule_fires_and_verbosity_hides_tool_output(
    tmp_path: Path, autojump_clock
) -> None:
    async with running(tmp_path) as rt:
        out = io.StringIO()
        chat = ConsoleChat(
            rt,
            out=out,
            default_agent="fake",
            default_workdir=str(tmp_path),
            clock=trio.current_time,
        )
        await chat.ensure_conversation()
        await chat.handle_line("/verbosity text")
        await chat.handle_line("/schedule in 30s TOOL please")
        await until(lambda: rt.snapshot(chat.thread_id).counters.completed == 1)
        assert [t for _, t in rt.agents.delivered] == ["TOOL please"]
        shown = "\n".join(rt.chat.texts(chat.thread_id))
        assert "Tool said: done" in shown  # the answer
        assert "sleep 30" not in shown  # the tool card is not shown at verbosity text
        assert "Schedule s1 is due" in shown
