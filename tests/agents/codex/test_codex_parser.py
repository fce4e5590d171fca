"""The Codex parsers over the real transcripts (``fixtures/codex``), the launch spec, the
conversation listing, and a hypothesis fuzz: no input makes a parser raise, and every line
is accounted for (an event, a response, a request, a skip or a malformed count).

Fixtures are copies of ``../shared/fixtures/agent-cli``: ``codex-*.jsonl`` are ``codex exec
--json`` stdout; ``codex*.dialog.jsonl`` are recorded ``codex app-server`` dialogs
(``dir: in`` = what codex printed).
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from threadspindle.agents.base import AgentOptions, McpServer
from threadspindle.agents.base.launch import mcp_token_env
from threadspindle.agents.codex import CodexAdapter, list_conversations
from threadspindle.agents.codex.exec_parser import ExecParser
from threadspindle.agents.codex.launch import (
    launch_argv,
    launch_env,
    launch_spec,
    turn_input,
    turn_text,
)
from threadspindle.agents.codex.parser import AppServerParser, PendingRequest
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
from threadspindle.runtime.core.model import Attachment

FIXTURES = Path(__file__).parents[1] / "fixtures" / "codex"


def _lines(name: str) -> list[str]:
    return (FIXTURES / name).read_text().splitlines()


def _dialog_in(name: str, proc: int | None = None) -> list[str]:
    """The lines codex printed in a recorded app-server dialog."""
    out = []
    for line in _lines(name):
        rec = json.loads(line)
        if rec["dir"] == "in" and (proc is None or rec.get("proc") == proc):
            out.append(json.dumps(rec["msg"]))
    return out


def _exec_events(name: str) -> tuple[ExecParser, list[object]]:
    parser = ExecParser()
    events: list[object] = []
    for line in _lines(name):
        events += parser.feed(line).events
    return parser, events


# -- codex exec --json ------------------------------------------------------------------


def test_exec_text_answer() -> None:
    parser, events = _exec_events("codex-text.jsonl")
    assert events[0] == SessionStarted(session_id="01a20066-dd4f-7363-aaed-4e64d1f0cb20")
    assert events[1] == TextDelta(text="Hello from fake model.", block="item_0")
    done = events[2]
    assert isinstance(done, TurnCompleted) and not done.is_error
    assert done.session_id == "01a20066-dd4f-7363-aaed-4e64d1f0cb20"
    assert done.usage is not None
    assert (done.usage.input_tokens, done.usage.output_tokens) == (10, 5)
    assert len(events) == 3 and parser.ended
    assert parser.stats.malformed == 0
    assert parser.stats.skipped_types == {"turn.started": 1}


def test_exec_tool_call() -> None:
    _, events = _exec_events("codex-tool.jsonl")
    kinds = [type(e).__name__ for e in events]
    assert kinds == ["SessionStarted", "ToolStarted", "ToolFinished", "TextDelta", "TurnCompleted"]
    started, finished = events[1], events[2]
    assert isinstance(started, ToolStarted) and isinstance(finished, ToolFinished)
    assert started.tool_id == finished.tool_id == "item_0"
    assert started.display_name == "Shell" and started.input_summary == "echo hi"
    assert finished.result == "hi\n" and not finished.is_error
    text = events[3]
    assert isinstance(text, TextDelta) and text.text.startswith("Tool said: ")


def test_exec_resume_keeps_the_thread_id() -> None:
    _, first = _exec_events("codex-text.jsonl")
    _, resumed = _exec_events("codex-resume.jsonl")
    assert isinstance(first[0], SessionStarted) and isinstance(resumed[0], SessionStarted)
    assert resumed[0].session_id == first[0].session_id


def test_exec_killed_turn_has_no_end() -> None:
    parser, events = _exec_events("codex-interrupt-SIGTERM.jsonl")
    assert [type(e) for e in events] == [SessionStarted]
    assert not parser.ended  # the adapter turns the exit into TurnAborted


def test_exec_errors_from_the_report() -> None:
    parser = ExecParser()
    lines = [
        '{"type":"error","message":"Reconnecting... 1/5 (stream disconnected)"}',
        '{"type":"error","message":"Connection failed: error sending request"}',
        '{"type":"turn.failed","error":{"message":"Connection failed: error sending request"}}',
        '{"type":"item.completed","item":{"type":"error","message":"Model metadata not found"}}',
    ]
    events = [e for line in lines for e in parser.feed(line).events]
    assert events[0] == AgentError(
        message="Reconnecting... 1/5 (stream disconnected)", retryable=True
    )
    # the final error is told once: as the failed turn's error
    failed = events[1]
    assert isinstance(failed, TurnCompleted) and failed.is_error
    assert failed.error == "Connection failed: error sending request"
    assert events[2] == AgentError(message="Model metadata not found", retryable=True)
    assert len(events) == 3 and parser.ended and parser.held_error is None
    # a final error without turn.failed is not lost
    other = ExecParser()
    other.feed('{"type":"error","message":"boom"}')
    last = other.feed('{"type":"turn.completed","usage":{}}')
    told, done = last.events
    assert told == AgentError(message="boom") and isinstance(done, TurnCompleted)
    assert last.turn_ended
    assert other.feed('{"type":"turn.started"}').events == []


def test_app_server_final_error_is_told_once() -> None:
    parser = AppServerParser()
    err = {
        "method": "error",
        "params": {"error": {"message": "Connection failed"}, "willRetry": False, "turnId": "u"},
    }
    assert parser.feed(json.dumps(err)).events == []
    failed = {
        "method": "turn/completed",
        "params": {"threadId": "t", "turn": {"id": "u", "status": "failed", "error": None}},
    }
    ended = parser.feed(json.dumps(failed))
    (end,) = ended.events
    assert ended.turn_ended and ended.turn_id == "u"
    assert isinstance(end, TurnCompleted) and end.is_error
    assert end.error == "Connection failed"
    parser.feed(json.dumps(err))
    interrupted = {
        "method": "turn/completed",
        "params": {"threadId": "t", "turn": {"id": "u", "status": "interrupted"}},
    }
    told, aborted = parser.feed(json.dumps(interrupted)).events
    assert told == AgentError(message="Connection failed")
    assert aborted == TurnAborted(reason="interrupted")


# -- codex app-server -------------------------------------------------------------------


def _by_turn(lines: list[str]) -> tuple[AppServerParser, dict[str | None, list[object]], list]:
    parser = AppServerParser()
    turns: dict[str | None, list[object]] = defaultdict(list)
    parsed = []
    for line in lines:
        p = parser.feed(line)
        parsed.append(p)
        for event in p.events:
            turns[p.turn_id].append(event)
    return parser, turns, parsed


def _text(events: list[object]) -> str:
    return "".join(e.text for e in events if isinstance(e, TextDelta))


def test_app_server_dialog_turns() -> None:
    parser, turns, parsed = _by_turn(_dialog_in("codex.dialog.jsonl"))
    assert parser.stats.malformed == 0
    ends = {
        tid: [e for e in evs if isinstance(e, (TurnCompleted, TurnAborted))]
        for tid, evs in turns.items()
    }
    # every turn has exactly one end, and it is the last event of that turn
    for tid, evs in turns.items():
        assert tid is not None
        assert len(ends[tid]) == 1 and evs[-1] is ends[tid][0]
    first = turns["01a20072-a073-7f03-94e6-0a6c8ac406e4"]
    assert _text(first) == "Hello from fake model."
    assert all(e.block == "msg_f685a97c2490" for e in first if isinstance(e, TextDelta))
    done = first[-1]
    assert isinstance(done, TurnCompleted) and not done.is_error
    assert done.duration_ms == 227
    assert done.session_id == "01a20072-a03a-7371-a0f4-69d1ed35bcb1"
    assert done.usage is not None
    assert (done.usage.input_tokens, done.usage.output_tokens) == (10, 5)
    assert done.usage.context_window == 258400
    # the tool turn
    tool = turns["01a20072-a20c-7bc3-bc6d-e9c26f11a588"]
    started = [e for e in tool if isinstance(e, ToolStarted)]
    finished = [e for e in tool if isinstance(e, ToolFinished)]
    assert [s.input_summary for s in started] == ["echo hi"]
    assert finished[0].tool_id == started[0].tool_id and finished[0].result == "hi\n"
    assert _text(tool).startswith("Tool said: Chunk ID")
    # the interrupted SLOWTEST turn
    slow = turns["01a20072-a443-7523-97c3-79918eafe41a"]
    assert slow[-1] == TurnAborted(reason="interrupted")
    assert _text(slow) != ""
    # responses are handed back for the RPC layer, by id
    responses = [p.response for p in parsed if p.response is not None]
    assert [r.id for r in responses][:3] == [1, 2, 3]
    assert responses[1].result["thread"]["id"] == "01a20072-a03a-7371-a0f4-69d1ed35bcb1"
    assert "account/rateLimits/updated" in parser.stats.skipped_types


def test_app_server_permission_requests() -> None:
    parser, turns, parsed = _by_turn(_dialog_in("codex.dialog.jsonl", proc=1))
    asks = [e for evs in turns.values() for e in evs if isinstance(e, PermissionRequested)]
    assert [a.request_id for a in asks] == ["codex:0", "codex:1"]
    assert all(a.tool == "Shell" and a.detail.startswith("touch touched.txt") for a in asks)
    # the declined one: the tool ends in error, the model carries on, the turn completes
    declined_turn = next(
        evs for evs in turns.values() if any(getattr(e, "request_id", "") == "codex:1" for e in evs)
    )
    fin = [e for e in declined_turn if isinstance(e, ToolFinished)]
    assert fin and fin[0].is_error and fin[0].result == "declined"
    assert isinstance(declined_turn[-1], TurnCompleted)
    assert "rejected by user" in _text(declined_turn)
    # both are pending until answered; an answer is taken once
    assert parser.pending == {}  # both turns ended: codex resolved them
    assert not [p.refuse for p in parsed if p.refuse is not None]  # both go to the thread


def test_app_server_cancel_interrupts_the_turn() -> None:
    _, turns, _ = _by_turn(_dialog_in("codex-extra.dialog.jsonl"))
    touch = turns["01a20084-552e-7bf2-a51a-cb9c6ef1538b"]
    assert isinstance(touch[0], ToolStarted)
    assert isinstance(touch[1], PermissionRequested)
    assert touch[-1] == TurnAborted(reason="interrupted")


def test_pending_request_answers() -> None:
    parser = AppServerParser(request_prefix="codex-7")
    line = json.dumps(
        {
            "method": "item/commandExecution/requestApproval",
            "id": 4,
            "params": {"threadId": "t", "turnId": "u", "itemId": "i", "command": "ls"},
        }
    )
    asked = parser.feed(line)
    assert asked.turn_id == "u" and asked.events == [
        PermissionRequested(request_id="codex-7:4", tool="Shell", detail="ls")
    ]
    assert asked.refuse is None
    pending = parser.take_request("codex-7:4")
    assert pending is not None and pending.rpc_id == 4
    assert parser.take_request("codex-7:4") is None
    assert AppServerParser.permission_result(pending, True) == {"decision": "accept"}
    assert AppServerParser.permission_result(pending, False) == {"decision": "decline"}
    legacy = PendingRequest(1, "execCommandApproval", "permission", {})
    assert AppServerParser.permission_result(legacy, False) == {"decision": "denied"}
    ask = {
        "method": "item/tool/requestUserInput",
        "id": 5,
        "params": {
            "threadId": "t",
            "turnId": "u",
            "itemId": "i",
            "isBlocking": True,
            "questions": [
                {
                    "id": "q1",
                    "header": "Color",
                    "question": "Which one?",
                    "options": [{"label": "red", "description": ""}, {"label": "blue"}],
                }
            ],
        },
    }
    (qe,) = parser.feed(json.dumps(ask)).events
    assert qe == QuestionAsked(
        request_id="codex-7:5", question="Color — Which one?", options=("red", "blue")
    )
    q = parser.take_request("codex-7:5")
    assert q is not None
    assert AppServerParser.question_result(q, "blue") == {"answers": {"q1": {"answers": ["blue"]}}}
    assert AppServerParser.question_result(q, None) == {"answers": {"q1": {"answers": []}}}
    # a request nobody in a thread can answer is handed back unhandled
    other = parser.feed(json.dumps({"method": "item/tool/call", "id": 6, "params": {}}))
    assert other.refuse is not None and other.refuse.id == 6 and other.events == []
    assert parser.stats.skipped_types["request:item/tool/call"] == 1


def test_items_of_other_tools() -> None:
    parser = AppServerParser()
    mcp = {
        "type": "mcpToolCall",
        "id": "m1",
        "server": "process-manager",
        "tool": "restart_process",
        "arguments": {"name": "web"},
        "status": "inProgress",
    }
    (s,) = parser.feed(json.dumps({"method": "item/started", "params": {"item": mcp}})).events
    assert isinstance(s, ToolStarted)
    assert s.display_name == "Process Manager · Restart Process"
    done = dict(
        mcp, status="completed", result={"content": [{"type": "text", "text": "restarted"}]}
    )
    (f,) = parser.feed(json.dumps({"method": "item/completed", "params": {"item": done}})).events
    assert f == ToolFinished(tool_id="m1", result="restarted")
    think = {"method": "item/reasoning/summaryTextDelta", "params": {"itemId": "r", "delta": "hm"}}
    (t,) = parser.feed(json.dumps(think)).events
    assert t == ThinkingDelta(text="hm")
    err = {
        "method": "error",
        "params": {"error": {"message": "stream cut"}, "willRetry": True, "turnId": "u"},
    }
    (e,) = parser.feed(json.dumps(err)).events
    assert e == AgentError(message="stream cut", retryable=True)
    # a message completed without deltas is given whole
    msg = {"type": "agentMessage", "id": "a", "text": "whole"}
    (w,) = parser.feed(json.dumps({"method": "item/completed", "params": {"item": msg}})).events
    assert w == TextDelta(text="whole", block="a")


# -- launch spec, prompt, conversations ---------------------------------------------------


def test_launch_spec() -> None:
    opts = AgentOptions(
        binary="/x/codex",
        extra_args=("-c", "model_provider=fake"),
        home="/tmp/h",
        env=(("FAKE_API_KEY", "k"),),
        mcp_servers=(
            McpServer(name="process-manager", url="http://127.0.0.1:9/mcp", bearer_token="s3"),
        ),
    )
    argv = launch_argv(opts, per_turn=False)
    assert argv[:2] == ["/x/codex", "app-server"]
    joined = " ".join(argv)
    assert "--disable unbounded_connection_retries" in joined
    assert 'mcp_servers.process-manager.url="http://127.0.0.1:9/mcp"' in argv
    token_env = mcp_token_env("process-manager")
    assert f'mcp_servers.process-manager.bearer_token_env_var="{token_env}"' in argv
    assert "s3" not in joined  # the token travels in the environment only
    assert argv[-2:] == ["-c", "model_provider=fake"]
    env = launch_env(opts, base={"PATH": "/bin"})
    assert env[token_env] == "s3" and env["HOME"] == "/tmp/h"
    assert env["CODEX_HOME"] == "/tmp/h/.codex" and env["FAKE_API_KEY"] == "k"
    per_turn = launch_argv(
        opts, per_turn=True, session_id="abc", model="gpt-5.5", system_instruction='Be "brief"'
    )
    assert per_turn[:3] == ["/x/codex", "exec", "resume"]
    assert per_turn[-2:] == ["abc", "-"]  # the prompt goes through stdin
    assert 'developer_instructions="Be \\"brief\\""' in per_turn
    assert per_turn[per_turn.index("-m") + 1] == "gpt-5.5"
    assert "resume" not in launch_argv(opts, per_turn=True)
    spec = launch_spec(opts, workdir="/w", per_turn=False, base_env={"PATH": "/bin"})
    assert (spec.argv, spec.cwd, spec.home) == (tuple(argv), "/w", "/tmp/h")
    assert spec.env[token_env] == "s3" and spec.expose == ()


def test_prompt_with_attachments() -> None:
    atts = (
        Attachment(name="notes.txt", inline_text="remember"),
        Attachment(name="pic.png", content_type="image/png", path="/w/pic.png"),
        Attachment(name="data.bin", path="/w/data.bin"),
    )
    text = turn_text("look", atts)
    assert text.startswith("look") and "remember" in text and "/w/data.bin" in text
    assert "/w/pic.png" not in text
    items = turn_input("look", atts)
    assert items[0]["type"] == "text" and items[0]["text_elements"] == []
    assert items[1] == {"type": "localImage", "path": "/w/pic.png"}


def test_list_conversations(tmp_path: Path) -> None:
    assert list_conversations(None, str(tmp_path)) == []
    day = tmp_path / ".codex" / "sessions" / "2026" / "11" / "21"
    day.mkdir(parents=True)
    work = tmp_path / "work"
    work.mkdir()
    for n, (sid, prompt) in enumerate([("old", "first question"), ("new", "second question")]):
        rows = [
            {"type": "session_meta", "payload": {"id": sid, "cwd": str(work)}},
            {
                "type": "response_item",
                "payload": {
                    "type": "message",
                    "role": "user",
                    "content": [{"type": "input_text", "text": "<environment_context>x"}],
                },
            },
            {
                "type": "response_item",
                "payload": {
                    "type": "message",
                    "role": "user",
                    "content": [{"type": "input_text", "text": prompt}],
                },
            },
        ]
        f = day / f"rollout-2026-11-21T00-00-0{n}-{sid}.jsonl"
        f.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
        os.utime(f, (1000 + n, 1000 + n))
    (day / "rollout-broken.jsonl").write_text("not json\n")
    found = list_conversations(str(work), str(tmp_path))
    assert [(c.session_id, c.title) for c in found] == [
        ("new", "second question"),
        ("old", "first question"),
    ]
    assert list_conversations(str(tmp_path), str(tmp_path)) == []


# -- fuzz ---------------------------------------------------------------------------------

_REAL_LINES = _dialog_in("codex.dialog.jsonl") + _dialog_in("codex-extra.dialog.jsonl")
_EXEC_LINES = [ln for n in ("codex-text.jsonl", "codex-tool.jsonl") for ln in _lines(n)]
_METHODS = [
    "item/agentMessage/delta",
    "item/started",
    "item/completed",
    "turn/completed",
    "turn/started",
    "error",
    "thread/tokenUsage/updated",
    "item/commandExecution/requestApproval",
    "item/tool/requestUserInput",
    "item/reasoning/textDelta",
    "applyPatchApproval",
    "mcpServer/elicitation/request",
]
_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=20,
)
_keys = st.sampled_from(
    [
        "item",
        "turn",
        "delta",
        "itemId",
        "turnId",
        "threadId",
        "status",
        "type",
        "id",
        "text",
        "questions",
        "tokenUsage",
        "error",
        "command",
        "changes",
        "result",
        "total",
    ]
)
_shaped = st.builds(
    lambda method, rid, params: json.dumps(
        {"method": method, **({"id": rid} if rid is not None else {}), "params": params}
    ),
    st.sampled_from(_METHODS) | st.text(max_size=15),
    st.none() | st.integers() | st.text(max_size=5) | st.booleans(),
    st.dictionaries(_keys, _json_values, max_size=6) | _json_values,
)
_truncated = st.builds(
    lambda line, cut: line[: max(0, len(line) - cut)],
    st.sampled_from(_REAL_LINES + _EXEC_LINES),
    st.integers(min_value=1, max_value=400),
)
_lines_strategy = st.one_of(
    st.text(max_size=200),
    _truncated,
    _shaped,
    st.sampled_from(_REAL_LINES),
    st.just("x" * 2_000_000),
    st.just(
        '{"method": "item/agentMessage/delta", "params": {"delta": "' + "y" * 1_000_000 + '"}}'
    ),
    st.just("[" * 5000 + "]" * 5000),
)


def _accounted(parser_stats_before: tuple[int, int, int], parser: AppServerParser, p) -> bool:
    events, skipped, malformed = parser_stats_before
    s = parser.stats
    return (
        s.events > events
        or s.skipped > skipped
        or s.malformed > malformed
        or p.response is not None
        or p.refuse is not None
    )


@settings(max_examples=150, deadline=None)
@given(st.lists(_lines_strategy, min_size=1, max_size=12))
def test_fuzz_app_server_parser(lines: list[str]) -> None:
    parser = AppServerParser()
    for n, line in enumerate(lines, 1):
        before = (parser.stats.events, parser.stats.skipped, parser.stats.malformed)
        parsed = parser.feed(line)
        assert _accounted(before, parser, parsed), line[:200]
        assert parser.stats.lines == n
        if not line.strip():
            continue  # a blank line is a skip ("blank"), not an error
        try:
            json.loads(line)
        except (ValueError, RecursionError):
            assert parser.stats.malformed == before[2] + 1


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.text(max_size=200),
            _truncated,
            _shaped,
            st.sampled_from(_EXEC_LINES),
            st.just("z" * 2_000_000),
        ),
        min_size=1,
        max_size=12,
    )
)
def test_fuzz_exec_parser(lines: list[str]) -> None:
    parser = ExecParser()
    for n, line in enumerate(lines, 1):
        before = (parser.stats.events, parser.stats.skipped, parser.stats.malformed)
        events = parser.feed(line).events
        after = (parser.stats.events, parser.stats.skipped, parser.stats.malformed)
        assert after != before, line[:200]
        assert parser.stats.events - before[0] == len(events)
        assert parser.stats.lines == n


def test_approval_policy_from_the_options() -> None:
    plain = CodexAdapter(AgentOptions())
    assert (plain.approval_policy, plain.sandbox) == ("on-request", "workspace-write")
    configured = AgentOptions(
        extra_args=("-c", 'approval_policy="untrusted"', "-c", "sandbox_mode=read-only")
    )
    adapter = CodexAdapter(configured)
    assert (adapter.approval_policy, adapter.sandbox) == ("untrusted", "read-only")
    assert CodexAdapter(configured, approval_policy="never").approval_policy == "never"
