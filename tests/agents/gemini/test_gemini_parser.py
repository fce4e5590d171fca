"""The Gemini parsers over the genuine CLI's recorded output, plus a fuzz of both.

Fixtures (``fixtures/gemini/``) are copied from ``shared/fixtures/agent-cli``: the per-turn
``-o stream-json`` transcripts, and the ``--acp`` dialogs (both directions, in order) of a
full long-lived session and of the same-minute ``session/load`` failure.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from threadspindle.agents.base import AgentOptions, McpServer
from threadspindle.agents.base.launch import prompt_text
from threadspindle.agents.gemini.home import (
    ThreadHome,
    avoid_same_minute_collision,
    shared_gemini_home,
)
from threadspindle.agents.gemini.launch import launch_spec
from threadspindle.agents.gemini.parser import AcpParser, display_tool_name, tool_name_of
from threadspindle.agents.gemini.sessions import list_conversations
from threadspindle.agents.gemini.stream_parser import StreamJsonParser
from threadspindle.runtime.core.agent_events import (
    AgentEvent,
    PermissionRequested,
    SessionStarted,
    TextDelta,
    ToolFinished,
    ToolStarted,
    TurnAborted,
    TurnCompleted,
)
from threadspindle.runtime.core.model import Attachment

FIXTURES = Path(__file__).parents[1] / "fixtures" / "gemini"


def _lines(name: str) -> list[str]:
    return (FIXTURES / name).read_text().splitlines()


def _feed_counted(parser: StreamJsonParser, line: str) -> list[AgentEvent]:
    """Feed one line and check it was accounted for: events, or one skip, or one malformed."""
    before = (parser.stats.lines, parser.stats.skipped, parser.stats.malformed)
    events = parser.feed(line).events
    after = (parser.stats.lines, parser.stats.skipped, parser.stats.malformed)
    assert after[0] == before[0] + 1
    assert events or after[1] + after[2] == before[1] + before[2] + 1
    return events


def _stream(name: str) -> tuple[StreamJsonParser, list[AgentEvent]]:
    parser = StreamJsonParser()
    events: list[AgentEvent] = []
    for line in _lines(name):
        events += _feed_counted(parser, line)
    return parser, events


# --- per-turn stream-json ------------------------------------------------------------------


def test_text_transcript() -> None:
    parser, events = _stream("gemini-text.jsonl")
    assert events[0] == SessionStarted(
        session_id="d028a1fa-b81f-4987-9923-e2bcfe096e26", model="auto"
    )
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "Hello from fake model."
    assert [type(e) for e in events if isinstance(e, TextDelta)] == [TextDelta] * 4
    end = events[-1]
    assert isinstance(end, TurnCompleted) and not end.is_error
    assert end.session_id == "d028a1fa-b81f-4987-9923-e2bcfe096e26"
    assert end.duration_ms == 161 and end.model == "fake"
    assert end.usage is not None and (end.usage.input_tokens, end.usage.output_tokens) == (20, 10)
    assert parser.finished
    assert parser.stats.skipped_types == {"message:user": 1}
    assert parser.stats.malformed == 0


def test_tool_transcript() -> None:
    _, events = _stream("gemini-tool.jsonl")
    started = [e for e in events if isinstance(e, ToolStarted)]
    finished = [e for e in events if isinstance(e, ToolFinished)]
    assert len(started) == 1 and len(finished) == 1
    assert started[0].name == "run_shell_command"
    assert started[0].display_name == "run_shell_command"
    assert started[0].input_summary == "echo hi"
    assert finished[0].tool_id == started[0].tool_id
    assert finished[0].result == "hi" and not finished[0].is_error
    kinds = [e.type for e in events]
    assert kinds.index("tool_started") < kinds.index("tool_finished") < kinds.index("text_delta")
    assert kinds[-1] == "turn_completed"


def test_resume_transcript_keeps_the_session() -> None:
    _, first = _stream("gemini-text.jsonl")
    _, resumed = _stream("gemini-resume.jsonl")
    assert isinstance(first[0], SessionStarted) and isinstance(resumed[0], SessionStarted)
    assert resumed[0].session_id == first[0].session_id
    assert resumed[-1].session_id == first[0].session_id  # type: ignore[union-attr]


def test_sigint_transcript_has_no_completion() -> None:
    parser, events = _stream("gemini-interrupt-SIGINT.jsonl")
    assert not parser.finished  # the driver must report the EOF as an aborted turn
    assert not any(isinstance(e, TurnCompleted | TurnAborted) for e in events)
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["chunk0 ", "chunk1 ", "chunk2 "]


def test_stream_json_error_and_failed_tool() -> None:
    parser = StreamJsonParser(mcp_servers=("process-manager",))
    lines = [
        {"type": "init", "session_id": "s1", "model": "m"},
        {
            "type": "tool_use",
            "tool_name": "mcp_process-manager_restart_process",
            "tool_id": "t1",
            "parameters": {"name": "web"},
        },
        {"type": "tool_result", "tool_id": "t1", "status": "error", "error": {"message": "boom"}},
        {"type": "error", "severity": "error", "message": "quota"},
        {"type": "result", "status": "error", "error": {"message": "bad"}, "stats": {}},
    ]
    events = [e for line in lines for e in _feed_counted(parser, json.dumps(line))]
    assert events[1].display_name == "Process Manager · Restart Process"  # type: ignore[union-attr]
    assert events[2] == ToolFinished(tool_id="t1", result="boom", is_error=True)
    assert events[3].type == "agent_error"
    assert isinstance(events[4], TurnCompleted) and events[4].is_error
    assert events[4].error == "bad"


# --- long-lived ACP --------------------------------------------------------------------------


def _replay_dialog(name: str) -> dict[int, tuple[AcpParser, dict[Any, list[AgentEvent]]]]:
    """Feed a recorded ``--acp`` dialog as the driver would: the CLI's lines to the parser,
    our ``session/prompt`` requests as ``begin_turn``. Returns per process: the parser and
    the events per prompt id (``None``: outside any turn)."""
    procs: dict[int, tuple[AcpParser, dict[Any, list[AgentEvent]]]] = {}
    for line in _lines(name):
        entry = json.loads(line)
        if entry["dir"] == "note":
            continue
        parser, turns = procs.setdefault(entry["proc"], (AcpParser(), {}))
        msg = entry["msg"]
        if entry["dir"] == "out":
            if msg.get("method") == "session/prompt":
                parser.session_id = msg["params"]["sessionId"]
                parser.begin_turn(msg["id"])
            continue
        turn = parser.prompt_id
        before = (parser.stats.skipped, parser.stats.malformed)
        read = parser.feed(json.dumps(msg))
        after = (parser.stats.skipped, parser.stats.malformed)
        assert read.events or read.turn_ended or sum(after) == sum(before) + 1
        turns.setdefault(turn, []).extend(read.events)
    return procs


def test_acp_session_dialog() -> None:
    procs = _replay_dialog("acp-session.dialog.jsonl")
    parser, turns = procs[1]
    assert parser.stats.malformed == 0
    texts = {
        k: "".join(e.text for e in v if isinstance(e, TextDelta)) for k, v in turns.items() if k
    }
    assert texts[3] == texts[4] == texts[7] == "Hello from fake model."
    for prompt_id in (3, 4, 7):
        end = turns[prompt_id][-1]
        assert isinstance(end, TurnCompleted) and not end.is_error
        assert end.model == "gemini-3.8-flash"
        assert end.usage is not None and end.usage.input_tokens == 10
    # the tool turn: card started and finished, then the text
    tool_turn = turns[5]
    assert [e.type for e in tool_turn[:2]] == ["tool_started", "tool_finished"]
    assert tool_turn[0].name == "run_shell_command"  # type: ignore[union-attr]
    assert tool_turn[0].input_summary == "echo hi"  # type: ignore[union-attr]
    assert "Output: " in texts[5]
    # cancelled: aborted, not completed
    assert texts[6] == "chunk0 chunk1 chunk2 chunk3 "
    assert turns[6][-1] == TurnAborted(reason="interrupted")
    # permission allowed: request, then the card (there was no tool_call before it)
    allowed = turns[8]
    assert isinstance(allowed[0], PermissionRequested)
    assert allowed[0].request_id == "gemini-perm-0" and allowed[0].detail == "touch touched.txt"
    assert [e.type for e in allowed[1:3]] == ["tool_started", "tool_finished"]
    assert allowed[1].input_summary == "touch touched.txt"  # type: ignore[union-attr]
    # permission rejected: request, no card, the model is told
    rejected = turns[9]
    assert (
        isinstance(rejected[0], PermissionRequested) and rejected[0].request_id == "gemini-perm-1"
    )
    assert not any(isinstance(e, ToolStarted | ToolFinished) for e in rejected)
    assert "canceled by the user" in texts[9]
    # the permission options were understood
    assert parser.pending == {}  # every turn ended; nothing left pending

    # Process 2 loaded the session: the replayed history is outside any turn and skipped.
    loaded, turns2 = procs[2]
    assert turns2.get(None, []) == []
    assert loaded.stats.skipped_types.get("outside_turn:user_message_chunk", 0) >= 5
    assert loaded.stats.skipped_types.get("outside_turn:agent_message_chunk", 0) >= 5
    assert (
        "".join(e.text for e in turns2[3] if isinstance(e, TextDelta)) == "Hello from fake model."
    )


def test_acp_permission_options_picked() -> None:
    parser = AcpParser()
    parser.begin_turn(3)
    entries = [json.loads(x) for x in _lines("acp-session.dialog.jsonl")]
    request = next(
        e["msg"]
        for e in entries
        if isinstance(e["msg"], dict) and e["msg"].get("method") == "session/request_permission"
    )
    read = parser.feed(json.dumps(request))
    pending = parser.pending["gemini-perm-0"]
    assert (pending.allow_option, pending.reject_option) == ("proceed_once", "cancel")
    assert pending.rpc_id == 0 and read.refuse is None  # for the thread to answer
    assert parser.take_request("gemini-perm-0") is pending
    assert parser.take_request("gemini-perm-0") is None
    other = {"jsonrpc": "2.0", "id": 9, "method": "fs/read_text_file", "params": {}}
    refused = parser.feed(json.dumps(other))
    assert refused.refuse is not None and refused.refuse.id == 9 and refused.events == []


def test_acp_same_minute_load_failure() -> None:
    procs = _replay_dialog("acp-sameminute-load.dialog.jsonl")
    _, turns = procs[2]
    end = turns[3][-1]
    assert isinstance(end, TurnCompleted) and end.is_error
    assert "Session not found" in (end.error or "")


def test_acp_error_detail_and_stop_reasons() -> None:
    parser = AcpParser(session_id="s")
    parser.begin_turn(7)
    err = {"code": -32603, "message": "Internal error", "data": {"details": "quota"}}
    read = parser.feed(json.dumps({"jsonrpc": "2.0", "id": 7, "error": err}))
    assert read.turn_ended and read.events == [
        TurnCompleted(session_id="s", is_error=True, error="Internal error: quota")
    ]
    parser.begin_turn(8)
    read = parser.feed(json.dumps({"jsonrpc": "2.0", "id": 8, "result": {"stopReason": "refusal"}}))
    assert read.events[0].is_error and read.events[0].error == "stopped: refusal"  # type: ignore[union-attr]
    # A response to some other request is handed to the driver, not turned into events.
    read = parser.feed(json.dumps({"jsonrpc": "2.0", "id": 2, "result": {"sessionId": "s"}}))
    assert read.response is not None and read.response.id == 2 and read.events == []


def test_tool_names() -> None:
    assert tool_name_of("run_shell_command__run_shell_command_1795_0") == "run_shell_command"
    assert tool_name_of("weird") == "weird"
    assert display_tool_name("mcp_pm_list", ("pm",)) == "Pm · List"
    assert display_tool_name("read_file") == "read_file"


# --- fuzz: nothing escapes, every line is counted ------------------------------------------

_VALID = [
    line
    for name in ("gemini-text.jsonl", "gemini-tool.jsonl", "gemini-resume.jsonl")
    for line in _lines(name)
] + [
    json.dumps(json.loads(x)["msg"])
    for x in _lines("acp-session.dialog.jsonl")
    if json.loads(x)["dir"] == "in"
]

_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner),
    max_leaves=20,
)


def _mutations() -> st.SearchStrategy[str]:
    truncated = st.tuples(st.sampled_from(_VALID), st.floats(0, 1)).map(
        lambda t: t[0][: int(len(t[0]) * t[1])]
    )
    wrong_types = st.tuples(st.sampled_from(_VALID), _json_values, st.integers(0, 50)).map(_retype)
    huge = st.integers(100_000, 400_000).map(
        lambda n: json.dumps({"type": "message", "role": "assistant", "content": "x" * n})
    )
    noise = st.text(max_size=200) | st.binary(max_size=200).map(
        lambda b: b.decode("utf-8", "replace")
    )
    deep = st.integers(500, 5000).map(lambda n: "[" * n + "]" * n)
    return st.one_of(truncated, wrong_types, huge, noise, deep, st.sampled_from(_VALID))


def _retype(t: tuple[str, Any, int]) -> str:
    """Replace one value somewhere in a valid line with a random JSON value."""
    line, value, pick = t
    doc = json.loads(line)
    paths: list[tuple[Any, Any]] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                paths.append((node, k))
                walk(v)
        elif isinstance(node, list):
            for i, v in enumerate(node):
                paths.append((node, i))
                walk(v)

    walk(doc)
    if paths:
        parent, key = paths[pick % len(paths)]
        parent[key] = value
    return json.dumps(doc)


@settings(max_examples=150, deadline=None)
@given(st.lists(_mutations(), min_size=1, max_size=8), st.booleans())
def test_fuzz_parsers_never_raise_and_count_every_line(lines: list[str], in_turn: bool) -> None:
    stream = StreamJsonParser()
    acp = AcpParser(session_id="1ad38064-fab4-43e0-b433-b80736f72181")
    if in_turn:
        acp.begin_turn(6)
    for line in lines:
        _feed_counted(stream, line)
        before = acp.stats.skipped + acp.stats.malformed
        read = acp.feed(line)
        counted = acp.stats.skipped + acp.stats.malformed
        assert read.events or read.turn_ended or counted == before + 1
    assert stream.stats.lines == acp.stats.lines == len(lines)
    assert all(len(k) <= 60 for k in acp.stats.skipped_types)


# --- launch spec, private settings, same-minute guard, listing -----------------------------


def test_launch_spec_and_prompt_text(tmp_path: Path) -> None:
    options = AgentOptions(binary="/x/gemini", home=str(tmp_path), env=(("A", "1"),), model="m")
    spec = launch_spec(options, "/w", "/g", base_env={"PATH": "/bin"})
    assert spec.argv == ("/x/gemini", "--acp", "-m", "m")
    assert spec.env["GEMINI_CLI_HOME"] == "/g" and spec.env["HOME"] == str(tmp_path)
    assert spec.env["GEMINI_CLI_TRUST_WORKSPACE"] == "true" and spec.env["A"] == "1"
    turn = launch_spec(options, "/w", "/g", per_turn_prompt="hi", resume="sid", base_env={})
    assert turn.argv[:5] == ("/x/gemini", "--prompt=hi", "-o", "stream-json", "--approval-mode")
    assert ("-r", "sid") == turn.argv[6:8]
    assert spec.expose_writable == ("/g",)  # the settings home, read-write in the sandbox
    attachment = Attachment(name="a.txt", inline_text="hey")
    text = prompt_text("do it", (attachment,), system_instruction="be brief")
    assert text.startswith("<system_instruction>\nbe brief")
    assert '<attachment name="a.txt">\nhey\n</attachment>' in text


def test_a_thread_home_of_its_own_leaves_the_user_file_alone(tmp_path: Path) -> None:
    user = tmp_path / ".gemini"
    user.mkdir()
    # The CLI allows comments in settings.json; the user's must survive the merge.
    original = (
        '{"ui": {"theme": "x"}, // mine\n"general": {"maxAttempts": 9, /* keep */ "vimMode": true}}'
    )
    (user / "settings.json").write_text(original)
    (user / "oauth_creds.json").write_text("{}")
    (user / "commands").mkdir()
    options = AgentOptions(
        home=str(tmp_path), mcp_servers=(McpServer(name="pm", url="http://127.0.0.1:1/mcp"),)
    )
    shared = shared_gemini_home(options) / ".gemini"
    shared.mkdir(parents=True)
    (shared / "settings.json").write_text('{"mcpServers": {"pm": "an old token"}}')
    thread = ThreadHome(options, max_attempts=2)
    home = thread.path
    assert not (shared / "settings.json").exists()  # no token is left in the shared store
    assert oct(os.stat(thread.settings).st_mode & 0o777) == "0o600"
    assert oct(os.stat(home).st_mode & 0o777) == "0o700"
    merged = json.loads((home / ".gemini" / "settings.json").read_text())
    assert merged["ui"] == {"theme": "x"}
    assert merged["general"]["vimMode"] is True and merged["general"]["maxAttempts"] == 2
    assert merged["general"]["retryFetchErrors"] is False
    assert merged["mcpServers"]["pm"] == {"httpUrl": "http://127.0.0.1:1/mcp", "trust": True}
    assert (home / ".gemini" / "oauth_creds.json").resolve() == (user / "oauth_creds.json")
    assert (user / "settings.json").read_text() == original
    assert sorted(os.listdir(home / ".gemini")) == [
        "commands",
        "history",
        "oauth_creds.json",
        "settings.json",
        "tmp",
    ]
    assert (home / ".gemini" / "commands").resolve() == user / "commands"
    # the session store is the shared one: what one thread saves, every thread finds
    assert (home / ".gemini" / "tmp").resolve() == (shared / "tmp").resolve()
    assert (home / ".gemini" / "history").resolve() == (shared / "history").resolve()
    other = ThreadHome(options, max_attempts=2)
    assert other.path != home and (other.path / ".gemini" / "tmp").resolve() == shared / "tmp"
    thread.remove()
    assert not home.exists() and (shared / "tmp").is_dir() and (user / "commands").is_dir()
    other.remove()


def test_same_minute_guard_renames_only_a_colliding_file(tmp_path: Path) -> None:
    chats = tmp_path / ".gemini" / "tmp" / "work" / "chats"
    chats.mkdir(parents=True)
    sid = "1ad38064-fab4-43e0-b433-b80736f72181"
    colliding = chats / "session-2026-11-21T23-40-1ad38064.jsonl"
    older = chats / "session-2026-11-21T23-12-1ad38064.jsonl"
    other = chats / "session-2026-11-21T23-40-deadbeef.jsonl"
    for path in (colliding, older, other):
        path.write_text("{}\n")
    now = dt.datetime(2026, 11, 21, 23, 40, 30, tzinfo=dt.UTC)
    moved = avoid_same_minute_collision(tmp_path, sid, now)
    assert moved == [chats / "session-2026-11-21T23-39-1ad38064.jsonl"]
    assert not colliding.exists() and older.exists() and other.exists()
    later = dt.datetime(2026, 11, 21, 23, 41, 0, tzinfo=dt.UTC)
    assert avoid_same_minute_collision(tmp_path, sid, later) == []
    # A third file in that minute (one-turn processes resume it each turn): the next free
    # minute back, not left in place.
    colliding.write_text("{}\n")
    moved = avoid_same_minute_collision(tmp_path, sid, now)
    assert moved == [chats / "session-2026-11-21T23-38-1ad38064.jsonl"]
    assert not colliding.exists()


def test_list_conversations_reads_chat_files(tmp_path: Path) -> None:
    assert list_conversations(str(tmp_path / "nowhere"), home=str(tmp_path)) == []
    workdir = tmp_path / "work"
    workdir.mkdir()
    gemini = shared_gemini_home(AgentOptions(home=str(tmp_path))) / ".gemini"
    chats = gemini / "tmp" / "work" / "chats"
    chats.mkdir(parents=True)
    (gemini / "tmp" / "work" / ".project_root").write_text(str(workdir))

    def chat(name: str, sid: str, updated: str, prompts: list[str]) -> None:
        records: list[dict[str, Any]] = [{"sessionId": sid, "startTime": updated}]
        ctx = {"id": "c", "type": "user", "content": [{"text": "<session_context>..."}]}
        records.append({"$set": {"messages": [ctx]}})
        for i, text in enumerate(prompts):
            records.append({"id": f"m{i}", "type": "user", "content": [{"text": text}]})
        records.append({"$set": {"lastUpdated": updated}})
        (chats / name).write_text("\n".join(json.dumps(r) for r in records) + "\nnot json\n")

    chat("session-2026-11-21T10-00-aaaaaaaa.jsonl", "aaaaaaaa-1", "2026-11-21T10:00:00Z", ["a"])
    chat("session-2026-11-21T11-00-bbbbbbbb.jsonl", "bbbbbbbb-2", "2026-11-21T11:00:00Z", ["b"])
    chat("session-2026-11-21T12-00-cccccccc.jsonl", "cccccccc-3", "2026-11-21T12:00:00Z", [])
    found = list_conversations(str(workdir), home=str(tmp_path))
    assert [(c.session_id, c.title) for c in found] == [("bbbbbbbb-2", "b"), ("aaaaaaaa-1", "a")]


@settings(max_examples=60, deadline=None)
@given(st.lists(_json_values | st.text(max_size=40), max_size=8))
def test_fuzz_listing_never_raises(tmp_path_factory: Any, records: list[Any]) -> None:
    home = tmp_path_factory.mktemp("home")
    workdir = home / "work"
    workdir.mkdir()
    chats = shared_gemini_home(AgentOptions(home=str(home))) / ".gemini" / "tmp" / "w" / "chats"
    chats.mkdir(parents=True)
    (chats.parent / ".project_root").write_text(str(workdir))
    lines = [r if isinstance(r, str) else json.dumps(r) for r in records]
    meta = json.dumps({"sessionId": "s-1", "lastUpdated": "2026-11-21T10:00:00Z"})
    (chats / "session-2026-11-21T10-00-s-1.jsonl").write_text("\n".join([meta, *lines]))
    found = list_conversations(str(workdir), home=str(home))
    assert all(c.session_id for c in found) and len(found) <= 1
