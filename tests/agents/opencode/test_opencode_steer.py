"""Steering the genuine ``opencode serve`` against the fake Chat Completions API: a second
``prompt_async`` on the busy session is stored as a user message and taken by the running
loop at its next step (here: one more step after the streaming answer), in the same busy
period: ``SteerTaken`` before the run's one ``TurnCompleted``, nothing aborted. A steer for
a turn that is over is refused and sends nothing. The session's title (opencode asks the
model for it) arrives as ``TitleChanged``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio
from test_opencode_integration import (  # noqa: E402
    HELLO,
    OpenAIChatFake,
    _ends_turn,
    opencode_options,
    running,
)

from threadspindle.runtime.core.agent_events import (
    SteerRefused,
    SteerTaken,
    TextDelta,
    TitleChanged,
    TurnCompleted,
)
from threadspindle.runtime.core.effect_types import SteerAgent
from threadspindle.testkit.fake_model.openai_chat import TITLE

pytestmark = pytest.mark.timeout(150)


@pytest.fixture
def fake() -> Iterator[OpenAIChatFake]:
    server = OpenAIChatFake(slow_delay=0.15, slow_chunks=12)
    server.start()
    yield server
    server.stop()


def _steer(steer_id: str, run_id: str, text: str) -> SteerAgent:
    return SteerAgent(key=f"t/steer/{steer_id}", run_id=run_id, steer_id=steer_id, text=text)


async def test_a_steer_joins_the_running_loop(fake: OpenAIChatFake, tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    async with running(opencode_options(fake, tmp_path / "home"), work) as thread:
        adapter = thread.adapter
        assert adapter.capabilities.steer
        run_id = await thread.prompt("SLOWTEST please")
        await thread.wait_for(lambda e: e.run_id == run_id and isinstance(e.event, TextDelta))
        await adapter.steer(_steer("s1", run_id, "STEERED also mention bananas"))
        end = await thread.wait_for(lambda e: e.run_id == run_id and _ends_turn(e))
        events = [e.event for e in thread.events if e.run_id == run_id]
        assert isinstance(end.event, TurnCompleted) and not end.event.is_error, end.event
        assert [e for e in events if isinstance(e, SteerTaken)] == [SteerTaken(steer_id="s1")]
        assert events.index(SteerTaken(steer_id="s1")) < events.index(end.event)
        assert sum(isinstance(e, TurnCompleted) for e in events) == 1
        text = "".join(e.text for e in events if isinstance(e, TextDelta))
        assert text.startswith("chunk0 ") and text.endswith(HELLO)  # the steer's own step
        # The model was asked again within the turn, with the steered text as a user message.
        last = fake.agent_requests()[-1].body
        users = [m.get("content") for m in last["messages"] if m.get("role") == "user"]
        assert any("STEERED also mention bananas" in json.dumps(c) for c in users)
        assert TitleChanged(title=TITLE) in [e.event for e in thread.events]
        # A steer for a turn that is over: refused, nothing sent.
        asked = len(fake.requests)
        await adapter.steer(_steer("s2", run_id, "too late"))
        late = [e.event for e in thread.events if isinstance(e.event, SteerRefused)]
        assert late == [SteerRefused(steer_id="s2", reason="no turn")]
        await trio.sleep(0.5)
        assert len(fake.requests) == asked
