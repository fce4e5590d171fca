"""runtime/core/agent_events.py (``split_delta``, ``bounded_event``) and listener.py: one
event carries at most ``MAX_EVENT_CHARS`` of text, whatever an agent writes.

A line of a CLI's output may hold up to 32 MiB (``LineReader``), and an agent is untrusted:
an action as large would be a log row as large, and in scale-out a JetStream message over
the servers' 1 MiB, which the thread's log could never store (every later action of the
thread waited behind it). A delta past the bound becomes several, in order, so the text
shown and replayed is whole; any other event's texts are cut (a tool card's result, an
error, a question's options), since they are shown in part anyway.
"""

from __future__ import annotations

import io
from pathlib import Path

from runtime_harness import Chat, running, until

from threadspindle.runtime.core.actions import AgentEventReceived
from threadspindle.runtime.core.agent_events import (
    MAX_EVENT_CHARS,
    MAX_EVENT_ITEMS,
    QuestionAsked,
    TextDelta,
    ThinkingDelta,
    ToolFinished,
    ToolStarted,
    bounded_event,
    split_delta,
)
from threadspindle.runtime.live.replay import export_thread, read_jsonl, replay_actions
from threadspindle.testkit.fake_agent import FakeAgentWorld, Step


def test_a_long_delta_is_split_into_pieces_that_join_to_it() -> None:
    text = "".join(chr(0x1F600 + i % 50) for i in range(2 * MAX_EVENT_CHARS + 5))
    pieces = split_delta(TextDelta(text=text, block="m:0"))
    assert [len(p.text) for p in pieces] == [MAX_EVENT_CHARS, MAX_EVENT_CHARS, 5]
    assert "".join(p.text for p in pieces) == text
    assert all(isinstance(p, TextDelta) and p.block == "m:0" for p in pieces)
    thinking = split_delta(ThinkingDelta(text="t" * (MAX_EVENT_CHARS + 1)))
    assert [type(p) for p in thinking] == [ThinkingDelta, ThinkingDelta]
    short = TextDelta(text="short")
    assert split_delta(short) == [short] and split_delta(short)[0] is short
    # A piece equals a delta made by validation (what a replay decodes from the log).
    assert pieces[2] == TextDelta.model_validate(pieces[2].model_dump())


def test_other_events_have_their_texts_cut_and_lists_shortened() -> None:
    result = ToolFinished(tool_id="t1", result="r" * (5 * MAX_EVENT_CHARS), is_error=True)
    cut = bounded_event(result)
    assert len(cut.result) == MAX_EVENT_CHARS and cut.result.endswith("…")
    assert (cut.tool_id, cut.is_error) == ("t1", True)
    question = QuestionAsked(
        request_id="q", question="?" * (MAX_EVENT_CHARS + 10), options=("a" * 20_000,) + ("b",) * 99
    )
    bounded = bounded_event(question)
    assert len(bounded.question) == MAX_EVENT_CHARS
    assert len(bounded.options) == MAX_EVENT_ITEMS
    assert len(bounded.options[0]) == MAX_EVENT_CHARS and bounded.options[1] == "b"
    small = ToolStarted(tool_id="t1", name="Bash", display_name="Bash", input_summary="ls")
    assert bounded_event(small) is small  # nothing over: the event itself


async def test_an_agent_writing_a_huge_line_is_shown_whole_in_bounded_actions(
    tmp_path: Path, autojump_clock: object
) -> None:
    answer = "".join(f"line {i} of a flood\n" for i in range(60_000))  # ~1.2 MB in one delta
    assert len(answer) > 50 * MAX_EVENT_CHARS
    tool = ToolStarted(tool_id="t1", name="Bash", display_name="Bash", input_summary="cat")

    def script(text: str) -> list[Step]:
        return [
            Step("event", tool),
            Step("event", ToolFinished(tool_id="t1", result="x" * 1_000_000)),
            Step("event", TextDelta(text=answer)),
            Step("event", TextDelta(text="done.")),
        ]

    async with running(tmp_path, agents=FakeAgentWorld(script=script)) as runtime:
        chat = Chat(runtime, workdir=str(tmp_path))
        await chat.start()
        await chat.say("go")
        await until(lambda: (s := runtime.snapshot("t1")) is not None and s.run is None)
        await runtime.wait_quiet("t1")
        shown = "".join(runtime.chat.texts("t1"))  # type: ignore[attr-defined]
        assert answer + "done." in shown
    out = io.StringIO()
    export_thread(tmp_path / "events.sqlite3", "t1", out)
    folded = list(replay_actions(read_jsonl(out.getvalue().splitlines())))
    events = [a.event for _, a, _ in folded if isinstance(a, AgentEventReceived)]
    deltas = [e for e in events if isinstance(e, TextDelta)]
    assert all(len(d.text) <= MAX_EVENT_CHARS for d in deltas)
    assert "".join(d.text for d in deltas) == answer + "done."
    (finished,) = [e for e in events if isinstance(e, ToolFinished)]
    assert len(finished.result) == MAX_EVENT_CHARS
    # Every row the log holds is bounded, and replay rebuilds the live state.
    assert max(len(line) for line in out.getvalue().splitlines()) < 8 * MAX_EVENT_CHARS
    assert folded[-1][2].state == runtime.snapshot("t1")
