"""A runner process for the JetStream bench (``bench/jetstream.py``): ``serve_runner`` with
the fake agent streaming 20 deltas a second for one second per prompt.

    python -m bench._runner_child URLS NAME ROOT LEASE_TTL
"""

from __future__ import annotations

import sys

import trio

from threadspindle.effects.jetstream.connection import open_jetstream
from threadspindle.effects.jetstream.runner import serve_runner
from threadspindle.runtime.core.agent_events import TextDelta
from threadspindle.testkit.fake_agent import FakeAgentWorld, Step


def script(text: str) -> list[Step]:
    steps: list[Step] = []
    for i in range(20):
        steps += [Step("event", TextDelta(text=f"d{i} ")), Step("sleep", seconds=0.05)]
    return steps


async def main(urls: str, name: str, root: str, ttl: str) -> None:
    servers = urls.split(",")
    agents = FakeAgentWorld(script=script)
    async with open_jetstream(servers, replicas=len(servers), lease_ttl_s=float(ttl)) as conn:
        await serve_runner(
            conn,
            name=name,
            roots=[root],
            adapter_factory=agents.factory,
            ready=lambda rt: print("ready", flush=True),
        )


if __name__ == "__main__":
    trio.run(main, *sys.argv[1:5])
