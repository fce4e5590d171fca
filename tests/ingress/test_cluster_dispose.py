"""A chat thread archived or deleted on a cluster: the gateway asks the runner serving the
thread's root to stop its actor and agent at once (``spindle.dispose.<root>``), as
``spindle run`` does, instead of leaving a running agent to the runner's idle sweeper."""

from __future__ import annotations

from pathlib import Path

import trio
from cluster_harness import one_process_cluster

from threadspindle.effects.jetstream.transport import open_transport
from threadspindle.testkit.fake_agent import FakeAgentWorld
from threadspindle.testkit.fake_discord.harness import wait_for
from threadspindle.testkit.fake_discord.stack import SCRIPT


async def test_archiving_a_thread_stops_its_agent_on_the_runner(tmp_path: Path) -> None:
    agents = FakeAgentWorld(script=SCRIPT)
    async with one_process_cluster(tmp_path, agents) as c:
        fake, world = c.world.fake, c.world
        thread = await c.start_thread()
        fake.send_message(thread, world.alice, "LONGTOOL please")  # a 30 s tool call
        await wait_for(lambda: agents.live())
        assert str(thread) in c.runner.actors()
        fake.archive_thread(thread)
        await wait_for(lambda: c.runner.disposed == 1 and not agents.live())
        # What the gateway then posts (the run's end) comes back as OutputPosted and makes
        # the thread an actor again, from its log: with no run, and no agent started.
        await trio.sleep(1.0)
        assert agents.live() == [] and c.runner.disposed == 1
        state = c.runner.snapshot(str(thread))
        assert state is not None and state.run is None
        fake.send_message(thread, world.alice, "hello again")
        await c.until_footers(thread, 1)
        assert [text for _, text in agents.delivered][-1] == "hello again"


async def test_a_thread_with_no_runner_is_nothing_to_dispose(tmp_path: Path) -> None:
    agents = FakeAgentWorld()
    async with one_process_cluster(tmp_path, agents) as c:
        transport = await open_transport(c.conn)
        assert await transport.dispose("4242") is False  # never routed
        await transport.route("4242", "/nowhere")  # routed to a root nobody serves
        assert await transport.dispose("4242") is False
