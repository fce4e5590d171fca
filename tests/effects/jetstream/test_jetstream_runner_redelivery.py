"""How a runner answers JetStream's redeliveries of one action (``_Runner.consume``), with
the inbox, the runtime and the log replaced by scripted stand-ins (the real ones are
exercised by test_jetstream_state_machine.py and test_jetstream_runners.py):

- a copy that comes again while its first copy is still being stored is nak'd, not acked:
  acking it would settle the message before anyone knows the append holds;
- once the first copy is durable it is acked, and a later copy is acked and dropped;
- a first copy that is not durable (fenced, or no quorum) is nak'd, never acked;
- on a real nats-server: a root's consumer made with the 30 s ack wait of earlier versions
  gets ``INBOX_ACK_WAIT_S`` when a runner opens it (and a gateway's, its ``--ack-wait``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import trio
from nats.js.api import AckPolicy, ConsumerConfig

from threadspindle.effects.jetstream.connection import open_jetstream
from threadspindle.effects.jetstream.runner import _Runner
from threadspindle.effects.jetstream.transport import (
    IN_STREAM,
    INBOX_ACK_WAIT_S,
    OUT_STREAM,
    open_transport,
    root_token,
)
from threadspindle.runtime.core.actions import Action, UserMessage
from threadspindle.testkit.nats_cluster import nats_cluster


@dataclass
class Msg:
    data: bytes
    headers: dict[str, str] = field(default_factory=dict)


class Inbox:
    def __init__(self) -> None:
        self.send, self.batches = trio.open_memory_channel[list[Msg]](10)
        self.acked: list[Msg] = []
        self.naked: list[Msg] = []
        self.changed = trio.Event()

    async def fetch(self, batch: int = 64, timeout_s: float = 1.0) -> list[Msg]:
        return await self.batches.receive()

    async def ack(self, msg: Msg) -> None:
        self.acked.append(msg)
        self.changed.set()

    async def nak(self, msg: Msg, delay_s: float = 1.0) -> None:
        self.naked.append(msg)
        self.changed.set()


class Receipt:
    def __init__(self) -> None:
        self.note: str | None = None
        self.stored = trio.Event()
        self.outcome = True

    async def durable(self) -> bool:
        await self.stored.wait()
        return self.outcome


class Runtime:
    def __init__(self) -> None:
        self.posted: list[tuple[Action, Receipt]] = []

    async def post(self, action: Action, channel_id: str | None = None) -> Receipt:
        receipt = Receipt()
        self.posted.append((action, receipt))
        return receipt


class Log:
    def holds(self, thread_id: str) -> bool:
        return True


class Transport:
    def note_home(self, thread_id: str, home: str | None) -> None:
        pass


def _copy(action_id: str) -> Msg:
    action = UserMessage(thread_id="t1", action_id=action_id, at=1.0, author_id="u", text="hi")
    return Msg(action.model_dump_json().encode())


async def _until(inbox: Inbox, done) -> None:  # type: ignore[no-untyped-def]
    with trio.fail_after(5):
        while not done():
            await inbox.changed.wait()
            inbox.changed = trio.Event()


async def test_a_copy_while_the_first_is_being_stored_waits_then_later_copies_drop() -> None:
    runner = _Runner(None, Transport(), Log(), ["/r"])  # type: ignore[arg-type]
    rt, inbox = Runtime(), Inbox()
    first, again, later = _copy("p1"), _copy("p1"), _copy("p1")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(runner.consume, rt, inbox)
        await inbox.send.send([first])
        await inbox.send.send([again])
        await _until(inbox, lambda: inbox.naked)
        assert inbox.naked == [again] and inbox.acked == []
        assert len(rt.posted) == 1
        rt.posted[0][1].stored.set()
        await _until(inbox, lambda: inbox.acked)
        assert inbox.acked == [first]
        await inbox.send.send([later])
        await _until(inbox, lambda: len(inbox.acked) == 2)
        assert inbox.acked == [first, later]
        assert len(rt.posted) == 1 and runner.redelivered_dropped == 1
        nursery.cancel_scope.cancel()


async def test_a_first_copy_not_durable_is_naked_never_acked() -> None:
    runner = _Runner(None, Transport(), Log(), ["/r"])  # type: ignore[arg-type]
    rt, inbox = Runtime(), Inbox()
    first = _copy("p1")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(runner.consume, rt, inbox)
        await inbox.send.send([first])
        with trio.fail_after(5):
            while not rt.posted:
                await trio.sleep(0.01)
        rt.posted[0][1].outcome = False
        rt.posted[0][1].stored.set()
        await _until(inbox, lambda: inbox.naked)
        assert inbox.naked == [first] and inbox.acked == []
        assert runner.settling == set()
        nursery.cancel_scope.cancel()


async def test_a_consumer_made_with_another_ack_wait_gets_the_one_asked_for(
    tmp_path: Path,
) -> None:
    with nats_cluster(tmp_path) as cluster:
        async with open_jetstream(cluster.urls) as conn:
            transport = await open_transport(conn)
            durable = f"root-{root_token('/r')}".replace("=", "_")
            for stream, name, subject in (
                (IN_STREAM, durable, f"spindle.in.{root_token('/r')}.*"),
                (OUT_STREAM, "gw-old", "spindle.out.old.*"),
            ):
                old = ConsumerConfig(
                    durable_name=name,
                    filter_subject=subject,
                    ack_policy=AckPolicy.EXPLICIT,
                    ack_wait=30.0,
                )
                await conn.call(conn.js.add_consumer, stream, config=old)
            await transport.inbox("/r")
            await transport.outbox("gw-old", home="old", ack_wait_s=3.0)
            inbox = await conn.call(conn.js.consumer_info, IN_STREAM, durable)
            outbox = await conn.call(conn.js.consumer_info, OUT_STREAM, "gw-old")
            assert inbox.config.ack_wait == INBOX_ACK_WAIT_S
            assert outbox.config.ack_wait == 3.0
