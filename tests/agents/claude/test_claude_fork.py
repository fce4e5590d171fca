"""``/fork`` with the genuine ``claude`` CLI: ``--resume <id> --fork-session`` continues a
copy of the session under a new session id (the model is sent the earlier turns), and the
original session is left as it was; a restart after that resumes the fork's own id."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_claude_integration import running_claude  # noqa: E402

from threadspindle.agents.claude import list_conversations
from threadspindle.runtime.core.agent_events import SessionStarted
from threadspindle.testkit.fake_model.anthropic import FakeAnthropic

pytestmark = pytest.mark.timeout(150)


@pytest.fixture
def fake() -> object:
    server = FakeAnthropic()
    server.start()
    yield server
    server.stop()


async def test_a_fork_continues_a_copy_under_a_new_session(
    tmp_path: Path, fake: FakeAnthropic
) -> None:
    async with running_claude(tmp_path, fake, name="a") as first:
        assert first.adapter.capabilities.fork
        end = await first.turn("r1", "remember ORIGINAL-MARK")
        original = end.session_id
    assert original
    async with running_claude(tmp_path, fake, session_id=original, fork=True) as forked:
        end = await forked.turn("r1", "what did I say?")
        fork_id = end.session_id
        assert fork_id and fork_id != original
        assert [e.session_id for e in forked.of_run("r1") if isinstance(e, SessionStarted)] == [
            fork_id
        ]
        # The model is sent the original conversation, then the new prompt.
        body = str(fake.messages_requests()[-1].body["messages"])
        assert "ORIGINAL-MARK" in body and "what did I say?" in body
    sessions = {c.session_id for c in list_conversations(str(first.workdir), str(first.home))}
    assert {original, fork_id} <= sessions
    # The original session did not get the fork's turn.
    async with running_claude(tmp_path, fake, session_id=original) as again:
        await again.turn("r1", "and now?")
        body = str(fake.messages_requests()[-1].body["messages"])
        assert "what did I say?" not in body and "ORIGINAL-MARK" in body
