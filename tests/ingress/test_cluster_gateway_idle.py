"""A gateway lets go of a thread's renderer (and what it kept of the thread's posts) once
the thread has been idle for ``IDLE_RENDERER_S``: its memory follows the threads it serves
now. The thread's next effect makes the renderer again from the log, and nothing is posted
twice or edited for nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
from cluster_harness import one_process_cluster

from threadspindle.effects.jetstream import gateway as gateway_module
from threadspindle.testkit.fake_agent import FakeAgentWorld
from threadspindle.testkit.fake_discord.harness import wait_for


async def test_an_idle_threads_renderer_is_let_go_and_made_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(gateway_module, "IDLE_RENDERER_S", 0.5)
    agents = FakeAgentWorld()
    async with one_process_cluster(tmp_path, agents) as c:
        fake, world = c.world.fake, c.world
        gateway = c.gateway.gateway
        thread = await c.start_thread()
        fake.send_message(thread, world.alice, "hi")
        await c.until_footers(thread, 1)
        await wait_for(lambda: str(thread) not in gateway.renderers, timeout=10)
        assert gateway.evicted >= 1 and str(thread) not in gateway.posted_keys
        calls = len(fake.rest_calls())
        fake.send_message(thread, world.alice, "again")
        await c.until_footers(thread, 2)
        bot = fake.bot_user_id
        texts = [m.content for m in fake.messages(thread) if m.author_id == bot]
        assert texts.count("Hello from fake agent.") == 2, texts
        # Made again for the new run only: no edit of the earlier answer.
        earlier = {m.id for m in fake.messages(thread)[:-3]}
        edits = [
            call
            for call in fake.rest_calls()[calls:]
            if call.method == "PATCH" and any(call.path.endswith(f"/{m}") for m in earlier)
        ]
        assert edits == []
