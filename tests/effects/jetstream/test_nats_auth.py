"""The NATS servers Spindle starts let in only its own nodes (``servers.NatsCluster``): an
agent shares the machine's network, and the servers hold every thread's log and inbox.
``open_jetstream`` signs in with a user and password, and a refusal is an error that says
what to set, not a reconnect loop that waits for ever."""

from __future__ import annotations

from pathlib import Path

import trio

from threadspindle.effects.jetstream.connection import SignInRefused, open_jetstream
from threadspindle.effects.jetstream.transport import open_transport
from threadspindle.testkit.nats_cluster import nats_cluster


async def _refusal(urls: list[str], **credentials: str | None) -> str | None:
    try:
        with trio.fail_after(20):
            async with open_jetstream(urls, replicas=len(urls), **credentials):
                return None
    except SignInRefused as exc:
        return str(exc)


async def test_a_cluster_refuses_clients_without_its_password(tmp_path: Path) -> None:
    with nats_cluster(tmp_path, size=3) as cluster:
        assert cluster.password
        for node in cluster.nodes:
            assert node.config_path.stat().st_mode & 0o777 == 0o600  # it holds the password
        plain = cluster.plain_urls
        anonymous = await _refusal(plain)
        assert anonymous is not None and "without a password" in anonymous
        assert "SPINDLE_CLUSTER__PASSWORD" in anonymous
        wrong = await _refusal(plain, password="not-the-password")
        assert wrong is not None and "with a password" in wrong
        assert await _refusal(plain, user="intruder", password=cluster.password) is not None
        # The right user and password: the three nodes (their routes signed in too) store
        # a replicated stream and answer.
        async with open_jetstream(
            plain, replicas=3, user=cluster.user, password=cluster.password
        ) as conn:
            transport = await open_transport(conn)
            await transport.route("t1", "/r")
            assert await transport.root_of("t1") == "/r"
        # A URL may carry them as well.
        assert await _refusal(cluster.urls) is None


async def test_an_open_server_is_only_made_on_request(tmp_path: Path) -> None:
    with nats_cluster(tmp_path, size=1, password=None) as cluster:
        assert cluster.urls == cluster.plain_urls
        assert "authorization" not in cluster.nodes[0].config_path.read_text()
        assert await _refusal(cluster.urls) is None
