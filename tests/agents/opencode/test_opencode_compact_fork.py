"""``/compact`` and ``/fork`` with the genuine ``opencode serve`` against the fake Chat
Completions API: ``POST /session/<id>/summarize`` on the session's last model is opencode's
own compaction (a turn ended by the session's idle, after which the session goes on);
``POST /session/<id>/fork`` is a new session with a copy of the old one's messages."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_opencode_integration import (  # noqa: E402
    HELLO,
    OpenAIChatFake,
    _ends_turn,
    _text,
    opencode_options,
    running,
)

from threadspindle.runtime.core.agent_events import TurnCompleted
from threadspindle.runtime.core.effect_types import PromptAgent

pytestmark = pytest.mark.timeout(240)


@pytest.fixture
def fake() -> OpenAIChatFake:
    server = OpenAIChatFake()
    server.start()
    yield server
    server.stop()


async def test_compact_summarises_the_session(fake: OpenAIChatFake, tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    async with running(opencode_options(fake, tmp_path / "home"), work) as thread:
        assert thread.adapter.capabilities.compact
        await thread.turn("hello")
        asked = len(fake.requests)
        await thread.adapter.prompt(
            PromptAgent(
                run_id="c1",
                text="/compact",
                agent="opencode",
                workdir=thread.workdir,
                command="compact",
            )
        )
        end = await thread.wait_for(lambda e: e.run_id == "c1" and _ends_turn(e), timeout=90)
        assert isinstance(end.event, TurnCompleted) and not end.event.is_error, end.event
        bodies = [json.dumps(r.body) for r in fake.requests[asked:]]
        # One model call: opencode's summary template ("Do not mention the summary process").
        assert len(bodies) == 1 and "Do not mention the summary process" in bodies[0]
        after = await thread.turn("hello again")
        assert _text(after) == HELLO


async def test_fork_opens_a_new_session_with_the_history(
    fake: OpenAIChatFake, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    options = opencode_options(fake, tmp_path / "home")
    async with running(options, work) as thread:
        assert thread.adapter.capabilities.fork
        await thread.turn("remember ORIGINAL-MARK")
        original = thread.adapter._session_id
    async with running(options, work, session_id=original, fork=True) as forked:
        fork_id = forked.adapter._session_id
        assert fork_id and fork_id != original
        await forked.turn("what did I say?")
        last = json.dumps(fake.requests[-1].body)
        assert "ORIGINAL-MARK" in last and "what did I say?" in last
