"""``/compact`` with the genuine ``opencode serve`` against the fake Chat Completions API:
``POST /session/<id>/summarize`` on the session's last model is opencode's own compaction;
it runs as the run's turn, ended by the session's idle, and the session goes on."""

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
        assert thread.adapter.capabilities.compact and not thread.adapter.capabilities.steer
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
