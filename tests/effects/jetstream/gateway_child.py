"""A gateway process for the gateway-kill test: ``Gateway.serve_effects`` with the fake chat.
Not a test by itself.

    gateway_child.py URLS APPLIED_FILE ACK_WAIT

Prints ``ready`` once it reads effects. Every effect its renderers apply is appended to
APPLIED_FILE as ``post|apply<TAB>thread<TAB>key<TAB>digest of the effect`` (one unbuffered
write each, so it survives SIGKILL): ``post`` for a keyed post the fake chat made.
"""

from __future__ import annotations

import hashlib
import os
import sys

import trio

from threadspindle.effects.jetstream.connection import open_jetstream
from threadspindle.effects.jetstream.gateway import Gateway
from threadspindle.effects.jetstream.transport import EFFECT_ADAPTER, open_transport
from threadspindle.runtime.core.effect_types import KEYED_POSTS, Effect
from threadspindle.runtime.live.ports import Posted, RendererPort
from threadspindle.testkit.fake_chat import RecordingRenderer, RenderWorld


def digest(effect: Effect) -> str:
    return hashlib.blake2b(EFFECT_ADAPTER.dump_json(effect), digest_size=10).hexdigest()


class Logged(RecordingRenderer):
    def __init__(self, thread_id: str, world: RenderWorld, fd: int) -> None:
        super().__init__(thread_id, world)
        self.fd = fd

    async def apply(self, effect: Effect) -> list[Posted]:
        posted = await super().apply(effect)
        kind = "post" if isinstance(effect, KEYED_POSTS) else "apply"
        key = getattr(effect, "key", "")
        os.write(self.fd, f"{kind}\t{self.thread_id}\t{key}\t{digest(effect)}\n".encode())
        return posted


async def main(urls: str, applied: str, ack_wait: str) -> None:
    fd = os.open(applied, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    world = RenderWorld()

    def factory(thread_id: str) -> RendererPort:
        return Logged(thread_id, world, fd)

    servers = urls.split(",")
    async with open_jetstream(servers, replicas=len(servers), lease_ttl_s=1.0) as conn:
        gateway = Gateway(conn, await open_transport(conn), factory)
        async with trio.open_nursery() as nursery:
            await nursery.start(lambda task_status: gateway.serve_effects(
                ack_wait_s=float(ack_wait), task_status=task_status))
            print("ready", flush=True)


if __name__ == "__main__":
    trio.run(main, *sys.argv[1:4])
