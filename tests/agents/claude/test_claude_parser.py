"""The Claude Code stream-json parser over the CLI's real transcripts, and fuzzed.

The transcripts in ``fixtures/claude/`` are Claude Code 2.1.197's genuine stdout (copied
from the shared fixtures); each test states what a bridge must see in one of them.
"""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from threadspindle.agents.base.parsing import ParsedLine
from threadspindle.agents.claude.parser import (
    ClaudeStreamParser,
    is_unknown_session,
    summarize_tool_input,
)
from threadspindle.runtime.core.agent_events import (
    AgentError,
    PermissionRequested,
    QuestionAsked,
    SessionStarted,
    TextDelta,
    ThinkingDelta,
    ToolFinished,
    ToolStarted,
    TurnAborted,
    TurnCompleted,
)

FIXTURES = Path(__file__).parents[1] / "fixtures" / "claude"


def read(name: str) -> tuple[ClaudeStreamParser, list[ParsedLine]]:
    parser = ClaudeStreamParser()
    return parser, [parser.feed(line) for line in (FIXTURES / name).read_text().splitlines()]


def parse(name: str) -> tuple[ClaudeStreamParser, list[object]]:
    parser, parsed = read(name)
    return parser, [e for p in parsed for e in p.events]


def feed(parser: ClaudeStreamParser, line: str) -> list[object]:
    return list(parser.feed(line).events)


def kinds(events: list[object]) -> list[str]:
    return [e.type for e in events]  # type: ignore[attr-defined]


def text(events: list[object]) -> str:
    return "".join(e.text for e in events if isinstance(e, TextDelta))


def test_text_answer() -> None:
    parser, events = parse("claude-text.jsonl")
    assert kinds(events) == ["session_started", "text_delta", "turn_completed"]
    assert events[0] == SessionStarted(
        session_id="d0279fe8-d7a0-4663-856a-947be7ae0380", model="claude-opus-4-8[1m]"
    )
    assert text(events) == "Hello from fake model."
    done = events[-1]
    assert isinstance(done, TurnCompleted)
    assert done.session_id == "d0279fe8-d7a0-4663-856a-947be7ae0380"
    assert done.cost_usd == 0.000175 and done.duration_ms == 228 and not done.is_error
    assert done.usage is not None
    assert (done.usage.input_tokens, done.usage.output_tokens) == (10, 5)
    assert done.usage.context_window == 1_000_000
    assert done.model == "claude-opus-4-8[1m]"
    assert parser.stats.malformed == 0 and parser.stats.lines == 3


def test_partial_messages_stream_deltas_and_do_not_repeat_the_whole_block() -> None:
    parser, events = parse("claude-partial.jsonl")
    deltas = [e for e in events if isinstance(e, TextDelta)]
    assert [d.text for d in deltas] == ["Hello ", "from ", "fake ", "model."]
    assert {d.block for d in deltas} == {"msg_05a71eb1667b:0"}
    assert kinds(events)[-1] == "turn_completed"
    # The whole-message `assistant` line and the lifecycle stream events are skipped, counted.
    assert parser.stats.skipped_types["assistant/already-streamed"] == 1
    assert parser.stats.skipped_types["stream_event/message_stop"] == 1
    assert (parser.stats.lines, parser.stats.skipped) == (13, 7)
    assert parser.stats.malformed == 0


def test_tool_call_start_and_end() -> None:
    _, events = parse("claude-tool.jsonl")
    assert kinds(events) == [
        "session_started",
        "tool_started",
        "tool_finished",
        "text_delta",
        "turn_completed",
    ]
    started, finished = events[1], events[2]
    assert started == ToolStarted(
        tool_id="toolu_ca09fdad686a", name="Bash", display_name="Bash", input_summary="echo hi"
    )
    assert finished == ToolFinished(tool_id="toolu_ca09fdad686a", result="hi", is_error=False)
    assert text(events) == "Tool said: hi"


