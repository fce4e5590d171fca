"""runtime/live/listener.py: one run's agent output is bounded (``RUN_OUTPUT_LIMIT_CHARS``).

The log keeps every event an agent says, so an agent that floods would fill the disk for
every thread. Past the limit the run's further events are dropped, but for those that end
the turn or wait for the user; one notice says so, and the next run starts afresh.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from runtime_harness import Chat, running, until

from threadspindle.runtime.core.actions import AgentEventReceived
from threadspindle.runtime.core.agent_events import TextDelta, ToolFinished, ToolStarted
from threadspindle.runtime.live import listener
from threadspindle.testkit.fake_agent import FakeAgentWorld, Step

LIMIT = 1_000


def _script(text: str) -> list[Step]:
    if "flood" in text:
        steps = [Step("event", TextDelta(text="x" * 99 + "\n")) for _ in range(40)]
        steps.append(
            Step(
                "event",
                ToolStarted(tool_id="t", name="Bash", display_name="Bash", input_summary="ls"),
            )
        )
        steps.append(Step("event", ToolFinished(tool_id="t", result="y" * 500)))
        return [*steps, Step("event", TextDelta(text="the end"))]
    return [Step("event", TextDelta(text=f"answer to {text}"))]


async def test_a_flood_is_cut_at_the_limit_said_once_and_the_next_run_starts_afresh(
    tmp_path: Path, autojump_clock: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(listener, "RUN_OUTPUT_LIMIT_CHARS", LIMIT)
    async with running(tmp_path, agents=FakeAgentWorld(script=_script)) as runtime:
        chat = Chat(runtime, workdir=str(tmp_path))
        await chat.start()
        await chat.say("flood")
        await until(lambda: (s := runtime.snapshot("t1")) is not None and s.run is None)
        await runtime.wait_quiet("t1")
        shown = "".join(runtime.chat.texts("t1"))  # type: ignore[attr-defined]
        assert LIMIT - 100 <= shown.count("x") <= LIMIT
        assert "the end" not in shown and "Bash" not in shown
        assert shown.count("The agent wrote more than 1,000 characters in this turn") == 1
        state = runtime.snapshot("t1")
        assert state is not None and state.counters.completed == 1  # the turn still ended
        actor = runtime.get("t1")
        assert actor is not None and actor.listener.dropped_events == 33  # 31 deltas, 2 tools
        await chat.say("again")
        await until(lambda: "answer to again" in "".join(runtime.chat.texts("t1")))  # type: ignore[attr-defined]
        runtime.log.flush()
        rows = [
            r.action for r in runtime.log.read("t1") if isinstance(r.action, AgentEventReceived)
        ]
        # What was dropped is not in the log either: the flood's 10 deltas, the notice,
        # the turn's end; the second run's answer and end.
        assert sum(isinstance(a.event, TextDelta) for a in rows) <= 11
