"""Session titles as the genuine CLIs give them, from recordings (``tests/agents/fixtures``):

- Codex (``codex-title.dialog.jsonl``, ``codex app-server`` 0.169.0): no title of its own
  making (its TUI names threads itself); ``thread/name/updated`` follows a client's
  ``thread/name/set`` and is a ``TitleChanged``.
- OpenCode (``opencode-steer-title.events.jsonl``, ``opencode serve`` 1.18.33): the session
  starts as "New session - <time>" and opencode asks the model for a title (the fake answers
  one); ``session.updated`` then carries it, repeated on later updates: one ``TitleChanged``.
  The same recording has a steer taken by the running loop (``SteerTracker``).
- Claude Code (``claude-title.dialog.jsonl``, 2.1.197): stream-json carries no title; the
  SDK's ``generate_session_title`` control request is answered with one, which
  ``ask_session_title`` reads.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import trio

from threadspindle.agents.base.jsonrpc import RpcPeer
from threadspindle.agents.claude.launch import CONTROL
from threadspindle.agents.claude.parser import ClaudeStreamParser
from threadspindle.agents.claude.titles import ask_session_title
from threadspindle.agents.codex.parser import AppServerParser
from threadspindle.agents.opencode.parser import OpencodeEventParser
from threadspindle.agents.opencode.steering import SteerTracker
from threadspindle.runtime.core.agent_events import TitleChanged, TurnCompleted

FIXTURES = Path(__file__).parent / "fixtures"


def _dialog(name: str) -> list[dict[str, Any]]:
    lines = (FIXTURES / name).read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def test_codex_names_a_thread_only_when_a_client_sets_it() -> None:
    dialog = _dialog("codex/codex-title.dialog.jsonl")
    parser = AppServerParser()
    titles: list[tuple[int, TitleChanged]] = []
    for index, entry in enumerate(dialog):
        if entry["dir"] == "in":
            events = parser.feed(json.dumps(entry["msg"])).events
            titles += [(index, e) for e in events if isinstance(e, TitleChanged)]
    set_at = next(
        i
        for i, e in enumerate(dialog)
        if e["dir"] == "out" and e["msg"].get("method") == ("thread/name/set")
    )
    assert [t for _, t in titles] == [TitleChanged(title="Fix the flaky CI job")]
    assert titles[0][0] > set_at  # nothing before the client named it


def test_opencode_titles_its_session_once_and_takes_a_steer() -> None:
    events = _dialog("opencode/opencode-steer-title.events.jsonl")
    session = next(e["properties"]["info"]["id"] for e in events if e["type"] == "session.updated")
    parser = OpencodeEventParser(session)
    parser.begin_turn()
    tracker = SteerTracker()
    tracker.sent("s1", "STEERED also mention bananas")
    out: list[object] = []
    for event in events:
        out += [("taken", s) for s in tracker.feed(event)]
        out += parser.feed_event(event).events
    placeholders = [
        e["properties"]["info"]["title"]
        for e in events
        if e["type"] == "session.updated"
        and e["properties"]["info"]["title"].startswith("New session - ")
    ]
    assert placeholders  # the recording has the placeholder, which is no title
    assert [e for e in out if isinstance(e, TitleChanged)] == [
        TitleChanged(title="Fake conversation title")
    ]
    ends = [i for i, e in enumerate(out) if isinstance(e, TurnCompleted)]
    assert len(ends) == 1 and out.index(("taken", "s1")) < ends[0]  # taken within the turn
    assert tracker.pending == ()


def test_claude_stream_has_no_title_and_the_title_request_has_one() -> None:
    dialog = _dialog("claude/claude-title.dialog.jsonl")
    parser = ClaudeStreamParser()
    received = [json.dumps(e["msg"]) for e in dialog if e["dir"] == "in"]
    events = [ev for line in received for ev in parser.feed(line).events]
    assert not [e for e in events if isinstance(e, TitleChanged)]
    asked = next(
        e["msg"] for e in dialog if e["dir"] == "out" and e["msg"].get("type") == "control_request"
    )
    answer = next(line for line in received if '"control_response"' in line)

    async def main() -> str | None:
        written: list[dict[str, Any]] = []

        async def write_line(line: str) -> None:
            # The CLI's recorded answer, for whatever request id the peer chose.
            written.append(json.loads(line))
            recorded = json.loads(answer)
            recorded["response"]["request_id"] = written[-1]["request_id"]
            response = ClaudeStreamParser().feed(json.dumps(recorded)).response
            assert response is not None
            peer.resolve(response)

        peer = RpcPeer(write_line, CONTROL, name="Claude Code")
        title = await ask_session_title(peer, "Please fix the flaky CI job")
        assert written[0]["request"] == asked["request"]  # the request as recorded
        return title

    assert trio.run(main) == "Fake conversation title"