def test_two_turns_of_one_long_lived_process() -> None:
    _, events = parse("claude-streamjson-input.jsonl")
    done = [e for e in events if isinstance(e, TurnCompleted)]
    assert len(done) == 2
    assert done[0].session_id == done[1].session_id
    # total_cost_usd is the process's running total (0.000175, then 0.000525): each turn
    # reports its own share.
    assert done[0].cost_usd == 0.000175
    assert abs((done[1].cost_usd or 0) - 0.00035) < 1e-12


def test_resumed_session_keeps_its_id() -> None:
    _, events = parse("claude-resume.jsonl")
    assert isinstance(events[0], SessionStarted)
    assert isinstance(events[-1], TurnCompleted)
    assert events[0].session_id == events[-1].session_id == "d0279fe8-d7a0-4663-856a-947be7ae0380"


def test_in_band_interrupt_aborts_the_turn_then_the_next_turn_completes() -> None:
    parser, events = parse("claude-control-interrupt.jsonl")
    assert kinds(events) == [
        "session_started",
        "text_delta",
        "turn_aborted",
        "session_started",
        "text_delta",
        "turn_completed",
    ]
    assert events[2] == TurnAborted(reason="interrupted")
    assert events[1].text == "chunk0 chunk1 chunk2 chunk3 chunk4 "  # the partial answer
    assert parser.stats.skipped_types["control_response"] == 1  # the ack of our interrupt
    _, parsed = read("claude-control-interrupt.jsonl")
    [ack] = [p.response for p in parsed if p.response is not None]
    assert ack.id == "req_1" and ack.error is None


def test_sigint_flushes_partial_text_once_and_aborts() -> None:
    _, events = parse("claude-interrupt-SIGINT.jsonl")
    assert text(events) == "chunk0 chunk1 chunk2 chunk3 chunk4 "  # deltas, not twice
    assert events[-1] == TurnAborted(reason="interrupted")


def test_sigterm_leaves_the_turn_open() -> None:
    # No closing lines at all: only the process exit can end this turn (the adapter's job).
    parser, parsed = read("claude-interrupt-SIGTERM.jsonl")
    events = [e for p in parsed for e in p.events]
    assert not [e for e in events if isinstance(e, TurnCompleted | TurnAborted)]
    assert not any(p.turn_ended for p in parsed)


def test_permission_request_over_stdio() -> None:
    parser = ClaudeStreamParser()
    events: list[object] = []
    pending_seen = {}
    for line in (FIXTURES / "claude-permission-stdio.jsonl").read_text().splitlines():
        events.extend(feed(parser, line))
        pending_seen.update(parser.pending)
    assert parser.pending == {}  # the turn's result: nothing is waited on any more
    asked = [e for e in events if isinstance(e, PermissionRequested)]
    assert asked == [
        PermissionRequested(
            request_id="d12d186e-f259-47af-a07c-96c12a5533ab",
            tool="Bash",
            detail="touch touched.txt (Run command)",
        )
    ]
    pending = pending_seen["d12d186e-f259-47af-a07c-96c12a5533ab"]
    assert pending.tool_name == "Bash"
    assert pending.input == {"command": "touch touched.txt", "description": "Run command"}
    assert kinds(events)[-1] == "turn_completed"


def test_a_withdrawn_request_is_no_longer_pending() -> None:
    parser = ClaudeStreamParser()
    request = {"subtype": "can_use_tool", "tool_name": "Bash", "input": {"command": "ls"}}
    feed(parser, _line({"type": "control_request", "request_id": "p1", "request": request}))
    assert "p1" in parser.pending
    assert feed(parser, _line({"type": "control_cancel_request", "request_id": "p1"})) == []
    assert parser.pending == {} and parser.stats.skipped_types["control_cancel_request"] == 1


def _line(obj: object) -> str:
    return json.dumps(obj)


