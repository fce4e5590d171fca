"""One process holding a small cluster for ingress tests: a nats-server with JetStream,
``serve_runner`` with the fake agent, and ``run_chat_gateway`` with discord.py against the
fake Discord. Not a test by itself."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import trio

from threadspindle.effects.jetstream.connection import JetStream, open_jetstream
from threadspindle.effects.jetstream.runner import serve_runner
from threadspindle.ingress.cluster_gateway import ChatGateway, run_chat_gateway
from threadspindle.runtime.live.registry import Runtime
from threadspindle.testkit.fake_agent import FakeAgentWorld
from threadspindle.testkit.fake_discord.harness import World, fake_world, wait_for
from threadspindle.testkit.fake_discord.stack import is_footer
from threadspindle.testkit.nats_cluster import nats_cluster


@dataclass
class OneProcessCluster:
    world: World
    conn: JetStream
    runner: Runtime  # the runner's runtime
    gateway: ChatGateway
    root: str

    async def start_thread(self) -> int:
        """``/claude start`` in the channel; the thread, once the gateway sees its
        conversation."""
        fake, world = self.world.fake, self.world
        before = set(fake.threads(world.channel))
        fake.run_command(world.channel, world.alice, "claude start", workdir=self.root)
        (thread,) = await wait_for(lambda: set(fake.threads(world.channel)) - before, timeout=30)
        await self.until_conversation(thread)
        return thread

    async def until_conversation(self, thread: int) -> None:
        await wait_for(
            lambda: self.gateway.runtime.snapshot(str(thread)),
            lambda s: s is not None and s.conversation is not None,
            30,
        )

    async def until_footers(self, thread: int, count: int) -> None:
        fake = self.world.fake
        await wait_for(lambda: sum(map(is_footer, fake.messages(thread))) >= count, timeout=30)


@asynccontextmanager
async def one_process_cluster(
    tmp_path: Path, agents: FakeAgentWorld
) -> AsyncIterator[OneProcessCluster]:
    work = tmp_path / "work"
    work.mkdir()
    root = os.path.realpath(work)
    with fake_world(root) as world, nats_cluster(tmp_path / "nats") as cluster:
        async with open_jetstream(cluster.urls, replicas=1) as conn, trio.open_nursery() as nursery:
            runtimes: list[Runtime] = []
            nursery.start_soon(
                partial(
                    serve_runner,
                    conn,
                    name="runner-a",
                    roots=[root],
                    adapter_factory=agents.factory,
                    ready=runtimes.append,
                )
            )
            await wait_for(lambda: runtimes, timeout=30)
            gateway: ChatGateway = await nursery.start(
                partial(run_chat_gateway, conn, roots=[root], discord=world.settings())
            )
            try:
                yield OneProcessCluster(world, conn, runtimes[0], gateway, root)
            finally:
                gateway.stop()
                nursery.cancel_scope.cancel()
