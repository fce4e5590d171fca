"""Each CLI's session title becomes a ``TitleChanged`` event: Codex ``thread/name/updated``,
OpenCode ``session.updated`` (not its ``New session - <time>`` placeholder, and each title
once), Claude Code's ``summary`` line."""

from __future__ import annotations

import json

from threadspindle.agents.claude.parser import ClaudeStreamParser
from threadspindle.agents.codex.parser import AppServerParser
from threadspindle.agents.opencode.parser import OpencodeEventParser
from threadspindle.runtime.core.agent_events import TitleChanged


def test_codex_thread_name_updated_is_a_title() -> None:
    parser = AppServerParser()
    line = json.dumps(
        {
            "jsonrpc": "2.0",
            "method": "thread/name/updated",
            "params": {"threadId": "t-1", "threadName": "Fix flaky CI"},
        }
    )
    assert parser.feed(line).events == [TitleChanged(title="Fix flaky CI")]
    empty = json.dumps(
        {"jsonrpc": "2.0", "method": "thread/name/updated", "params": {"threadId": "t-1"}}
    )
    assert parser.feed(empty).events == []


def _session_updated(title: str) -> dict[str, object]:
    return {
        "type": "session.updated",
        "properties": {"sessionID": "ses_1", "info": {"id": "ses_1", "title": title}},
    }


def test_opencode_session_titles_skip_the_placeholder_and_repeats() -> None:
    parser = OpencodeEventParser("ses_1")
    placeholder = _session_updated("New session - 2026-11-21T23:23:20.282Z")
    assert parser.feed_event(placeholder).events == []
    titled = _session_updated("Parser refactor")
    assert parser.feed_event(titled).events == [TitleChanged(title="Parser refactor")]
    assert parser.feed_event(titled).events == []  # the same title again: nothing new
    renamed = _session_updated("Parser refactor, part 2")
    assert parser.feed_event(renamed).events == [TitleChanged(title="Parser refactor, part 2")]


def test_claude_summary_is_a_title() -> None:
    parser = ClaudeStreamParser()
    line = json.dumps({"type": "summary", "summary": "Debugging the queue", "leafUuid": "x"})
    assert parser.feed(line).events == [TitleChanged(title="Debugging the queue")]
