"""A restart the core asks for (``/workdir set``, a new conversation, ``/model``) while the
previous agent is still starting or stopping: the prompt sent right after it goes to the
new agent, in the new workdir, and nothing fails.

Before the fix, the start that the ``StopAgent`` cut short was reported as
``EffectFailed(start_agent): AgentUnavailable: the agent is stopping``, and the core ended
the prompt's run with "The agent could not take the prompt" (seen in the console tests)."""

from __future__ import annotations

from pathlib import Path

import pytest
from runtime_harness import Chat, running, until

from threadspindle.runtime.core import actions as A
from threadspindle.testkit.fake_agent import FakeAgentWorld


def _problems(texts: list[str]) -> list[str]:
    return [t for t in texts if "could not" in t or "stopping" in t]


@pytest.mark.parametrize("start_delay_s", [0.0, 0.05, 2.0])
async def test_a_prompt_right_after_workdir_set_reaches_the_new_agent(
    tmp_path: Path, autojump_clock, start_delay_s: float
) -> None:
    agents = FakeAgentWorld(start_delay_s=start_delay_s)
    new_dir = tmp_path / "other"
    new_dir.mkdir()
    async with running(tmp_path, agents=agents) as rt:
        chat = Chat(rt, "t1", str(tmp_path))
        await chat.start()  # the agent starts in the background: not ready yet
        await chat.send(
            A.WorkdirSet(
                **chat._base(), requested_workdir=str(new_dir), resolved_workdir=str(new_dir)
            )
        )
        await chat.say("hello")
        await until(lambda: rt.snapshot("t1").counters.completed == 1)
        await rt.wait_quiet("t1")
        state = rt.snapshot("t1")
        assert state.counters.failed == 0
        assert _problems(rt.chat.texts("t1")) == []
        # The prompt went to an agent started in the new workdir.
        assert [text for _, text in agents.delivered] == ["hello"]
        assert agents.starts[-1].workdir == str(new_dir)
        assert len(agents.live()) == 1


@pytest.mark.parametrize("start_delay_s", [0.0, 0.05, 2.0])
async def test_a_prompt_right_after_a_new_conversation_reaches_the_new_agent(
    tmp_path: Path, autojump_clock, start_delay_s: float
) -> None:
    agents = FakeAgentWorld(start_delay_s=start_delay_s)
    async with running(tmp_path, agents=agents) as rt:
        chat = Chat(rt, "t1", str(tmp_path))
        await chat.start()
        await chat.end()
        await chat.start()
        await chat.say("hello")
        await until(lambda: rt.snapshot("t1").counters.completed == 1)
        await rt.wait_quiet("t1")
        assert rt.snapshot("t1").counters.failed == 0
        assert _problems(rt.chat.texts("t1")) == []
        assert [text for _, text in agents.delivered] == ["hello"]
        assert len(agents.live()) == 1


async def test_commands_and_prompt_committed_in_one_batch(tmp_path: Path, autojump_clock) -> None:
    """Start, workdir change and prompt posted without waiting: they commit in one batch, so
    the first StartAgent is still waiting to run when the StopAgent is applied; the agent
    that gets the prompt must still be the one in the new workdir."""
    agents = FakeAgentWorld()
    new_dir = tmp_path / "other"
    new_dir.mkdir()
    async with running(tmp_path, agents=agents) as rt:
        chat = Chat(rt, "t1", str(tmp_path))
        base = chat._base
        receipts = [
            await rt.post(
                A.ConversationStarted(
                    **base(),
                    agent="fake",
                    requested_workdir=str(tmp_path),
                    resolved_workdir=str(tmp_path),
                )
            ),
            await rt.post(
                A.WorkdirSet(
                    **base(), requested_workdir=str(new_dir), resolved_workdir=str(new_dir)
                )
            ),
            await rt.post(
                A.UserMessage(
                    **base(), author_id="u1", author_name="alice", text="hello", interrupt=True
                )
            ),
        ]
        for receipt in receipts:
            await receipt.durable()
        await until(lambda: rt.snapshot("t1").counters.completed == 1)
        await rt.wait_quiet("t1")
        assert rt.snapshot("t1").counters.failed == 0
        assert _problems(rt.chat.texts("t1")) == []
        assert [text for _, text in agents.delivered] == ["hello"]
        live = agents.live()
        assert len(live) == 1
        assert agents.starts[agents.adapters.index(live[0])].workdir == str(new_dir)
