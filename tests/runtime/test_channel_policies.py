"""A chat channel's own policy (a project channel's default verbosity) for its threads."""

from __future__ import annotations

from pathlib import Path

from runtime_harness import Chat, running

from threadspindle.runtime.core import actions as A
from threadspindle.runtime.core.model import Policy


async def test_a_thread_of_a_channel_with_its_own_policy_gets_it(
    tmp_path: Path, autojump_clock
) -> None:
    base = Policy(allowed_roots=(str(tmp_path), "/tmp"))
    quiet = base.replace(verbosity="text")
    async with running(tmp_path, policy=base, channel_policies={"proj": quiet}) as rt:
        chat = Chat(rt, "in-proj", str(tmp_path))
        start = A.ConversationStarted(
            **chat._base(),
            agent="fake",
            requested_workdir=str(tmp_path),
            resolved_workdir=str(tmp_path),
        )
        await (await rt.post(start, channel_id="proj")).durable()
        other = Chat(rt, "elsewhere", str(tmp_path))
        await other.start()
        await rt.wait_quiet()
        assert rt.snapshot("in-proj").policy.verbosity == "text"
        assert rt.snapshot("elsewhere").policy.verbosity == "all"