def test_ask_user_question_is_a_question() -> None:
    parser = ClaudeStreamParser()
    request = {
        "subtype": "can_use_tool",
        "tool_name": "AskUserQuestion",
        "input": {
            "questions": [
                {
                    "question": "Which database?",
                    "header": "DB",
                    "options": [{"label": "SQLite"}, {"label": "Postgres"}],
                    "multiSelect": True,
                }
            ]
        },
    }
    events = feed(
        parser, _line({"type": "control_request", "request_id": "q1", "request": request})
    )
    assert events == [
        QuestionAsked(
            request_id="q1",
            question="Which database?",
            options=("SQLite", "Postgres"),
            multiple=True,
        )
    ]
    assert parser.pending["q1"].tool_name == "AskUserQuestion"


def test_mcp_tool_names_are_cleaned_and_other_requests_refused() -> None:
    parser = ClaudeStreamParser()
    tool_use = {
        "type": "tool_use",
        "id": "t1",
        "name": "mcp__process-manager__restart_process",
        "input": {"name": "web"},
    }
    events = feed(
        parser, _line({"type": "assistant", "message": {"id": "m1", "content": [tool_use]}})
    )
    assert events == [
        ToolStarted(
            tool_id="t1",
            name="mcp__process-manager__restart_process",
            display_name="Process Manager · Restart Process",
            input_summary='{"name": "web"}',
        )
    ]
    hook = {"type": "control_request", "request_id": "h1", "request": {"subtype": "hook_callback"}}
    refused = parser.feed(_line(hook))
    assert refused.events == [] and refused.refuse is not None
    assert (refused.refuse.id, refused.refuse.method) == ("h1", "hook_callback")


def test_api_retry_and_error_result() -> None:
    parser = ClaudeStreamParser()
    retry = {
        "type": "system",
        "subtype": "api_retry",
        "attempt": 1,
        "max_retries": 1,
        "retry_delay_ms": 520.7,
        "error": "unknown",
        "session_id": "s",
    }
    result = {
        "type": "result",
        "subtype": "success",
        "is_error": True,
        "result": "API Error: Unable to connect to API (ConnectionRefused)",
        "session_id": "s",
        "total_cost_usd": 0,
    }
    synthetic = {
        "type": "assistant",
        "message": {
            "id": "x",
            "model": "<synthetic>",
            "content": [{"type": "text", "text": "API Error: Unable to connect"}],
        },
    }
    assert feed(parser, _line(synthetic)) == []  # said once, as the turn's error
    events = feed(parser, _line(retry)) + feed(parser, _line(result))
    assert events[0] == AgentError(
        message="API request failed (unknown)", retryable=True, attempt=1, max_retries=1
    )
    assert isinstance(events[1], TurnCompleted) and events[1].is_error
    assert events[1].error == "API Error: Unable to connect to API (ConnectionRefused)"


# Claude Code 2.1.197's genuine output (stdout line, then stderr) when ``--resume`` names a
# session it does not have; it exits 1 before reading any prompt.
UNKNOWN_UUID_RESULT = (
    '{"type":"result","subtype":"error_during_execution","duration_ms":0,"duration_api_ms":0,'
    '"is_error":true,"num_turns":0,"stop_reason":null,'
    '"session_id":"11111111-2222-3333-4444-555555555555","total_cost_usd":0,'
    '"usage":{"input_tokens":0,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,'
    '"output_tokens":0},"modelUsage":{},"permission_denials":[],'
    '"uuid":"16e543c4-499c-4c6d-abbe-9581865d9cdd",'
    '"errors":["No conversation found with session ID: 11111111-2222-3333-4444-555555555555"]}'
)
UNKNOWN_UUID_STDERR = "No conversation found with session ID: 11111111-2222-3333-4444-555555555555"
NOT_A_UUID_STDERR = (
    "Error: --resume requires a valid session ID or session title when used with --print. "
    'Usage: claude -p --resume <session-id|title>. Provided value "not-a-uuid" is not a UUID '
    "and does not match any session title."
)


