"""An actor whose mailbox is closed in the middle of a batch ends quietly.

``ThreadActor.close`` closes the mailbox after its drain; an agent's late event can land
just before, so the actor may be committing a batch when the mailbox ends. Reading on with
``receive_nowait`` then gets ``EndOfChannel``, which once escaped as an error of every such
actor (the 10,000-thread benchmark ended with an ExceptionGroup of thousands of them)."""

from __future__ import annotations

import pytest
import trio
from runtime_harness import Chat, running, until

from threadspindle.runtime.core import actions as A


@pytest.fixture
def autojump(autojump_clock: trio.testing.MockClock) -> trio.testing.MockClock:
    return autojump_clock


async def test_the_mailbox_closed_mid_batch_ends_the_actor_without_error(
    tmp_path, autojump
) -> None:
    async with running(tmp_path) as rt:
        chat = Chat(rt, "t1", str(tmp_path))
        await chat.start()
        actor = rt.get("t1")
        # Let the agent's start (and its AgentConnected) settle first: nothing else posts.
        await until(lambda: rt.agents.serving == 1 and actor.is_quiet())
        before = actor.committed
        # Two actions waiting, then the mailbox shut (as close() does): the actor takes the
        # first with its async for, the second in the batch, then meets the end.
        for _ in range(2):
            actor.post_nowait(A.StatusRequested(**chat._base()))
        actor._send.close()
        with trio.fail_after(5):
            await actor.done.wait()
        assert actor.committed == before + 2  # both were committed before it ended
        assert rt.get("t1") is None  # the registry let it go
        rt.log.flush()
        assert [e.action.kind for e in rt.log.read("t1")][-2:] == ["status", "status"]
