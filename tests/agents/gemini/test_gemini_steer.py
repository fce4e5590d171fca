"""Steering with the genuine ``gemini --acp`` (0.61.0) against the fake Gemini API: the CLI
has no way to add to a running turn. Its ACP has no steer-like method (``initialize``,
``session/new|load|prompt|cancel|set_mode|set_model``; ``session/fork``, ``session/list``
and ``session/resume`` answer "method not found"), and a second ``session/prompt`` while
one runs *replaces* it: the CLI aborts the running prompt, which answers ``stopReason:
cancelled``, and runs the new one; the model is then sent the new text without the
cancelled prompt. So the adapter declares no ``steer``; the core falls back to
interrupt-and-resend (``session/cancel``, then the text as the next prompt)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from test_gemini_integration import TURN_TIMEOUT, Session, running_gemini  # noqa: E402

from threadspindle.agents.base import AgentStartError
from threadspindle.runtime.core.agent_events import TextDelta, TurnAborted, TurnCompleted
from threadspindle.runtime.core.effect_types import PromptAgent, SteerAgent
from threadspindle.testkit.fake_model.gemini import TEXT_ANSWER, FakeGeminiServer

pytestmark = pytest.mark.timeout(150)


@pytest.fixture
def fake() -> Iterator[FakeGeminiServer]:
    server = FakeGeminiServer(slow_delay=0.25)
    server.start()
    yield server
    server.stop()


def _user_texts(fake: FakeGeminiServer) -> list[list[str]]:
    """Per model request (``streamGenerateContent``), the user texts it carries (the
    ``<session_context>`` part left out)."""
    found = []
    for request in fake.requests:
        if "streamGenerateContent" not in request.path or not isinstance(request.body, dict):
            continue
        texts = [
            str(part.get("text"))
            for content in request.body.get("contents", [])
            if content.get("role") == "user"
            for part in content.get("parts", [])
            if "text" in part and not str(part["text"]).startswith("<session_context>")
        ]
        found.append(texts)
    return found


async def _streaming(s: Session, run_id: str) -> None:
    with trio.fail_after(TURN_TIMEOUT):
        while len([e for e in s.of_run(run_id) if isinstance(e, TextDelta)]) < 3:
            await trio.sleep(0.02)


def _ended(run_id: str) -> Any:
    return lambda e: e.run_id == run_id and isinstance(e.event, TurnCompleted | TurnAborted)


async def test_a_second_prompt_mid_turn_replaces_the_first(
    tmp_path: Path, fake: FakeGeminiServer
) -> None:
    async with running_gemini(tmp_path, fake) as s:
        adapter = s.adapter
        assert not adapter.capabilities.steer  # the core interrupts and resends instead
        with pytest.raises(AgentStartError):
            await adapter.steer(SteerAgent(key="k", run_id="r1", steer_id="s1", text="x"))
        work = str(s.workdir)
        await adapter.prompt(
            PromptAgent(run_id="r1", text="SLOWTEST", agent="gemini", workdir=work)
        )
        await _streaming(s, "r1")
        # What ACP itself does with a second prompt on the busy session, sent raw (past the
        # adapter, which would cancel first): the first prompt answers "cancelled" (the
        # adapter's TurnAborted), the second runs to its end.
        params = {
            "sessionId": adapter.session_id,
            "prompt": [{"type": "text", "text": "STEERED also mention bananas"}],
        }
        with trio.fail_after(TURN_TIMEOUT):
            second = await adapter._call("session/prompt", params)
        assert second.error is None and second.result["stopReason"] == "end_turn", second
        first_end = await s.wait_for(_ended("r1"))
        assert first_end.event == TurnAborted(reason="interrupted"), first_end.event
        # Not merged: the model is sent the new text alone; the cancelled prompt is gone
        # from the history (gemini drops a cancelled turn, its user text included).
        assert _user_texts(fake)[-1] == ["STEERED also mention bananas"]

        # The fall-back as the core drives it: the next prompt while r2 runs (the adapter
        # sends session/cancel, waits for the "cancelled" answer, then prompts).
        await adapter.prompt(
            PromptAgent(run_id="r2", text="SLOWTEST", agent="gemini", workdir=work)
        )
        await _streaming(s, "r2")
        asked = len(_user_texts(fake))
        await adapter.prompt(
            PromptAgent(run_id="r3", text="STEERED again", agent="gemini", workdir=work)
        )
        assert isinstance((await s.wait_for(_ended("r2"))).event, TurnAborted)
        end = await s.wait_for(_ended("r3"))
        assert isinstance(end.event, TurnCompleted) and s.text_of("r3") == TEXT_ANSWER
        # The model sees the resent text, and again not the interrupted prompt.
        assert _user_texts(fake)[asked:] == [["STEERED also mention bananas", "STEERED again"]]
