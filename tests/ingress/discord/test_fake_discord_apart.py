"""The fake Discord served from a process of its own (``testkit.fake_discord.apart``, for
the benches): its HTTP server belongs to the child, the test API reaches it there, the
real bot works against it, and the child is gone afterwards."""

from __future__ import annotations

import os
from pathlib import Path

import psutil

from threadspindle.testkit.fake_discord import DiscordRateLimits
from threadspindle.testkit.fake_discord.apart import FakeDiscordApart
from threadspindle.testkit.fake_discord.harness import fake_world
from threadspindle.testkit.fake_discord.stack import discord_stack, is_footer


def _listening_pid(port: int) -> int | None:
    for proc in psutil.process_iter():
        try:
            for conn in proc.net_connections(kind="tcp"):
                if conn.status == psutil.CONN_LISTEN and conn.laddr.port == port:
                    return proc.pid
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return None


def test_the_server_runs_in_a_child_and_the_test_api_reaches_it(tmp_path: Path) -> None:
    with fake_world(tmp_path, apart=True) as world:
        fake = world.fake
        assert isinstance(fake, FakeDiscordApart)
        port = int(fake.rest_base.split(":")[2].split("/")[0])
        server = _listening_pid(port)
        assert server is not None and server != os.getpid()
        assert psutil.Process(server).ppid() == os.getpid()
        # Acting as a user and reading back: the world lives in the child.
        sent = fake.send_message(world.channel, world.alice, "hello from a user")
        [message] = fake.messages(world.channel)
        assert (message.id, message.content, message.author_id) == (
            sent,
            "hello from a user",
            world.alice,
        )
        # Values come back as copies: the limits enforced there count there.
        fake.enforce_rate_limits(DiscordRateLimits(global_limit=5))
        assert fake.rate_limit_statistics() == {"requests": 0, "429_global": 0, "429_route": 0}
    assert not psutil.pid_exists(server) or psutil.Process(server).status() == psutil.STATUS_ZOMBIE


async def test_the_bot_answers_in_a_thread_against_the_fake_apart(tmp_path: Path) -> None:
    with fake_world(tmp_path, apart=True) as world:
        async with discord_stack(world, tmp_path) as stack:
            thread = await stack.start_thread()
            world.fake.send_message(thread, world.alice, "hi")
            messages = await stack.until_footers(thread, 1)
            assert [m.content for m in messages[:2]] == ["hi", "Hello from fake agent."]
            assert is_footer(messages[2])
