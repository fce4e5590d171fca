"""A gateway process for the gateway-kill test: ``Gateway.serve_effects`` with the fake chat.
Not a test by itself.

    gateway_child.py URLS APPLIED_FILE ACK_WAIT [DIE_MODE DIE_AT]

Prints ``ready`` once it reads effects. Every effect its renderers apply is appended to
APPLIED_FILE as ``post|apply<TAB>thread<TAB>key<TAB>digest of the effect`` (one unbuffered
write each, so it survives SIGKILL): ``post`` for a keyed post the fake chat made.

DIE_MODE makes the process SIGKILL itself at its DIE_AT-th post, at the two moments a
signal from outside rarely hits: ``posted`` (posted, not yet recorded in ``spindle_posted``)
or ``recorded`` (recorded, ``OutputPosted`` not sent). It writes ``die<TAB>thread<TAB>key<TAB>mode``
first.
"""

from __future__ import annotations

import hashlib
import os
import signal
import sys

import trio

from threadspindle.effects.jetstream.connection import open_jetstream
from threadspindle.effects.jetstream.gateway import Gateway
from threadspindle.effects.jetstream.transport import EFFECT_ADAPTER, open_transport
from threadspindle.runtime.core.effect_types import KEYED_POSTS, Effect
from threadspindle.runtime.live.ports import Posted, RendererPort
from threadspindle.testkit.fake_chat import RecordingRenderer, RenderWorld

POSTED_HERE: set[tuple[str, str]] = set()  # posted by this process


def digest(effect: Effect) -> str:
    return hashlib.blake2b(EFFECT_ADAPTER.dump_json(effect), digest_size=10).hexdigest()


class Logged(RecordingRenderer):
    def __init__(self, thread_id: str, world: RenderWorld, fd: int) -> None:
        super().__init__(thread_id, world)
        self.fd = fd

    async def apply(self, effect: Effect) -> list[Posted]:
        posted = await super().apply(effect)
        kind = "post" if isinstance(effect, KEYED_POSTS) else "apply"
        if kind == "post":
            POSTED_HERE.add((self.thread_id, effect.key))  # type: ignore[union-attr]
        key = getattr(effect, "key", "")
        os.write(self.fd, f"{kind}\t{self.thread_id}\t{key}\t{digest(effect)}\n".encode())
        return posted


class Dying(Gateway):
    def __init__(self, *args: object, fd: int, mode: str, at: int) -> None:
        super().__init__(*args)  # type: ignore[arg-type]
        self.fd, self.mode, self.at, self.posts = fd, mode, at, 0

    def die(self, thread_id: str, key: str) -> None:
        os.write(self.fd, f"die\t{thread_id}\t{key}\t{self.mode}\n".encode())
        os.kill(os.getpid(), signal.SIGKILL)

    async def report(self, thread_id: str, key: str, message_ids: tuple[str, ...]) -> None:
        if (thread_id, key) not in POSTED_HERE:  # a dead gateway's post, reported on seeding
            await super().report(thread_id, key, message_ids)
            return
        self.posts += 1
        if self.posts == self.at and self.mode == "posted":
            self.die(thread_id, key)
        if self.posts == self.at and self.mode == "recorded":
            recent = {**await self.transport.posted_of(thread_id), key: message_ids}
            await self.transport.record_posted(thread_id, recent)
            self.die(thread_id, key)
        await super().report(thread_id, key, message_ids)


async def main(urls: str, applied: str, ack_wait: str, mode: str = "", at: str = "0") -> None:
    fd = os.open(applied, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    world = RenderWorld()

    def factory(thread_id: str) -> RendererPort:
        return Logged(thread_id, world, fd)

    servers = urls.split(",")
    async with open_jetstream(servers, replicas=len(servers), lease_ttl_s=1.0) as conn:
        gateway = Dying(conn, await open_transport(conn), factory, fd=fd, mode=mode, at=int(at))
        async with trio.open_nursery() as nursery:
            await nursery.start(
                lambda task_status: gateway.serve_effects(
                    ack_wait_s=float(ack_wait), task_status=task_status
                )
            )
            print("ready", flush=True)


if __name__ == "__main__":
    trio.run(main, *sys.argv[1:6])
