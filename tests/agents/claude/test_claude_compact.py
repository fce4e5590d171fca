"""``/compact`` with the genuine ``claude`` CLI against the fake Anthropic API: the prompt
``/compact`` is Claude Code's own command; it asks the model for a summary and the turn
ends with what the CLI printed ("Compacted"), which the adapter shows as the run's text."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_claude_integration import TURN_TIMEOUT, running_claude  # noqa: E402

from threadspindle.runtime.core.agent_events import TurnCompleted
from threadspindle.runtime.core.effect_types import PromptAgent
from threadspindle.testkit.fake_model.anthropic import FakeAnthropic, user_text

pytestmark = pytest.mark.timeout(150)


@pytest.fixture
def fake() -> object:
    server = FakeAnthropic()
    server.start()
    yield server
    server.stop()


async def test_compact_summarises_and_the_conversation_goes_on(
    tmp_path: Path, fake: FakeAnthropic
) -> None:
    async with running_claude(tmp_path, fake) as s:
        assert s.adapter.capabilities.compact
        for i, text in enumerate(("hello", "TOOLTEST", "hello 3"), 1):
            await s.turn(f"r{i}", text)
        asked = len(fake.messages_requests())
        await s.adapter.prompt(
            PromptAgent(
                run_id="r4",
                text="/compact",
                agent="claude",
                workdir=str(s.workdir),
                command="compact",
            )
        )
        end = await s.wait_for(
            lambda e: e.run_id == "r4" and isinstance(e.event, TurnCompleted), TURN_TIMEOUT
        )
        assert not end.event.is_error
        assert s.text_of("r4") == "Compacted"
        summary = fake.messages_requests()[asked:]
        assert len(summary) == 1  # one model call: the summary
        last = summary[0].body["messages"][-1]
        assert "Respond with TEXT ONLY" in user_text(last)
        await s.turn("r5", "hello again")
        assert s.text_of("r5") == "Hello from fake model."
        # The conversation after compaction starts from the summary.
        assert "continued from a previous conversation" in str(fake.messages_requests()[-1].body)
