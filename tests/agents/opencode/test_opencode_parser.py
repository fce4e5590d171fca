"""The opencode parsers over real transcripts of opencode 1.18.33 (copied from the shared
fixtures into ``fixtures/opencode/``), hand-made edge cases, and a hypothesis fuzz.

* ``opencode-{text,tool,resume,interrupt-SIGINT}.jsonl``: ``opencode run --format json``.
* ``opencode.dialog.jsonl``: a recorded ``opencode serve`` session (HTTP calls and the SSE
  bus, two sessions, a restart): text, tool, abort, permission once/reject, resume.
* ``opencode-serve-events.{sse,jsonl}``: the raw ``/event`` stream and its decoded events.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from threadspindle.agents.base.parsing import ParserStats
from threadspindle.agents.opencode.parser import (
    OpencodeEventParser,
    display_name,
    error_message,
    input_summary,
    session_of,
)
from threadspindle.agents.opencode.run_parser import OpencodeRunParser
from threadspindle.runtime.core.agent_events import (
    AgentError,
    AgentEvent,
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

FIXTURES = Path(__file__).parents[1] / "fixtures" / "opencode"
HELLO = "Hello from fake model."
SID = "ses_test"


def lines_of(parser: Any, line: str) -> list[Any]:
    """The events of one line (either parser)."""
    return list(parser.feed(line).events)


def events_of(parser: OpencodeEventParser, event: Any) -> list[Any]:
    """The events of one decoded bus event."""
    return list(parser.feed_event(event).events)


def run_events(name: str) -> tuple[list[AgentEvent], OpencodeRunParser]:
    parser = OpencodeRunParser()
    events: list[AgentEvent] = []
    for line in (FIXTURES / name).read_text().splitlines():
        events.extend(lines_of(parser, line))
    return events, parser


def texts(events: list[Any]) -> str:
    return "".join(e.text for e in events if isinstance(e, TextDelta))


def of(events: list[Any], kind: type) -> list[Any]:
    return [e for e in events if isinstance(e, kind)]


# --- opencode run --format json ----------------------------------------------------------------


def test_run_text_answer() -> None:
    events, parser = run_events("opencode-text.jsonl")
    assert [type(e) for e in events] == [SessionStarted, TextDelta, TurnCompleted]
    assert events[0].session_id == "ses_dff94c279ffeLkwDSfi6EN64T4"
    assert texts(events) == HELLO
    done = events[-1]
    assert done.session_id == "ses_dff94c279ffeLkwDSfi6EN64T4" and not done.is_error
    assert done.usage is not None and (done.usage.input_tokens, done.usage.output_tokens) == (10, 5)
    assert done.cost_usd == 0.0
    assert parser.completed and parser.stats.malformed == 0
    assert parser.stats.lines == 3 and parser.stats.events == 3


def test_run_tool_call_ends_only_at_the_final_step() -> None:
    events, parser = run_events("opencode-tool.jsonl")
    started, finished = of(events, ToolStarted), of(events, ToolFinished)
    assert [(t.tool_id, t.name, t.display_name, t.input_summary) for t in started] == [
        ("call_0664398ff301", "bash", "bash", "echo hi")
    ]
    assert [(t.tool_id, t.result, t.is_error) for t in finished] == [
        ("call_0664398ff301", "hi\n", False)
    ]
    assert texts(events) == "Tool said: hi"
    completions = of(events, TurnCompleted)
    assert len(completions) == 1 and events[-1] is completions[0]
    assert completions[0].usage is not None and completions[0].usage.input_tokens == 20
    # the second step_start and the intermediate step_finish say nothing new
    assert parser.stats.skipped_types == {"step_start": 1, "step_finish": 1}


def test_run_resume_keeps_the_session_id() -> None:
    events, _ = run_events("opencode-resume.jsonl")
    sessions = {e.session_id for e in of(events, SessionStarted)}
    assert sessions == {"ses_dff94c279ffeLkwDSfi6EN64T4"}
    assert of(events, TurnCompleted)[0].session_id == "ses_dff94c279ffeLkwDSfi6EN64T4"


def test_run_interrupted_by_signal_has_no_completion() -> None:
    events, parser = run_events("opencode-interrupt-SIGINT.jsonl")
    assert [type(e) for e in events] == [SessionStarted]
    assert not parser.completed  # the adapter ends this turn with TurnAborted on exit


def test_run_error_line_is_reported() -> None:
    parser = OpencodeRunParser()
    line = {
        "type": "error",
        "sessionID": "ses_x",
        "error": {"name": "APIError", "data": {"message": "Unable to connect"}},
    }
    events = lines_of(parser, json.dumps(line))
    assert of(events, AgentError)[0].message == "APIError: Unable to connect"
    assert parser.error == "APIError: Unable to connect" and not parser.completed


# --- opencode serve: the recorded dialog --------------------------------------------------------


def replay_dialog() -> list[tuple[str, list[AgentEvent]]]:
    """Feed the recorded SSE bus to one parser per session, calling ``begin_turn`` where the
    driver sent ``prompt_async``; returns (prompt text, events of that turn) in order."""
    parsers: dict[str, OpencodeEventParser] = {}
    turns: list[tuple[str, list[AgentEvent]]] = []
    current: dict[str, list[AgentEvent]] = {}
    for line in (FIXTURES / "opencode.dialog.jsonl").read_text().splitlines():
        entry = json.loads(line)
        msg = entry["msg"]
        if entry.get("chan") == "http" and entry["dir"] == "out":
            if msg["path"].endswith("/prompt_async"):
                sid = msg["path"].split("/")[2]
                parser = parsers.setdefault(sid, OpencodeEventParser(sid))
                parser.begin_turn()
                current[sid] = []
                turns.append((msg["body"]["parts"][0]["text"], current[sid]))
            continue
        if entry.get("chan") != "sse":
            continue
        sid = session_of(msg)
        if sid is None:
            continue
        parser = parsers.setdefault(sid, OpencodeEventParser(sid))
        current.setdefault(sid, []).extend(events_of(parser, msg))
    return turns


def test_serve_dialog_turn_by_turn() -> None:
    turns = dict(replay_dialog())
    assert len(replay_dialog()) == 9

    hello = turns["hello"]
    assert texts(hello) == HELLO
    assert [type(e) for e in hello][-1] is TurnCompleted
    done = hello[-1]
    assert done.session_id == "ses_dff7c2c5cffeq8vt2Oe6XcRDze" and done.model == "fake/fake-model"
    assert done.duration_ms is not None and done.duration_ms > 0
    assert len({e.block for e in hello if isinstance(e, TextDelta)}) == 1

    tool = turns["TOOLTEST run echo hi"]
    assert [type(e) for e in tool[:2]] == [ToolStarted, ToolFinished]
    assert tool[1].result == "hi\n" and texts(tool) == "Tool said: hi"
    assert tool[-1].usage is not None and tool[-1].usage.input_tokens == 20

    slow = turns["SLOWTEST"]
    assert texts(slow) == "chunk0 chunk1 chunk2 chunk3 "  # the late full part adds nothing
    assert isinstance(slow[-1], TurnAborted) and slow[-1].reason == "interrupted"
    assert len(of(slow, TurnAborted) + of(slow, TurnCompleted)) == 1

    assert texts(turns["hello after abort"]) == HELLO


def test_serve_dialog_permissions() -> None:
    touch = [events for text, events in replay_dialog() if text == "TOUCHTEST"]
    allowed, rejected = touch
    ask = of(allowed, PermissionRequested)[0]
    assert ask.request_id == "per_20083ecbc001dZA2Go4RHYf426"
    assert ask.tool == "bash" and ask.detail == "touch touched.txt"
    assert of(allowed, ToolFinished)[0].is_error is False
    assert isinstance(allowed[-1], TurnCompleted) and not allowed[-1].is_error

    assert of(rejected, PermissionRequested)[0].request_id == "per_20083ef24001XArx4QD3PHUgqn"
    failed = of(rejected, ToolFinished)[0]
    assert failed.is_error and "rejected permission" in failed.result
    assert isinstance(rejected[-1], TurnCompleted)


def test_serve_dialog_resume_on_a_new_server() -> None:
    turns = dict(replay_dialog())
    for text in ("hello after server restart", "second prompt after restart"):
        assert texts(turns[text]) == HELLO
        assert turns[text][-1].session_id == "ses_dff7c2c5cffeq8vt2Oe6XcRDze"


def test_raw_sse_stream_decodes_like_its_jsonl() -> None:
    """The .sse capture, split into ``data:`` payloads, matches the decoded .jsonl."""
    raw = (FIXTURES / "opencode-serve-events.sse").read_text()
    payloads = [ln[5:].strip() for ln in raw.splitlines() if ln.startswith("data:")]
    decoded = (FIXTURES / "opencode-serve-events.jsonl").read_text().splitlines()
    assert [json.loads(p) for p in payloads] == [json.loads(d) for d in decoded]

    def run(lines: list[str]) -> list[AgentEvent]:
        parser = OpencodeEventParser()
        seen: set[str] = set()
        out: list[AgentEvent] = []
        for line in lines:
            event = json.loads(line)
            info = event.get("properties", {}).get("info", {})
            if event["type"] == "message.updated" and info.get("role") == "user":
                if info["id"] not in seen:  # the driver prompted here
                    seen.add(info["id"])
                    parser.begin_turn()
            out.extend(lines_of(parser, line))
        assert parser.stats.malformed == 0
        return out

    from_sse, from_jsonl = run(payloads), run(decoded)
    assert from_sse == from_jsonl
    assert of(from_sse, TurnAborted) and of(from_sse, TurnCompleted)
    assert "Tool said: hi" in texts(from_sse)


# --- edge cases ----------------------------------------------------------------------------------


def ev(kind: str, **props: Any) -> dict[str, Any]:
    return {"type": kind, "properties": {"sessionID": SID, **props}}


def busy() -> dict[str, Any]:
    return ev("session.status", status={"type": "busy"})


def test_stale_idle_before_the_turn_starts_is_ignored() -> None:
    parser = OpencodeEventParser(SID)
    parser.begin_turn()
    assert events_of(parser, ev("session.idle")) == []  # left over from the previous turn
    assert parser.turn_open
    events_of(parser, busy())
    ended = events_of(parser, ev("session.idle"))
    assert [type(e) for e in ended] == [TurnCompleted] and not parser.turn_open
    assert events_of(parser, ev("session.idle")) == []  # a second idle ends nothing
    assert parser.stats.skipped_types["session.idle"] == 2


def test_events_outside_a_turn_emit_nothing() -> None:
    parser = OpencodeEventParser(SID)
    part = {"id": "prt_1", "messageID": "msg_1", "type": "text", "text": "late", "time": {"end": 1}}
    assert events_of(parser, ev("message.part.updated", part=part)) == []
    delta = ev("message.part.delta", messageID="msg_1", partID="prt_1", field="text", delta="x")
    assert events_of(parser, delta) == []


def test_text_without_deltas_comes_from_the_completed_part() -> None:
    parser = OpencodeEventParser(SID)
    parser.begin_turn()
    events_of(parser, busy())
    opening = {"id": "prt_1", "messageID": "m", "type": "text", "text": "", "time": {"start": 1}}
    assert events_of(parser, ev("message.part.updated", part=opening)) == []
    final = dict(opening, text="all at once", time={"start": 1, "end": 2})
    assert events_of(parser, ev("message.part.updated", part=final)) == [
        TextDelta(text="all at once", block="prt_1")
    ]
    assert events_of(parser, ev("message.part.updated", part=final)) == []  # a repeat adds nothing


def test_reasoning_deltas_are_thinking() -> None:
    parser = OpencodeEventParser(SID)
    parser.begin_turn()
    part = {"id": "prt_r", "messageID": "m", "type": "reasoning", "text": "", "time": {"start": 1}}
    events_of(parser, ev("message.part.updated", part=part))
    delta = ev("message.part.delta", messageID="m", partID="prt_r", field="text", delta="hmm")
    assert events_of(parser, delta) == [ThinkingDelta(text="hmm")]
    assert parser.turn_state == "running"  # a delta is a sign of life too


def test_user_parts_are_not_answer_text() -> None:
    parser = OpencodeEventParser(SID)
    parser.begin_turn()
    events_of(parser, ev("message.updated", info={"id": "msg_u", "role": "user"}))
    part = {
        "id": "p",
        "messageID": "msg_u",
        "type": "text",
        "text": "my prompt",
        "time": {"end": 1},
    }
    assert events_of(parser, ev("message.part.updated", part=part)) == []


def test_model_retry_and_error_then_idle() -> None:
    parser = OpencodeEventParser(SID)
    parser.begin_turn()
    retry = {"type": "retry", "attempt": 1, "message": "Unable to connect", "next": 5}
    events = events_of(parser, ev("session.status", status=retry))
    assert events == [
        AgentError(
            message="model request failed, retrying: Unable to connect", retryable=True, attempt=1
        )
    ]
    assert parser.retries == 1
    error = {"name": "APIError", "data": {"message": "bad gateway", "isRetryable": False}}
    assert events_of(parser, ev("session.error", error=error)) == [
        AgentError(message="APIError: bad gateway", retryable=False)
    ]
    done = events_of(parser, ev("session.idle"))[0]
    assert (
        isinstance(done, TurnCompleted) and done.is_error and done.error == "APIError: bad gateway"
    )


def test_question_asked() -> None:
    parser = OpencodeEventParser(SID)
    parser.begin_turn()
    question = {
        "question": "Which database?",
        "header": "DB",
        "options": [{"label": "SQLite", "description": "small"}, {"label": "Postgres"}],
        "multiple": True,
    }
    events = events_of(
        parser,
        {
            "type": "question.asked",
            "properties": {"id": "que_1", "sessionID": SID, "questions": [question]},
        },
    )
    assert events == [
        QuestionAsked(
            request_id="que_1",
            question="Which database?",
            options=("SQLite", "Postgres"),
            multiple=True,
        )
    ]


def test_end_turn_aborted_from_outside_happens_once() -> None:
    parser = OpencodeEventParser(SID)
    parser.begin_turn()
    assert parser.end_turn_aborted("watchdog") == [TurnAborted(reason="watchdog")]
    assert parser.end_turn_aborted("watchdog") == []


def test_display_names() -> None:
    assert display_name("process-manager-0123456789_start_process") == (
        "Process Manager · Start Process"
    )
    assert display_name("bash") == "bash"
    assert display_name("myserver_do_thing") == "myserver_do_thing"  # not one of ours


def test_helpers() -> None:
    assert error_message({"name": "X"}) == "X"
    assert error_message(None) == "unknown error"
    assert input_summary("read", {"input": {"filePath": "/a/b.py"}}) == "/a/b.py"
    assert input_summary("mystery", {"input": {"n": 1}}) == '{"n": 1}'
    assert session_of({"properties": {"part": {"sessionID": "ses_p"}}}) == "ses_p"
    assert session_of({"type": "server.connected", "properties": {}}) is None
    assert session_of("nonsense") is None


# --- fuzz ----------------------------------------------------------------------------------------

REAL_LINES = [
    json.dumps(json.loads(line)["msg"])
    for line in (FIXTURES / "opencode.dialog.jsonl").read_text().splitlines()
    if json.loads(line).get("chan") == "sse"
][:200] + (FIXTURES / "opencode-tool.jsonl").read_text().splitlines()

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


def mutate(obj: Any, rng: random.Random, value: Any) -> Any:
    """Replace one randomly chosen nested value of ``obj`` with ``value``."""
    if isinstance(obj, dict) and obj:
        key = rng.choice(sorted(obj))
        copy = dict(obj)
        copy[key] = mutate(obj[key], rng, value) if rng.random() < 0.6 else value
        return copy
    if isinstance(obj, list) and obj:
        i = rng.randrange(len(obj))
        copy = list(obj)
        copy[i] = mutate(obj[i], rng, value) if rng.random() < 0.6 else value
        return copy
    return value


bad_lines = st.one_of(
    st.text(max_size=200),
    st.binary(max_size=200).map(lambda b: b.decode("latin-1")),
    st.tuples(st.sampled_from(REAL_LINES), st.integers(0, 10_000)).map(
        lambda t: t[0][: t[1] % max(1, len(t[0]))]  # truncated JSON
    ),
    json_values.map(json.dumps),
)
mutated_lines = st.tuples(st.sampled_from(REAL_LINES), st.integers(), json_values).map(
    lambda t: json.dumps(mutate(json.loads(t[0]), random.Random(t[1]), t[2]))
)


def _accounted(stats: ParserStats, before: tuple[int, int, int], produced: int) -> None:
    bad = (stats.malformed - before[0]) + (stats.skipped - before[1])
    assert stats.lines == before[2] + 1
    assert bad <= 1 and (bad == 1 or produced > 0), "a line neither counted nor used"


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(bad_lines, mutated_lines, st.sampled_from(REAL_LINES)), max_size=30))
def test_fuzz_event_parser_never_raises_and_counts_every_line(lines: list[str]) -> None:
    parser = OpencodeEventParser(SID)
    parser.begin_turn()
    for line in lines:
        s = parser.stats
        before = (s.malformed, s.skipped, s.lines)
        produced = lines_of(parser, line)
        _accounted(s, before, len(produced))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(bad_lines, mutated_lines, st.sampled_from(REAL_LINES)), max_size=30))
def test_fuzz_run_parser_never_raises_and_counts_every_line(lines: list[str]) -> None:
    parser = OpencodeRunParser()
    for line in lines:
        s = parser.stats
        before = (s.malformed, s.skipped, s.lines)
        produced = lines_of(parser, line)
        _accounted(s, before, len(produced))


def test_fuzz_garbage_is_malformed_exactly_once() -> None:
    for parser in (OpencodeEventParser(SID), OpencodeRunParser()):
        for line in ("", "not json", "{", "[1,2]", '"str"', "null", '{"no": "type"}', "{" * 5000):
            before = parser.stats.malformed
            assert lines_of(parser, line) == []
            assert parser.stats.malformed == before + 1


def test_huge_lines_are_handled() -> None:
    parser = OpencodeEventParser(SID)
    parser.begin_turn()
    events_of(parser, busy())
    huge = "x" * 5_000_000
    delta = ev("message.part.delta", messageID="m", partID="p", field="text", delta=huge)
    events = lines_of(parser, json.dumps(delta))
    assert events == [TextDelta(text=huge, block="p")]
    assert lines_of(parser, "[" * 100_000) == [] and parser.stats.malformed == 1


def test_a_turn_the_adapter_gave_up_on_ends_as_a_failed_completion() -> None:
    parser = OpencodeEventParser(SID)
    parser.begin_turn()
    retry = {"type": "retry", "attempt": 1, "message": "Unable to connect", "next": 5}
    events_of(parser, ev("session.status", status=retry))
    assert parser.last_retry_message == "Unable to connect"
    parser.fail_turn("model unreachable: Unable to connect")
    aborted = {"name": "MessageAbortedError", "data": {"message": "Aborted"}}
    assert events_of(parser, ev("session.error", error=aborted)) == []
    (done,) = events_of(parser, ev("session.idle"))
    assert isinstance(done, TurnCompleted) and done.is_error
    assert done.error == "model unreachable: Unable to connect"
