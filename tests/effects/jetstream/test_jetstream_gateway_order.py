"""A gateway's effects in hand and a gateway taking over from one that died, on a real
nats-server (``Inbox.keep_in_hand``, ``Inbox.wait_for_unacked``):

- while a gateway is still applying effects it fetched (a renderer held up by the chat
  platform's limits), it keeps them in hand: JetStream does not give them to another fetch
  however long that takes;
- a gateway that died with effects in hand leaves them unacked; the next gateway on its
  consumer applies those first, then what the runner published meanwhile: it waits until
  they are due again before it fetches anything (a pull consumer delivers what is due
  again before what is new). Before, the new effects came first and the dead gateway's an
  ack wait later, so a tool card ended showing an older text.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import trio

from threadspindle.effects.jetstream.connection import JetStream, open_jetstream
from threadspindle.effects.jetstream.gateway import Gateway
from threadspindle.effects.jetstream.transport import OUT_STREAM, Transport, open_transport
from threadspindle.runtime.core.effect_types import EditOutput, Effect, PostOutput
from threadspindle.runtime.live.ports import Posted
from threadspindle.testkit.fake_chat import RecordingRenderer, RenderWorld
from threadspindle.testkit.nats_cluster import NatsCluster, nats_cluster

ACK_WAIT = 1.5
KEY = "t/r1/0"


class Stuck(RecordingRenderer):
    """Applies effects until the edit to ``e2``, which never finishes (``world.stuck`` is
    set when it is reached)."""

    async def apply(self, effect: Effect) -> list[Posted]:
        if isinstance(effect, EditOutput) and effect.text == "e2":
            self.world.stuck.set()  # type: ignore[attr-defined]
            await trio.sleep_forever()
        return await super().apply(effect)


def edits(world: RenderWorld) -> list[str]:
    return [e.text for _, _, e in world.effects if isinstance(e, EditOutput)]


async def publish(transport: Transport, *texts: str) -> None:
    for text in texts:
        if text == "e0":
            effect: Effect = PostOutput(key=KEY, kind="tool", text=text, run_id="r1")
        else:
            effect = EditOutput(key=KEY, text=text)
        await transport.send_effect("t", effect)


@asynccontextmanager
async def stuck_gateway(conn: JetStream, transport: Transport) -> AsyncIterator[RenderWorld]:
    """A gateway applying e0 and e1 and then held up at e2 (e3 behind it); it dies (its
    serving cancelled, nothing acked after e1) on the way out."""
    world = RenderWorld()
    world.stuck = trio.Event()  # type: ignore[attr-defined]
    gateway = Gateway(conn, transport, lambda t: Stuck(t, world))
    async with trio.open_nursery() as nursery:
        await nursery.start(
            lambda task_status: gateway.serve_effects(ack_wait_s=ACK_WAIT, task_status=task_status)
        )
        with trio.fail_after(20):
            await world.stuck.wait()  # type: ignore[attr-defined]
        yield world
        nursery.cancel_scope.cancel()
    assert edits(world) == ["e1"]


@asynccontextmanager
async def one_thread(
    tmp_path: Path, *texts: str
) -> AsyncIterator[tuple[NatsCluster, JetStream, Transport]]:
    """A nats-server, a connection to it, and the effects ``texts`` of thread t published."""
    with nats_cluster(tmp_path / "nats") as cluster:
        async with open_jetstream(cluster.urls, replicas=1) as conn:
            transport = await open_transport(conn)
            await transport.route("t", str(tmp_path))
            await publish(transport, *texts)
            yield cluster, conn, transport


async def test_effects_applied_slowly_stay_in_the_gateways_hand(tmp_path: Path) -> None:
    async with one_thread(tmp_path, "e0", "e1", "e2", "e3") as (_, conn, transport):
        async with stuck_gateway(conn, transport):
            await trio.sleep(3 * ACK_WAIT)  # held up for three ack waits
            # Another reader of the consumer is given nothing: e2 and e3 are still the
            # stuck gateway's (without in_progress they were due again after 1.5 s).
            probe = await transport.outbox("gateway", ack_wait_s=ACK_WAIT)
            assert await probe.fetch(batch=10, timeout_s=1.0) == []


async def test_a_new_gateway_applies_the_dead_ones_effects_first(tmp_path: Path) -> None:
    async with one_thread(tmp_path, "e0", "e1", "e2", "e3") as (cluster, conn, transport):
        async with stuck_gateway(conn, transport) as dead_world:
            pass  # dies at once, with e2 and e3 in hand
        await publish(transport, "e4", "e5")  # while no gateway runs

        async with open_jetstream(cluster.urls, replicas=1) as fresh:  # the next process
            world = RenderWorld()
            world.outputs[KEY] = dead_world.outputs[KEY]  # the chat's message
            gateway = Gateway(
                fresh, await open_transport(fresh), lambda t: RecordingRenderer(t, world)
            )
            async with trio.open_nursery() as nursery:
                await nursery.start(
                    lambda task_status: gateway.serve_effects(
                        ack_wait_s=ACK_WAIT, task_status=task_status
                    )
                )
                with trio.fail_after(30):
                    while len(edits(world)) < 4:
                        await trio.sleep(0.1)
                nursery.cancel_scope.cancel()
    assert edits(world) == ["e2", "e3", "e4", "e5"]
    assert world.outputs[KEY].text == "e5"


async def test_a_gateway_stopped_cleanly_leaves_nothing_to_wait_for(tmp_path: Path) -> None:
    """``Gateway.drain`` (a gateway told to stop): no more fetches, the effects in hand
    applied and acked, so the next gateway starts at once."""
    async with one_thread(tmp_path, "e0", *(f"e{i}" for i in range(1, 9))) as (_, conn, transport):
        world = RenderWorld()
        world.latency_s = 0.2  # each effect takes a while: most are in hand at the stop
        gateway = Gateway(conn, transport, lambda t: RecordingRenderer(t, world))
        async with trio.open_nursery() as nursery:
            await nursery.start(
                lambda task_status: gateway.serve_effects(
                    ack_wait_s=ACK_WAIT, task_status=task_status
                )
            )
            with trio.fail_after(20):
                while not edits(world):
                    await trio.sleep(0.01)
            assert await gateway.drain(timeout_s=20) == 0
            nursery.cancel_scope.cancel()
        assert edits(world) == [f"e{i}" for i in range(1, 9)]
        # An ack is a publish the server takes in its own time (nats-py's ``ack`` does not
        # wait for it): on a loaded machine the consumer still counted 2 just after the
        # drain (a full test run). Every ack has been sent; give the server a moment.
        with trio.move_on_after(2):
            while (await conn.call(conn.js.consumer_info, OUT_STREAM, "gateway")).num_ack_pending:
                await trio.sleep(0.05)
        info = await conn.call(conn.js.consumer_info, OUT_STREAM, "gateway")
        assert info.num_ack_pending == 0
        await publish(transport, "e9")
        nxt = await transport.outbox("gateway", ack_wait_s=ACK_WAIT)
        with trio.fail_after(ACK_WAIT):  # no wait: nothing was left in hand
            assert await nxt.wait_for_unacked() == 0
        (msg,) = await nxt.fetch(batch=10, timeout_s=2.0)
        assert b'"e9"' in msg.data
