"""``open_jetstream`` against a real 3-node cluster with nodes missing.

With two nodes of three running, JetStream has its quorum but refuses a stream of three
replicas: "no suitable peers for placement" (err_code 10005), at once and every time, as
when a node of a cluster just started is not current yet. ``open_jetstream`` asks again
until the third node is there; if it never comes, it stops with a sentence saying so
(``ClusterNotReady``). With one node of three, JetStream has no quorum and nothing answers
its API ("no responders"): the same, with that sentence. (The fakes in
``test_jetstream_placement.py`` cover a stream made with another configuration.)"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio
import trio_asyncio
from nats.js.errors import BadRequestError, ServiceUnavailableError

from threadspindle.effects.jetstream import connection
from threadspindle.effects.jetstream.connection import STREAM, ClusterNotReady, open_jetstream
from threadspindle.effects.jetstream.servers import NatsCluster

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def two_of_three(tmp_path: Path) -> Iterator[NatsCluster]:
    """A 3-node cluster with its first two nodes running (healthy) and the third not."""
    cluster = NatsCluster(tmp_path, size=3)
    try:
        for node in cluster.nodes[:2]:
            node.start()
        for node in cluster.nodes[:2]:
            node.wait_healthy(30)
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def refusals(monkeypatch: pytest.MonkeyPatch) -> list[Exception]:
    """Every answer ``open_jetstream`` took for "not ready yet", as it took it."""
    seen: list[Exception] = []
    judge = connection._not_ready

    def recorded(exc: Exception) -> bool:
        seen.append(exc)
        return judge(exc)

    monkeypatch.setattr(connection, "_not_ready", recorded)
    return seen


async def test_the_stream_is_placed_once_the_missing_node_joins(
    two_of_three: NatsCluster, refusals: list[Exception], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A loaded machine may take seconds to start the third node: ask for longer than the
    # 5 s a cluster that is merely starting gets. What is tested is the same either way.
    monkeypatch.setattr(connection, "_PLACEMENT_TRIES", 400)
    first, second, third = two_of_three.nodes

    async def join_after_two_refusals() -> None:
        while len(refusals) < 2:
            await trio.sleep(0.05)
        await trio.to_thread.run_sync(third.start)

    with trio.fail_after(100):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(join_after_two_refusals)
            urls = [first.signed_url, second.signed_url]
            async with open_jetstream(urls, replicas=3, lease_ttl_s=5) as conn:
                info = await trio_asyncio.aio_as_trio(conn.js.stream_info)(STREAM)
                leases = await trio_asyncio.aio_as_trio(conn.leases.status)()
    assert len(refusals) >= 2
    assert all(isinstance(e, BadRequestError) and e.err_code == 10005 for e in refusals[:2])
    assert info.config.num_replicas == 3
    assert info.cluster is not None and len(info.cluster.replicas or []) == 2
    assert leases.bucket == connection.LEASES_BUCKET and conn.replicas == 3


async def test_a_node_that_never_joins_ends_in_a_sentence_for_the_operator(
    two_of_three: NatsCluster, refusals: list[Exception], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(connection, "_PLACEMENT_WAIT_S", 0.05)
    first, second, _ = two_of_three.nodes
    urls = [first.signed_url, second.signed_url]
    # Not an exception group from the nurseries it crossed: the error itself, which the
    # commands print as "Cannot start the runner: ..." (app/scale_out.py).
    with trio.fail_after(60), pytest.raises(ClusterNotReady) as raised:
        async with open_jetstream(urls, replicas=3, lease_ttl_s=5):
            pass
    said = str(raised.value)
    assert "no suitable peers for placement" in said
    assert "on 3 replicas" in said and "are 3 nodes of the cluster up? (2 servers given)" in said
    # Asked again at every refusal, then gave up (the last one is judged twice: by the
    # retry loop, then for the sentence).
    assert len(refusals) == connection._PLACEMENT_TRIES + 1
    assert all(isinstance(e, BadRequestError) and e.err_code == 10005 for e in refusals)


def test_without_a_quorum_nothing_answers_and_that_is_said(
    tmp_path: Path, refusals: list[Exception], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(connection, "_PLACEMENT_WAIT_S", 0.05)
    cluster = NatsCluster(tmp_path, size=3)
    first = cluster.nodes[0]
    try:
        first.start()  # never healthy alone: JetStream waits for a second node
        deadline = time.monotonic() + 30
        while True:  # listening is all a client needs to connect
            try:
                socket.create_connection(("127.0.0.1", first.client_port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "nats-server never listened"
                time.sleep(0.05)

        async def open_it() -> None:
            with trio.fail_after(60):
                async with open_jetstream([first.signed_url], replicas=3, lease_ttl_s=5):
                    pass

        with pytest.raises(ClusterNotReady) as raised:
            trio.run(open_it)
    finally:
        cluster.stop()
    said = str(raised.value)
    assert "JetStream did not answer" in said and "(no responders)" in said
    assert "are most of the cluster's nodes up" in said
    assert refusals and all(isinstance(e, ServiceUnavailableError) for e in refusals)
