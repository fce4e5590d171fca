"""A runner process for the distributed failure test: ``serve_runner`` with the fake agent.
Not a test by itself.

    runner_child.py URLS NAME ROOT DELIVERED_FILE LEASE_TTL

Prints ``ready`` once it serves ROOT (a standby prints it only after taking the root over).
Every prompt its agents receive is appended to DELIVERED_FILE as ``NAME<TAB>run<TAB>text``
(one unbuffered write each, so it survives SIGKILL).
"""

from __future__ import annotations

import os
import sys

import trio

from threadspindle.effects.jetstream.connection import open_jetstream
from threadspindle.effects.jetstream.runner import serve_runner
from threadspindle.runtime.core.agent_events import TextDelta
from threadspindle.testkit.fake_agent import FakeAgentWorld, Step


def script(text: str) -> list[Step]:
    steps: list[Step] = []
    for i in range(6):
        steps += [Step("event", TextDelta(text=f"{text} part{i} ")), Step("sleep", seconds=0.03)]
    return steps


async def main(urls: str, name: str, root: str, delivered: str, ttl: str) -> None:
    fd = os.open(delivered, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    agents = FakeAgentWorld(script=script)
    agents.on_prompt = lambda p: os.write(fd, f"{name}\t{p.run_id}\t{p.text}\n".encode())
    servers = urls.split(",")
    async with open_jetstream(servers, replicas=len(servers), lease_ttl_s=float(ttl)) as conn:
        await serve_runner(
            conn,
            name=name,
            roots=[root],
            adapter_factory=agents.factory,
            ready=lambda rt: print("ready", flush=True),
        )


if __name__ == "__main__":
    trio.run(main, *sys.argv[1:6])
