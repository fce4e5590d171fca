"""``Runtime.adopt``: a thread that enters the log after start-up (a runner that claimed it
from another one, ``effects.jetstream.runner``) is folded into the store like start-up does,
and a run it had in flight is reported as interrupted, its queue kept."""

from __future__ import annotations

from pathlib import Path

import trio
from runtime_harness import running

from threadspindle.runtime.core import actions as A
from threadspindle.runtime.core.model import Policy, ThreadState
from threadspindle.runtime.core.transitions import transition


async def test_adopt_folds_a_thread_written_after_start_up(tmp_path: Path) -> None:
    async with running(tmp_path) as rt:
        workdir = str(tmp_path)
        earlier = [
            A.PolicySet(
                thread_id="x", action_id="p", at=0.5, policy=Policy(allowed_roots=(workdir,))
            ),
            A.ConversationStarted(
                thread_id="x",
                action_id="c",
                at=1.0,
                agent="fake",
                requested_workdir=workdir,
                resolved_workdir=workdir,
            ),
            A.UserMessage(thread_id="x", action_id="m1", at=2.0, author_id="u", text="one"),
            A.QueueCommand(thread_id="x", action_id="m2", at=3.0, author_id="u", text="two"),
        ]
        assert rt.snapshot("x") is None
        for action in earlier:  # written by "another process": straight into the log
            rt.log.append(action)
        rt.log.flush()
        folded = ThreadState.new("x")
        for action in earlier:
            folded = transition(folded, action).state
        assert folded.run is not None  # the earlier process was mid-run

        assert rt.adopt("x")
        assert "x" in rt.recovered
        with trio.fail_after(10):
            await rt.wait_quiet("x")
        after = rt.snapshot("x")
        assert after is not None
        assert after.conversation is not None and folded.conversation is not None
        assert after.conversation.workdir == folded.conversation.workdir
        # The interrupted run was reported, not run again; the queued prompt went on.
        kinds = [e.action.kind for e in rt.log.read("x")]
        assert "runtime_recovered" in kinds
        with trio.fail_after(10):
            while not any(text == "two" for _, text in rt.agents.delivered):  # type: ignore[attr-defined]
                await trio.sleep(0.02)
        assert all(text != "one" for _, text in rt.agents.delivered)  # type: ignore[attr-defined]
        assert not rt.adopt("x")  # it has an actor now: nothing to do
