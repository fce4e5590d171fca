"""``open_jetstream`` and ``open_transport`` against a real nats-server where a stream or
bucket of Spindle's already exists with settings of its own (made by hand, say).

Settings the log can live with are used as they are, and the log works on them. Settings
that would strand or lose its writes stop the start with a sentence naming each one
(``StoreUnusable``), at once. Before, such a stream was used as it was: with subjects that
do not take the threads' ones, each claim waited 30 s on "no responders" and failed; with
memory storage, limits or another retention, history went without a word. The same for a
leases bucket made without a TTL: no lease would ever expire, so the threads of a runner
that died would never be taken over; and for the transport's streams and buckets (a
prompt for a runner lost, a thread's route forgotten, root leases judged by another TTL
than their bucket's)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio
from nats.js.api import RetentionPolicy, StorageType

from threadspindle.effects.jetstream.connection import (
    LEASES_BUCKET,
    STREAM,
    StoreUnusable,
    open_jetstream,
)
from threadspindle.effects.jetstream.log import open_jetstream_log
from threadspindle.effects.jetstream.transport import IN_STREAM, open_transport
from threadspindle.runtime.core.actions import StatusRequested
from threadspindle.testkit.nats_cluster import make_bucket, make_stream, nats_cluster

pytestmark = pytest.mark.timeout(120)

THREADS = "spindle.thread.*.log"


async def _make_stream(url: str, **settings: Any) -> None:
    """The stream as an operator would make it by hand."""
    await make_stream(url, STREAM, **settings)


@pytest.mark.parametrize(
    ("settings", "said"),
    [
        ({"subjects": ["other.>"]}, f"its subjects (other.>) do not take {THREADS}"),
        ({"subjects": [THREADS], "storage": StorageType.MEMORY}, "in memory"),
        ({"subjects": [THREADS], "max_msgs_per_subject": 2}, "at most 2 messages a subject"),
        ({"subjects": [THREADS], "retention": RetentionPolicy.INTEREST}, "'interest'"),
        ({"subjects": [THREADS], "max_msg_size": 512}, "over 512 bytes"),
    ],
    ids=["subjects", "memory", "per-thread-limit", "interest", "message-size"],
)
async def test_a_stream_that_would_strand_or_lose_writes_stops_the_start_with_a_sentence(
    tmp_path: Path, settings: dict[str, Any], said: str
) -> None:
    with nats_cluster(tmp_path) as cluster:
        await _make_stream(cluster.urls[0], **settings)
        with trio.fail_after(20), pytest.raises(StoreUnusable) as refused:
            async with open_jetstream(cluster.urls):
                pytest.fail("the stream was used")
    text = str(refused.value)
    assert text.startswith(f"the {STREAM} stream exists with settings Spindle cannot use: ")
    assert said in text
    assert f"nats stream edit {STREAM}" in text


async def test_a_stream_with_settings_of_its_own_that_the_log_can_use_is_used(
    tmp_path: Path,
) -> None:
    with nats_cluster(tmp_path) as cluster:
        # Wider subjects, no direct gets, deletes refused: none of it is the log's concern.
        await _make_stream(cluster.urls[0], subjects=["spindle.>"], deny_delete=True)
        with trio.fail_after(30):
            async with open_jetstream(cluster.urls, lease_ttl_s=2) as conn:
                async with open_jetstream_log(conn, "r1") as log, trio.open_nursery() as nursery:
                    await log.claim("t")
                    await nursery.start(log.run_flusher)
                    tickets = [
                        log.append(StatusRequested(thread_id="t", action_id=f"s{n}", at=float(n)))
                        for n in range(1, 21)
                    ]
                    await log.wait_durable(tickets[-1])
                    nursery.cancel_scope.cancel()
                async with open_jetstream_log(conn, "r2") as again:
                    await again.claim("t")
                    assert [e.seq for e in again.read("t")] == list(range(1, 21))


async def test_a_leases_bucket_without_a_ttl_stops_the_start_with_a_sentence(
    tmp_path: Path,
) -> None:
    with nats_cluster(tmp_path) as cluster:
        await make_bucket(cluster.urls[0], LEASES_BUCKET, history=1)
        with trio.fail_after(20), pytest.raises(StoreUnusable) as refused:
            async with open_jetstream(cluster.urls, lease_ttl_s=2):
                pytest.fail("the bucket was used")
    assert str(refused.value) == (
        f"the {LEASES_BUCKET} bucket exists without a TTL: the threads of a runner that stops "
        f"without releasing them would never be taken over. Remove it (nats kv rm "
        f"{LEASES_BUCKET}): Spindle makes it again with the lease TTL (2 s)"
    )


@pytest.mark.parametrize(
    ("made", "said"),
    [
        (
            ("stream", IN_STREAM, {"subjects": ["spindle.in.>"], "max_age": 60.0}),
            f"the {IN_STREAM} stream exists with settings Spindle cannot use: it keeps "
            "messages for 60 s: older messages would be lost. Edit it (nats stream edit "
            f"{IN_STREAM})",
        ),
        (
            ("bucket", "spindle_routes", {"ttl": 3600.0}),
            "the spindle_routes bucket exists with settings Spindle cannot use: its keys "
            "expire after 3600 s. Edit it (nats stream edit KV_spindle_routes)",
        ),
        (
            ("bucket", "spindle_root_leases", {"ttl": 30.0}),
            "the spindle_root_leases bucket exists with settings Spindle cannot use: its TTL "
            "is 30 s where the leases' is 2 s.",
        ),
    ],
    ids=["inbox-max-age", "routes-ttl", "root-leases-ttl"],
)
async def test_the_transport_refuses_a_stream_or_bucket_that_would_lose_or_misjudge(
    tmp_path: Path, made: tuple[str, str, dict[str, Any]], said: str
) -> None:
    kind, name, settings = made
    with nats_cluster(tmp_path) as cluster:
        if kind == "stream":
            await make_stream(cluster.urls[0], name, **settings)
        else:
            await make_bucket(cluster.urls[0], name, **settings)
        with trio.fail_after(30):
            async with open_jetstream(cluster.urls, lease_ttl_s=2) as conn:
                with pytest.raises(StoreUnusable) as refused:
                    await open_transport(conn)
    assert said in str(refused.value)


async def test_the_transport_uses_streams_and_buckets_it_can_live_with(tmp_path: Path) -> None:
    with nats_cluster(tmp_path) as cluster:
        await make_stream(cluster.urls[0], IN_STREAM, subjects=["spindle.in.>"])
        await make_bucket(cluster.urls[0], "spindle_routes", history=5)
        await make_bucket(cluster.urls[0], "spindle_posted", ttl=60.0)  # a cache
        with trio.fail_after(30):
            async with open_jetstream(cluster.urls, lease_ttl_s=2) as conn:
                transport = await open_transport(conn)
                await transport.route("t1", "/srv/a")
                await transport.record_posted("t1", {"k": ("m1",)})
                assert await transport.root_of("t1") == "/srv/a"
                assert await transport.posted_of("t1") == {"k": ("m1",)}
