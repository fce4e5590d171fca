"""``/fork`` and ``/btw`` on a cluster: the runner holding the thread has no chat connection,
so it asks the gateway holding the thread's home to open the new thread
(``spindle.open.<home>``), then seeds it through the new thread's root like any action.

One process, real pieces (``cluster_harness``): a nats-server with JetStream,
``serve_runner`` with the fake agent, ``run_chat_gateway`` with discord.py against the fake
Discord."""

from __future__ import annotations

from pathlib import Path

import trio
from cluster_harness import one_process_cluster

from threadspindle.effects.jetstream.connection import open_jetstream
from threadspindle.effects.jetstream.transport import open_transport
from threadspindle.testkit.fake_agent import FakeAgentWorld
from threadspindle.testkit.fake_discord.harness import wait_for
from threadspindle.testkit.nats_cluster import nats_cluster


async def test_btw_and_fork_on_a_runner_open_their_thread_through_the_gateway(
    tmp_path: Path,
) -> None:
    agents = FakeAgentWorld()
    async with one_process_cluster(tmp_path, agents) as c:
        fake, world = c.world.fake, c.world
        bot = fake.bot_user_id
        thread = await c.start_thread()
        fake.send_message(thread, world.alice, "hi")  # a session to fork from
        await c.until_footers(thread, 1)

        # /btw: a new Discord thread beside it, continuing a copy of the session, with the
        # question as its first prompt; this thread says where it went.
        before = set(fake.threads(world.channel)) | {thread}
        fake.run_command(thread, world.alice, "btw", question="what is foo?")
        (side,) = await wait_for(lambda: set(fake.threads(world.channel)) - before, timeout=30)
        await c.until_footers(side, 1)
        assert [text for _, text in agents.delivered].count("what is foo?") == 1
        assert len(agents.forks) == 1
        await wait_for(
            lambda: any(
                f"Forked into <#{side}>" in m.content
                for m in fake.messages(thread)
                if m.author_id == bot
            ),
            timeout=30,
        )
        # The new thread is routed to the same root and homed at this gateway: a message in
        # it is a prompt for its own (forked) conversation.
        transport = await open_transport(c.conn)
        assert await transport.root_of(str(side)) == c.root
        assert await transport.home_of(str(side)) == "discord-0"
        await c.until_conversation(side)
        fake.send_message(side, world.alice, "and bar?")
        await c.until_footers(side, 2)
        assert [text for _, text in agents.delivered].count("and bar?") == 1

        # /fork: a new thread, no prompt; the runner that holds the root took it.
        before = set(fake.threads(world.channel))
        fake.run_command(thread, world.alice, "fork")
        (forked,) = await wait_for(lambda: set(fake.threads(world.channel)) - before, timeout=30)
        await wait_for(
            lambda: c.runner.snapshot(str(forked)),
            lambda s: s is not None and s.conversation is not None,
            30,
        )
        await c.until_conversation(forked)
        fake.send_message(forked, world.alice, "go on")  # its agent starts on a prompt
        await c.until_footers(forked, 1)
        assert len(agents.forks) == 2
        assert [text for _, text in agents.delivered].count("go on") == 1


async def test_a_fork_whose_gateway_is_gone_is_answered_with_why(tmp_path: Path) -> None:
    """No gateway answers for the thread's home: the runner's opener fails at once with a
    sentence the core shows in the thread (it does not wait out the request's 30 s)."""
    with nats_cluster(tmp_path / "nats") as cluster:
        async with open_jetstream(cluster.urls, replicas=1) as conn:
            transport = await open_transport(conn)
            await transport.set_home("123", "discord-7")
            with trio.fail_after(10):
                try:
                    await transport.open_thread("123", "a side question")
                except RuntimeError as exc:
                    assert "no gateway holds discord-7 now" in str(exc)
                else:
                    raise AssertionError("a thread was opened by nobody")
