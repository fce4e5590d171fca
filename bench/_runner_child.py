"""A runner process for the JetStream bench (``bench/jetstream.py``): ``serve_runner`` with
the fake agent streaming 20 deltas a second for one second per prompt.

    python -m bench._runner_child URLS NAME ROOT LEASE_TTL [STREAM_S]

The cluster's user and password come in ``SPINDLE_CLUSTER__USER`` and
``SPINDLE_CLUSTER__PASSWORD``, not in the URLs (a command line is anybody's to read).

With STREAM_S, each prompt is answered by a delta every 50 ms for STREAM_S seconds, each
carrying its wall-clock emission time (``@<time.time()>``) so the gateway, another process
on the same machine, can measure agent -> chat latency per delta.
"""

from __future__ import annotations

import os
import sys
import time

import trio

from threadspindle.agents.base import AgentOptions
from threadspindle.effects.jetstream.connection import open_jetstream
from threadspindle.effects.jetstream.runner import serve_runner
from threadspindle.runtime.core.agent_events import SessionStarted, TextDelta, TurnCompleted
from threadspindle.runtime.core.effect_types import StartAgent
from threadspindle.testkit.fake_agent import FakeAgentWorld, ScriptedAgent, Step

DELTA_INTERVAL_S = 0.05


class StampedAgent(ScriptedAgent):
    """Streams ``@<wall time>`` deltas, 20 a second, for ``stream_s`` after each prompt."""

    stream_s = 5.0

    async def _turns(self) -> None:
        async for prompt in self._recv:
            await self._say(prompt.run_id, SessionStarted(session_id=self.session_id or ""))
            end = time.time() + self.stream_s
            next_at = time.monotonic()
            while time.time() < end:
                await self._say(prompt.run_id, TextDelta(text=f"@{time.time():.6f} "))
                next_at += DELTA_INTERVAL_S  # a steady 20/s even when a send was slow
                await trio.sleep(max(0.0, next_at - time.monotonic()))
            await self._say(prompt.run_id, TurnCompleted(session_id=self.session_id))


class StampedWorld(FakeAgentWorld):
    def factory(self, start: StartAgent, thread_id: str) -> ScriptedAgent:
        adapter = StampedAgent(AgentOptions(), world=self)
        self.adapters.append(adapter)
        return adapter


def script(text: str) -> list[Step]:
    steps: list[Step] = []
    for i in range(20):
        steps += [Step("event", TextDelta(text=f"d{i} ")), Step("sleep", seconds=0.05)]
    return steps


async def main(urls: str, name: str, root: str, ttl: str, stream_s: str = "") -> None:
    servers = urls.split(",")
    agents = FakeAgentWorld(script=script)
    if stream_s:
        StampedAgent.stream_s = float(stream_s)
        agents = StampedWorld()
    async with open_jetstream(
        servers,
        replicas=len(servers),
        lease_ttl_s=float(ttl),
        user=os.environ.get("SPINDLE_CLUSTER__USER") or None,
        password=os.environ.get("SPINDLE_CLUSTER__PASSWORD") or None,
    ) as conn:
        await serve_runner(
            conn,
            name=name,
            roots=[root],
            adapter_factory=agents.factory,
            ready=lambda rt: print("ready", flush=True),
        )


if __name__ == "__main__":
    trio.run(main, *sys.argv[1:6])