def test_a_session_the_cli_does_not_have_is_recognised() -> None:
    parser = ClaudeStreamParser()
    [end] = feed(parser, UNKNOWN_UUID_RESULT)
    assert isinstance(end, TurnCompleted) and end.is_error
    assert end.error is not None and is_unknown_session(end.error)
    assert is_unknown_session(UNKNOWN_UUID_STDERR)
    assert is_unknown_session(NOT_A_UUID_STDERR)
    # Other start-up failures are not taken for it: they must still fail the start.
    assert not is_unknown_session("error: unknown option '--no-such-flag'")
    assert not is_unknown_session("API Error: Unable to connect to API (ConnectionRefused)")
    assert not is_unknown_session("")


def test_thinking_from_whole_blocks_when_not_streamed() -> None:
    parser = ClaudeStreamParser()
    content = [{"type": "thinking", "thinking": "hmm"}, {"type": "text", "text": "ok"}]
    events = feed(parser, _line({"type": "assistant", "message": {"id": "m", "content": content}}))
    assert events == [ThinkingDelta(text="hmm"), TextDelta(text="ok", block="m:1")]


def test_summaries() -> None:
    assert summarize_tool_input("Read", {"file_path": "/a/b.py"}) == "/a/b.py"
    assert summarize_tool_input("X", {}) == ""
    assert len(summarize_tool_input("Bash", {"command": "x" * 5000})) == 300


# --- fuzz ---------------------------------------------------------------------------------

REAL_LINES = [
    line
    for path in sorted(FIXTURES.glob("*.jsonl"))
    for line in path.read_text().splitlines()
    if line.strip()
]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=20,
)
KEYS = ["type", "subtype", "event", "message", "content", "delta", "request", "session_id"]
TYPES = ["system", "stream_event", "assistant", "user", "result", "control_request", "x"]


@st.composite
def shaped_objects(draw: st.DrawFn) -> str:
    """JSON objects with the real keys and wrong-typed values: the likely breakage."""
    obj = draw(st.dictionaries(st.sampled_from(KEYS), json_values, max_size=6))
    if draw(st.booleans()):
        obj["type"] = draw(st.sampled_from(TYPES))
    return json.dumps(obj)


@st.composite
def mangled_real_lines(draw: st.DrawFn) -> str:
    """A real line cut short, or with one value swapped for a random one."""
    line = draw(st.sampled_from(REAL_LINES))
    if draw(st.booleans()):
        return line[: draw(st.integers(0, max(0, len(line) - 1)))]
    obj = json.loads(line)
    key = draw(st.sampled_from(sorted(obj)))
    obj[key] = draw(json_values)
    return json.dumps(obj)


any_line = st.one_of(
    st.text(max_size=200),
    json_values.map(json.dumps),
    shaped_objects(),
    mangled_real_lines(),
    st.sampled_from(REAL_LINES),
)


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(any_line, max_size=30))
def test_fuzz_nothing_escapes_and_every_line_is_accounted(lines: list[str]) -> None:
    parser = ClaudeStreamParser()
    produced = 0
    for line in lines:
        before = (parser.stats.malformed, parser.stats.skipped, parser.stats.events)
        events = feed(parser, line)
        produced += len(events)
        after = (parser.stats.malformed, parser.stats.skipped, parser.stats.events)
        # Every line either made events, was skipped, or was counted malformed.
        assert events or after != before
    assert parser.stats.lines == len(lines)
    assert parser.stats.events == produced


@settings(max_examples=20)
@given(st.integers(0, 3))
def test_fuzz_huge_and_deep_lines_are_counted_not_fatal(kind: int) -> None:
    parser = ClaudeStreamParser()
    huge = [
        "x" * 2_000_000,
        "[" * 100_000,
        json.dumps(
            {
                "type": "assistant",
                "message": {"id": "m", "content": [{"type": "text", "text": "y" * 1_000_000}]},
            }
        ),
        '{"type": "result", "usage": ' + "[" * 50_000,
    ][kind]
    events = feed(parser, huge)
    if kind == 2:
        assert len(events) == 1 and len(events[0].text) == 1_000_000
    else:
        assert events == [] and parser.stats.malformed == 1
