"""The transport's two streams on a real nats-server: work queues, so an action or an
effect is deleted once its consumer acked it (they used to keep every message for as long
as the cluster lived: every delta of every thread, on every node's disk). A stream made by
an earlier Spindle (limits retention) still works, with a warning saying how to make it a
work queue; a consumer whose filter overlaps another's (a work queue gives a message to
one consumer only) stops the start with a sentence naming the other."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest
import trio

from threadspindle.effects.jetstream.connection import StoreUnusable, open_jetstream
from threadspindle.effects.jetstream.transport import IN_STREAM, OUT_STREAM, open_transport
from threadspindle.runtime.core.actions import StatusRequested
from threadspindle.testkit.nats_cluster import make_stream, nats_cluster

pytestmark = pytest.mark.timeout(120)


def _action(n: int) -> StatusRequested:
    return StatusRequested(thread_id="t1", action_id=f"a{n}", at=time.time())


async def _messages(conn, stream: str) -> int:  # type: ignore[no-untyped-def]
    return int((await conn.call(conn.js.stream_info, stream)).state.messages)


async def test_an_action_is_deleted_from_the_inbox_once_acked(tmp_path: Path) -> None:
    with nats_cluster(tmp_path) as cluster:
        async with open_jetstream(cluster.urls, lease_ttl_s=2) as conn:
            transport = await open_transport(conn)
            for stream in (IN_STREAM, OUT_STREAM):
                info = await conn.call(conn.js.stream_info, stream)
                assert info.config.retention == "workqueue"
            for n in range(5):
                await transport.send_action("/srv/a", _action(n))
            assert await _messages(conn, IN_STREAM) == 5
            inbox = await transport.inbox("/srv/a")
            taken = await inbox.fetch(batch=10)
            assert len(taken) == 5
            for msg in taken[:3]:
                await inbox.ack(msg)
            with trio.fail_after(10):
                while await _messages(conn, IN_STREAM) != 2:
                    await trio.sleep(0.05)  # (an ack is not waited for)
            # Not acked: kept, and delivered again.
            for msg in taken[3:]:
                await inbox.nak(msg, delay_s=0.0)
            with trio.fail_after(10):
                again: list = []
                while len(again) < 2:
                    again += await inbox.fetch(batch=10, timeout_s=0.5)
            assert sorted(m.metadata.sequence.stream for m in again) == [4, 5]


async def test_a_stream_made_by_an_earlier_spindle_is_used_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with nats_cluster(tmp_path) as cluster:
        await make_stream(
            cluster.urls[0], IN_STREAM, subjects=["spindle.in.*.*"], duplicate_window=120.0
        )
        async with open_jetstream(cluster.urls, lease_ttl_s=2) as conn:
            with caplog.at_level(logging.WARNING, logger="spindle.transport"):
                transport = await open_transport(conn)
            await transport.send_action("/srv/a", _action(1))
            inbox = await transport.inbox("/srv/a")
            (msg,) = await inbox.fetch()
            await inbox.ack(msg)
            await trio.sleep(0.3)
            assert await _messages(conn, IN_STREAM) == 1  # kept: limits retention
    warned = [r.getMessage() for r in caplog.records if IN_STREAM in r.getMessage()]
    assert len(warned) == 1
    assert "keeps every message, acked or not" in warned[0]
    assert f"nats stream rm {IN_STREAM}" in warned[0]


async def test_a_consumer_overlapping_another_stops_the_start_with_a_sentence(
    tmp_path: Path,
) -> None:
    with nats_cluster(tmp_path) as cluster:
        async with open_jetstream(cluster.urls, lease_ttl_s=2) as conn:
            transport = await open_transport(conn)
            await transport.outbox("gateway")  # every home's, as the tests' gateway reads
            with pytest.raises(StoreUnusable) as refused:
                await transport.outbox("gw-console", home="console")
            await transport.outbox("gateway")  # the same consumer again: fine
    assert str(refused.value) == (
        "the consumer gw-console of the SPINDLE_OUT stream (spindle.out.console.*) would "
        "take messages that gateway (spindle.out.>) takes too, and a work queue gives each "
        "message to one consumer: remove the one no gateway or runner uses any more (nats "
        "consumer rm SPINDLE_OUT gateway)"
    )
