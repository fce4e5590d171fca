"""A live run with a schedule firing, a verbosity level, an agent's wake-up cancelled and a
title replays from its exported log to exactly the chat effects the runtime applied: what
the thread shows is decided in the core, from the log alone."""

from __future__ import annotations

import io
import json
from pathlib import Path

import trio
from runtime_harness import Chat, running, until

from threadspindle.runtime.core import actions as A
from threadspindle.runtime.live.replay import (
    effect_lines,
    export_thread,
    read_jsonl,
    replay_actions,
)

CHAT_TYPES = {
    "post_output",
    "append_output",
    "edit_output",
    "seal_output",
    "typing",
    "show_permission",
    "show_question",
    "dismiss_prompt",
    "reply",
    "rename_thread",
}


async def test_schedules_verbosity_and_titles_replay_to_what_was_shown(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with running(tmp_path) as rt:
        chat = Chat(rt, "live", str(tmp_path))
        await chat.start()
        await chat.send(A.VerbositySet(**chat._base(), verbosity="tools"))
        await chat.send(
            A.ScheduleAdded(
                **chat._base(), author_id="u1", text="TOOL later", due_at=trio.current_time() + 5
            )
        )
        await chat.send(
            A.ScheduleAdded(
                **chat._base(),
                author_id="agent",
                text="wake",
                due_at=trio.current_time() + 3600,
                wakeup=True,
            )
        )
        await until(lambda: rt.snapshot("live").counters.completed == 1)
        await chat.say("TITLE please")
        await until(lambda: rt.snapshot("live").counters.completed == 2)
        await rt.wait_quiet("live")
        applied = [e.model_dump(mode="json") for e in rt.chat.of_thread("live")]
        rt.log.flush()
        out = io.StringIO()
        export_thread(rt.log.path, "live", out)
    replayed = [
        json.loads(line)["effect"]
        for line in effect_lines(replay_actions(read_jsonl(out.getvalue().splitlines())))
    ]
    assert [e for e in replayed if e["type"] in CHAT_TYPES] == applied
    shown = json.dumps(applied)
    assert "Bash(sleep 30) \\u2713" in shown  # verbosity tools: one line per tool
    assert "Schedule s1 is due" in shown and "Cancelled the agent's wake-up (s2)" in shown
    assert [e["title"] for e in applied if e["type"] == "rename_thread"] == [
        f"Session title {n}" for n in (1, 2, 3)
    ]
